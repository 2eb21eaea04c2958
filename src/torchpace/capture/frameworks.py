"""Which training framework drives the user's optimizer steps, read from the call stack of
the first step: the doctor then speaks that framework's language in its fixes
(``Trainer(precision="bf16-mixed")`` rather than ``torch.autocast``)."""

from __future__ import annotations

import sys

from torchpace.frameworks import ACCELERATE, HF_TRAINER, LIGHTNING

# Module-name prefixes, most specific first: the HF Trainer steps through Accelerate, and
# Lightning through Fabric.
DRIVERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (HF_TRAINER, ("transformers.trainer",)),
    (LIGHTNING, ("lightning.", "pytorch_lightning.", "lightning_fabric.")),
    (ACCELERATE, ("accelerate.",)),
)


def driving_framework(skip: int = 1) -> str | None:
    """The framework whose code is on the stack of this call (an optimizer step), if any."""
    modules = set()
    frame = sys._getframe(skip)
    while frame is not None:
        modules.add(frame.f_globals.get("__name__") or "")
        frame = frame.f_back
    for name, prefixes in DRIVERS:
        if any(m.startswith(prefixes) for m in modules):
            return name
    return None
