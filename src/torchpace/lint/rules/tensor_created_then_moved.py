"""TP105 tensor-created-then-moved (P06), with a fix that is safe only where it keeps every
value the program computes.

Creating a tensor on the device instead of creating it on the CPU and copying it computes
the same values only when the values do not depend on where they are made:

- random factories draw from the device's generator instead of the CPU's, so a seeded run
  gets other numbers (another data split, other samples): unsafe;
- `linspace`/`logspace`, and `arange` with a fractional start or step, are computed by the
  device's own kernel, with its own precision and order of operations, so the last bit may
  differ: unsafe;
- `zeros`, `ones`, `full`, `eye`, `empty`, integer `arange` and `tensor`/`as_tensor` of given
  data are exact on any device: safe.

Factories whose arguments only make sense on the CPU (`pin_memory=`, `out=`), or which make
a leaf that autograd tracks (`requires_grad=`: the copy is not a leaf, the device tensor
would be), get no fix at all.
"""

from __future__ import annotations

import libcst as cst

from torchpace.lint.edits import append_arg, keyword_arg
from torchpace.lint.names import dotted, has_star_args, keyword, positional
from torchpace.lint.rule import SAFE, UNSAFE, Rule
from torchpace.lint.rules._names import DTYPES

RANDOM = {f"torch.{f}" for f in ["rand", "randn", "randint", "randperm"]}
COMPUTED = {"torch.linspace", "torch.logspace"}  # values from the device's own arithmetic
EXACT = {
    f"torch.{f}" for f in ["zeros", "ones", "empty", "full", "eye", "tensor", "as_tensor", "arange"]
}
FACTORIES = RANDOM | COMPUTED | EXACT
# Keywords that make the device tensor differ from the moved copy, or fail on a device.
NOT_FIXABLE_WITH = {
    "requires_grad": "on the device it would be a leaf, not a copy of one",
    "pin_memory": "pin_memory is for CPU tensors",
    "out": "out= names a CPU tensor",
}
# torch.arange(start, end, step): where start and step sit when given by position.
ARANGE_START, ARANGE_STEP = 0, 2


def _target_device(move: cst.Call, method: str) -> cst.BaseExpression | None:
    """The device of `.cuda()` / `.to(device)` when that is all the move does; else None."""
    if method == "cuda":
        return cst.SimpleString('"cuda"') if not move.args else None
    if len(move.args) != 1 or move.args[0].star:
        return None
    arg = move.args[0]
    if arg.keyword is not None:
        return arg.value if arg.keyword.value == "device" else None
    value = arg.value
    if isinstance(value, cst.SimpleString):
        # `.to("cpu")` of a new tensor moves nothing; any accelerator benefits
        text = value.evaluated_value
        return value if isinstance(text, str) and not text.startswith(("cpu", "meta")) else None
    name = dotted(value)
    if name is not None and name not in DTYPES and "dtype" not in name.lower():
        lowered = name.lower()
        if any(word in lowered for word in ("device", "rank", "gpu", "cuda")):
            return value
    if isinstance(value, cst.Call) and dotted(value.func) in ("torch.device", "device"):
        return value
    return None


def _is_integer_literal(expr: cst.BaseExpression) -> bool:
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus):
        expr = expr.expression
    return isinstance(expr, cst.Integer)


def _integer_arange(factory: cst.Call) -> bool:
    """`arange(n)`, or a start and step written as integers: every value is exact.

    With one positional argument it is the end (start 0, step 1): the values are the
    integers below it, whatever its type."""
    args = positional(factory)
    start = keyword(factory, "start")
    step = keyword(factory, "step")
    if len(args) >= 2 and start is None:
        start = args[ARANGE_START]
    if len(args) >= 3 and step is None:
        step = args[ARANGE_STEP]
    return all(
        arg is None or _is_integer_literal(arg.value if isinstance(arg, cst.Arg) else arg)
        for arg in (start, step)
    )


def fix_safety_of(factory_name: str, factory: cst.Call) -> tuple[str, str]:
    """(safety, why) of creating this factory's tensor on the device instead of moving it."""
    if factory_name in RANDOM:
        return UNSAFE, "the device's random generator draws other numbers than the CPU's"
    if factory_name in COMPUTED or (
        factory_name == "torch.arange" and not _integer_arange(factory)
    ):
        return UNSAFE, "the device computes fractional values with its own arithmetic"
    return SAFE, ""


