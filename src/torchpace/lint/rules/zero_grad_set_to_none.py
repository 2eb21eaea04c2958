"""TP303 zero-grad-set-to-none-false (P09), with an unsafe fix.

The fix is unsafe because a gradient of None and a gradient of zeros are not the same to an
optimizer: a parameter that gets no gradient in a step (an unused branch, a frozen head, a
GAN's other network) is skipped when its gradient is None, but still moved by momentum and
weight decay when its gradient is zeros. The trained values differ.
"""

from __future__ import annotations

from torchpace.lint.edits import remove_arg
from torchpace.lint.names import dotted, is_false
from torchpace.lint.rule import UNSAFE, Rule


class ZeroGradSetToNoneFalse(Rule):
    """## What it does

    Flags `zero_grad(set_to_none=False)`, except in a file that writes into gradients in place
    (`p.grad += g`, `p.grad.add_(g)`, `p.grad /= n`): such code needs the zeros (on `None` it
    raises), as a parameter server that sums workers' gradients does.

    ## Why it matters

    Zeroing writes every gradient tensor (a memset kernel per parameter) and the next backward
    then adds into it; setting gradients to `None` skips the memset and lets backward write
    fresh. `set_to_none=True` is the default since torch 2.0, so only the explicit `False` is
    flagged.

    ## Example

    ```python
    optimizer.zero_grad(set_to_none=False)
    ```

    ## Use instead

    ```python
    optimizer.zero_grad()
    ```

    ## Fix safety

    **Unsafe** fix (`--fix --unsafe-fixes`): the `set_to_none=False` argument is removed. A
    gradient of `None` and a gradient of zeros are not the same to an optimizer: a parameter
    that gets no gradient in some step (a branch used only sometimes, a frozen head, the other
    network of a GAN) is skipped by the optimizer when its gradient is `None`, but still moved
    by momentum and weight decay when it is zeros, so the trained weights differ. Code that
    reads `p.grad` between `zero_grad` and `backward` also sees `None` instead of zeros. Apply
    it after checking that every parameter gets a gradient in every step, or that the difference
    is wanted (it is the default since torch 2.0).
    """

    code = "TP303"
    message = "zero_grad(set_to_none=False) writes zeros into every gradient"
    fix_title = (
        "drop set_to_none=False (parameters that get no gradient in a step are then skipped "
        "by the optimizer instead of moved by momentum and weight decay)"
    )
    fix_safety = UNSAFE
    VALID = (
        "optimizer.zero_grad()",
        "optimizer.zero_grad(set_to_none=True)",
        "for p, g in zip(model.parameters(), grads):\n    p.grad += g\n"
        "optimizer.step()\noptimizer.zero_grad(set_to_none=False)\n",
    )
    INVALID = (
        "optimizer.zero_grad(set_to_none=False)",
        "model.zero_grad(False)",
    )

    def check(self, index):
        if _writes_into_gradients(index):
            return  # `p.grad += g` needs the zeros: with None it raises (a parameter server)
        for call in index.calls:
            if call.method != "zero_grad" or len(call.node.args) != 1:
                continue
            arg = call.node.args[0]
            if arg.star or (arg.keyword is not None and arg.keyword.value != "set_to_none"):
                continue
            if is_false(arg.value):
                yield self.finding(call.node, self.message, call.node, remove_arg(call.node, arg))


# In-place writes into a gradient that exist only if the gradient is a tensor.
IN_PLACE = {"add_", "copy_", "mul_", "div_", "sub_", "zero_", "fill_"}


def _writes_into_gradients(index) -> bool:
    """`p.grad += g`, `p.grad.add_(g)`, `p.grad /= n`: code that relies on gradients being
    tensors (zeros) after zero_grad, and would fail on None."""
    if any(site.target and site.target.endswith(".grad") for site in index.aug_assigns):
        return True
    return any(
        call.method in IN_PLACE and (dotted(call.receiver) or "").endswith(".grad")
        for call in index.calls
    )
