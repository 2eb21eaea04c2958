"""TP402 empty-cache-in-loop: torch.cuda.empty_cache() inside a loop (seen at run time)."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class EmptyCacheInLoop(Check):
    """TP402 at run time: torch.cuda.empty_cache() called inside the step on a GPU run.

    ## In a profile (torchpace doctor)

    On a GPU run the capture counts `torch.cuda.empty_cache()` calls in each profiled step and
    the host time spent in them; any call inside the step is reported, with that time as the
    saving. It is a lower bound: after emptying the cache the next steps call `cudaMalloc` (and
    synchronise) again, which the trace shows as `cudaMalloc` runtime calls.
    """

    code = "TP402"

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        calls = [s for s in steps if s.empty_cache_calls]
        if not gpu_run(profile) or not steps or not calls:
            return []
        per_step = sum(s.empty_cache_ms for s in steps) / len(steps)
        count = sum(s.empty_cache_calls for s in steps) / len(steps)
        return [
            Finding(
                "TP402",
                evidence={"calls_per_step": r(count, 1), "host_ms_per_step": r(per_step)},
                saving_ms=per_step,
                step_ms=profile.step_ms,
                severity=None if self.worth_reporting(profile, per_step) else "low",
                detail=f"torch.cuda.empty_cache() {count:.1f} times per step, {per_step:.2f} ms "
                "in the call itself",
                fix="remove it from the loop: the caching allocator reuses freed blocks; "
                "emptying the cache makes the next steps call cudaMalloc (and synchronise) again",
                notes=["the saving counts the call only; the re-allocations after it cost more"],
            )
        ]