class TensorCreatedThenMoved(Rule):
    """## What it does

    Flags a tensor factory (`torch.rand`, `randn`, `zeros`, `ones`, `empty`, `full`, `arange`,
    `eye`, `linspace`, ...) whose result is moved at once with `.cuda()` or `.to(device)`.

    ## Why it matters

    The tensor is first allocated and filled on the CPU, then copied: two allocations, a host
    fill and a transfer, where creating it on the device costs one kernel.

    ## Example

    ```python
    noise = torch.randn(batch, 128).cuda()
    mask = torch.zeros(n, n).to(device)
    ```

    ## Use instead

    ```python
    noise = torch.randn(batch, 128, device="cuda")
    mask = torch.zeros(n, n, device=device)
    ```

    ## Fix safety

    The fix drops the move and passes its device as the factory's `device=` argument. Whether it
    is safe depends on the factory (the standard is in
    [docs/lint.md](../lint.md#fixes-and-their-safety): a safe fix must not change any value the
    program computes):

    - **safe** for factories whose values do not depend on where they are made: `zeros`, `ones`,
      `full`, `eye`, `empty`, `tensor` and `as_tensor` of given data, and `arange` whose start
      and step are integers (`arange(n)`, `arange(2, n, 3)`).
    - **unsafe** for random factories (`rand`, `randn`, `randint`, `randperm`): on the device
      the numbers come from the device's generator, not the CPU's, so a seeded run draws other
      numbers: another train/validation split, other samples.
      `torch.randperm(len(labels)).to(device)` and `torch.randperm(len(labels), device=device)`
      give different permutations for the same seed on CUDA.
    - **unsafe** for `linspace`, `logspace` and `arange` with a fractional or unknown start or
      step: the device's kernel computes the values, with its own precision and order of
      operations (an accumulator type, a fused multiply-add), so the last bit may differ.
    - **no fix** when the factory has `requires_grad=` (the moved copy is not a leaf; the tensor
      created on the device would be one, so its `.grad` and what an optimizer holding it does
      would change), `pin_memory=` or `out=` (CPU-only arguments); the finding is still
      reported.

    Not offered either when the factory already has a `device=`, when the move has other
    arguments (dtype, `non_blocking`, `memory_format`), or when the target is not a device (e.g.
    `.to(other_tensor)`).
    """

    code = "TP105"
    message = "tensor created on the CPU and moved at once"
    fix_title = "create it on the device: pass device= to the factory"
    fix_safety = SAFE  # exact factories; random and computed ones are unsafe, see above
    VALID = (
        "import torch\nx = torch.rand(4, device='cuda')",
        "import torch\nx = torch.zeros(4).to(torch.float16)",
        "import torch\nx = torch.zeros(4, **kw).cuda()",
        "import torch\nx = torch.zeros(4).to(other)",
        "import torch\nx = torch.zeros(4).to('cpu')",
    )
    INVALID = (
        "import torch\nx = torch.rand(4).cuda()",
        "import torch\nx = torch.zeros(2, 3).to(device)",
        "import torch\nw = torch.zeros(3, requires_grad=True).to(device)",
    )

    def check(self, index):
        for call in index.calls:
            if call.method not in ("cuda", "to") or not isinstance(call.receiver, cst.Call):
                continue
            factory = call.receiver
            name = index.imports.resolve(factory.func)
            if name not in FACTORIES:
                continue
            if has_star_args(factory) and any(a.star == "**" for a in factory.args):
                continue  # **kwargs may already carry a device
            if keyword(factory, "device") is not None:
                continue
            device = _target_device(call.node, call.method)
            if device is None:
                continue
            message = f"{self.message}: pass device= to {dotted(factory.func)}()"
            blocking = [k for k in NOT_FIXABLE_WITH if keyword(factory, k) is not None]
            if blocking:
                # Reported, but the fix would change the program: a leaf tensor instead of a
                # copy (requires_grad), or arguments that only exist for CPU tensors.
                why = NOT_FIXABLE_WITH[blocking[0]]
                yield self.finding(call.node, f"{message} (no automatic fix: {why})")
                continue
            safety, why = fix_safety_of(name, factory)
            if safety == UNSAFE:
                message = f"{message} (unsafe fix: {why})"
            fixed = append_arg(factory, keyword_arg("device", device))
            yield self.finding(call.node, message, call.node, fixed, safety)
