"""expandable-segments: the CUDA caching allocator's expandable segments (P37), the fix of
TP407 (memory fragmented: reserved far above allocated, or allocation retries in the step).

With ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` the allocator maps its memory in
segments that grow in place instead of fixed-size blocks, so blocks of changing sizes stop
leaving unusable gaps, and a step that used to free the cache and retry ``cudaMalloc`` (a
device-wide sync) no longer has to. Tried only where the doctor saw fragmentation; the
user's own PYTORCH_CUDA_ALLOC_CONF always stands.

Applied in the child before the script runs through the allocator's own setter (what the
environment variable feeds, read before the first CUDA allocation); in your code it is the
environment variable, set before Python starts (the diff says so, it cannot be an edit).
"""

from __future__ import annotations

import os

from torchpace.knobs._common import NO_ACCELERATOR
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable

ENV = "PYTORCH_CUDA_ALLOC_CONF"


class ExpandableSegments(Knob):
    name = "expandable-segments"
    title = f"{ENV}=expandable_segments:True"
    answers = ("TP407",)
    practices = ("P37",)
    cuda_only = "a setting of the CUDA caching allocator"

    def plan(self, ctx: TuneContext) -> Plan:
        if not ctx.accelerator:
            return not_applicable(f"{NO_ACCELERATOR}: {self.cuda_only}")
        own = os.environ.get(ENV, "")
        if "expandable_segments" in own:
            return not_applicable(f"you set {ENV}={own}: your setting stands")
        if "TP407" not in ctx.finding_codes:
            return not_applicable(
                "the doctor saw no fragmentation (reserved close to allocated, no allocation "
                "retries): nothing for expandable segments to fix"
            )
        return Plan((True,), "the doctor saw fragmented CUDA memory (TP407)")

    def apply(self, value, runtime) -> str:
        import torch

        setting = f"expandable_segments:{bool(value)}"
        # torch 2.14 deprecates torch.cuda.memory._set_allocator_settings (a FutureWarning)
        # for the accelerator-wide setter; older releases have only the former
        setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
        if setter is None:
            setter = torch.cuda.memory._set_allocator_settings
        setter(setting)
        return f"the CUDA caching allocator set to {setting} (as {ENV} would)"

    def describe(self, value) -> str:
        return f"expandable_segments:{bool(value)}"

    def source_edits(self, value) -> list[SourceEdit]:
        return [
            SourceEdit(
                "environment",
                note=f"set {ENV}=expandable_segments:{bool(value)} in the environment that "
                "starts training (it is read before the first CUDA allocation), or keep "
                "`torchpace run --config`",
            )
        ]


KNOB = ExpandableSegments()
