"""TP105 tensor-created-then-moved (P06), with a safe fix."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.edits import append_arg, keyword_arg
from torchpace.lint.names import dotted, has_star_args, keyword
from torchpace.lint.rule import SAFE, Rule
from torchpace.lint.rules._names import DTYPES

FACTORIES = {
    f"torch.{f}"
    for f in [
        "rand",
        "randn",
        "randint",
        "randperm",
        "zeros",
        "ones",
        "empty",
        "full",
        "arange",
        "eye",
        "linspace",
        "logspace",
        "tensor",
        "as_tensor",
    ]
}


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


class TensorCreatedThenMoved(Rule):
    code = "TP105"
    message = "tensor created on the CPU and moved at once"
    fix_title = "create it on the device: pass device= to the factory"
    fix_safety = SAFE
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
    )

    def check(self, index):
        for call in index.calls:
            if call.method not in ("cuda", "to") or not isinstance(call.receiver, cst.Call):
                continue
            factory = call.receiver
            if index.imports.resolve(factory.func) not in FACTORIES:
                continue
            if has_star_args(factory) and any(a.star == "**" for a in factory.args):
                continue  # **kwargs may already carry a device
            if keyword(factory, "device") is not None:
                continue
            device = _target_device(call.node, call.method)
            if device is None:
                continue
            fixed = append_arg(factory, keyword_arg("device", device))
            message = f"{self.message}: pass device= to {dotted(factory.func)}()"
            yield self.finding(call.node, message, call.node, fixed)
