"""TP305 clip-before-unscale (P15).

Also under Accelerate with `mixed_precision="fp16"`: `accelerator.backward(loss)` scales the
loss, and the gradients stay scaled until the prepared optimizer's step; a
`torch.nn.utils.clip_grad_*` between the two clips the scaled values. The fix there is
`accelerator.clip_grad_norm_`, which unscales first."""

from __future__ import annotations

import libcst as cst

from torchpace.lint.frameworks import ACCELERATE, CLIP_SETTING, framework_of, mixed_precision_of
from torchpace.lint.names import dotted, positional
from torchpace.lint.rule import Rule
from torchpace.lint.training import exclusive_branches, is_optimizer_step

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


def _is_accelerate_backward(call) -> bool:
    """`accelerator.backward(loss)`: a backward given the loss (a tensor's takes none)."""
    return call.method == "backward" and bool(positional(call.node))


class ClipBeforeUnscale(Rule):
    """## What it does

    Flags `clip_grad_norm_`/`clip_grad_value_` after `scaler.scale(loss).backward()` in the same
    function without `scaler.unscale_(optimizer)` between them.

    ## Why it matters

    With a `GradScaler` the gradients are multiplied by the loss scale (often 65536) until
    `unscale_`; clipping them then compares the scaled norm with the threshold, so clipping cuts
    almost every step far too hard: the run trains, but worse.

    ## Example

    ```python
    scaler.scale(loss).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    ```

    ## Use instead

    ```python
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(optimizer)
    ```

    ## Fix safety

    No automatic fix: the optimizer to unscale is not always known statically.

    ## Under a framework

    Under `Accelerator(mixed_precision="fp16")`, `accelerator.backward(loss)` scales the loss
    and the gradients stay scaled until the prepared optimizer steps:
    `torch.nn.utils.clip_grad_norm_` between the two clips scaled values. Use
    `accelerator.clip_grad_norm_(...)`, which unscales first. In a Lightning or HF Trainer
    script the message adds the framework's setting: `Trainer(gradient_clip_val=...)`,
    `TrainingArguments(max_grad_norm=...)`.
    """

    code = "TP305"
    message = "gradients clipped while still scaled by the GradScaler"
    VALID = (
        "import torch\nfrom accelerate import Accelerator\n"
        "accelerator = Accelerator(mixed_precision='fp16')\naccelerator.backward(loss)\n"
        "accelerator.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n",
        "import torch\nfrom accelerate import Accelerator\n"
        "accelerator = Accelerator(mixed_precision='bf16')\naccelerator.backward(loss)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n",
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
        "import torch\nfrom accelerate import Accelerator\n"
        "accelerator = Accelerator(mixed_precision='fp16')\naccelerator.backward(loss)\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\noptimizer.step()\n",
        "import torch\nscaler.scale(loss).backward()\n"
        "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\nscaler.step(optimizer)\n",
        "from torch.nn.utils import clip_grad_norm_\n"
        "def step(scaler, loss, model, opt):\n    scaler.scale(loss).backward()\n"
        "    clip_grad_norm_(model.parameters(), 1.0)\n",
    )

    def check(self, index):
        framework = framework_of(index)
        advice = CLIP_SETTING.get(framework)
        fp16_accelerate = framework == ACCELERATE and mixed_precision_of(index) == "fp16"
        for function in index.functions:
            if fp16_accelerate:
                yield from self._accelerate(function)
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
                    message = f"{self.message}: call scaler.unscale_ first"
                    yield self.finding(call.node, message + (f"; or {advice}" if advice else ""))

    def _accelerate(self, function):
        backward = None  # the last accelerator.backward not yet followed by a step
        for call in function.calls:
            if _is_accelerate_backward(call):
                backward = call
            elif is_optimizer_step(call):
                backward = None
            elif backward is not None and call.name in CLIPS:
                yield self.finding(
                    call.node,
                    "gradients clipped while still scaled by Accelerate's fp16 loss scale: "
                    f"{CLIP_SETTING[ACCELERATE]}",
                )
