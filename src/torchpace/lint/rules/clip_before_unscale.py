"""TP305 clip-before-unscale (P15)."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule
from torchpace.lint.training import exclusive_branches

CLIPS = {
    "torch.nn.utils.clip_grad_norm_",
    "torch.nn.utils.clip_grad_value_",
    "torch.nn.utils.clip_grad.clip_grad_norm_",
    "torch.nn.utils.clip_grad.clip_grad_value_",
}


def _is_scaled_backward(call) -> bool:
    """`scaler.scale(loss).backward()` with a receiver named like a GradScaler."""
    receiver = call.receiver
    if call.method != "backward" or not isinstance(receiver, cst.Call):
        return False
    func = receiver.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "scale"):
        return False
    return "scaler" in (dotted(func.value) or "").lower()


class ClipBeforeUnscale(Rule):
    code = "TP305"
    message = "gradients clipped while still scaled by the GradScaler"
    VALID = (
        "import torch\nscaler.scale(loss).backward()\nscaler.unscale_(optimizer)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\n",
        "import torch\nloss.backward()\ntorch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n",
        "import torch\nif amp:\n    scaler.scale(loss).backward()\n    scaler.unscale_(opt)\n"
        "    torch.nn.utils.clip_grad_norm_(ps, 1.0)\nelse:\n    loss.backward()\n"
        "    torch.nn.utils.clip_grad_norm_(ps, 1.0)\n",
        "import torch\nif amp:\n    scaler.scale(loss).backward()\nelif clip:\n"
        "    torch.nn.utils.clip_grad_norm_(ps, 1.0)\n",
    )
    INVALID = (
        "import torch\nscaler.scale(loss).backward()\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\n",
        "from torch.nn.utils import clip_grad_norm_\n"
        "def step(scaler, loss, model, opt):\n    scaler.scale(loss).backward()\n"
        "    clip_grad_norm_(model.parameters(), 1.0)\n",
    )

    def check(self, index):
        for function in index.functions:
            backward = None  # the last scaled backward not yet unscaled
            for call in function.calls:
                if _is_scaled_backward(call):
                    backward = call
                elif call.method == "unscale_":
                    backward = None
                elif (
                    backward is not None
                    and call.name in CLIPS
                    and not exclusive_branches(backward, call)  # `if amp: ... else: clip`
                ):
                    yield self.finding(call.node, f"{self.message}: call scaler.unscale_ first")
