"""TP401 tensor-accumulated-across-steps (P22)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule
from torchpace.lint.training import backward_target


class TensorAccumulatedAcrossSteps(Rule):
    """## What it does

    Flags `total += loss` (or `total = total + loss`) in a loop, where `loss` is the tensor
    passed to `.backward()` in that loop, without `.item()` or `.detach()`.

    ## Why it matters

    The accumulated tensor keeps a reference to every step's autograd graph (activations
    included), so memory grows step after step until the process runs out of memory.

    ## Example

    ```python
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        total_loss += loss
    ```

    ## Use instead

    ```python
        total_loss += loss.detach()   # stays on the device, no graph kept
    ```

    ## Fix safety

    No automatic fix: `.detach()` (no sync) and `.item()` (a sync per step) are both valid
    choices.
    """

    code = "TP401"
    message = "loss tensor accumulated across iterations keeps every step's graph alive"
    VALID = (
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total += loss.item()\n",
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total += loss.detach()\n",
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    loss = loss.item()\n"
        "    total += loss\n",
        "for x in loader:\n    loss = f(x)\n    total = 0\n    total += loss\n"
        "    loss.backward()\n",
    )
    INVALID = (
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    total_loss += loss\n",
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    losses.append(loss)\n",
    )

    def check(self, index):
        for site in index.aug_assigns:
            if not site.loops or not isinstance(site.node.operator, cst.AddAssign):
                continue
            loop = site.loops[-1]
            value = dotted(site.value)
            if site.target not in loop.assigned and self._still_the_loss(loop, value, site.seq):
                yield self.finding(site.node, f"{self.message}: add {value}.detach() or .item()")
        for loop in index.loops:
            for call in loop.calls:
                if call.method != "append" or len(call.node.args) != 1:
                    continue
                value = dotted(call.node.args[0].value)
                if dotted(call.receiver) not in loop.assigned and self._still_the_loss(
                    loop, value, call.seq
                ):
                    yield self.finding(
                        call.node, f"{self.message}: append {value}.detach() or .item()"
                    )

    @staticmethod
    def _still_the_loss(loop, name: str | None, seq: int) -> bool:
        """``name`` is the tensor backpropagated in ``loop`` and, at ``seq``, not yet
        rebound to something else (`loss = loss.item()` after the backward)."""
        backwards = [c.seq for c in loop.calls if backward_target(c) == name]
        if name is None or not backwards:
            return False
        last_backward = max((b for b in backwards if b < seq), default=None)
        if last_backward is None:
            return True  # accumulated before the backward: the graph is alive anyway
        return not any(n == name and last_backward < s <= seq for n, s in loop.assignments)
