"""Memory: TP401 (growth across steps: a leak), TP403 (peak close to capacity)."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.checks.data import _peak_and_capacity
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

KIB = 1024


class MemoryGrowth(Check):
    """TP401: allocated memory at the end of each step rises steadily: something keeps
    tensors (often whole autograd graphs, via ``total += loss``) alive across steps."""

    # A steady step loop allocates the same at every step end; a line this straight
    # (r^2) through a rise in most steps is growth, not noise.
    MIN_R2 = 0.9
    MIN_RISING_SHARE = 0.75
    # Allocator totals (trace [memory] events, CUDA allocated bytes) are exact: a steady
    # loop ends every step at the same byte count, so even a small steady rise is a leak.
    MIN_BYTES_PER_STEP = 512

    def run(self, profile: Profile) -> list[Finding]:
        for g in profile.growth:
            if (
                g.bytes_per_step >= self.MIN_BYTES_PER_STEP
                and g.r2 >= self.MIN_R2
                and g.rising_share >= self.MIN_RISING_SHARE
            ):
                return [self._finding(profile, g)]
        return []

    def _finding(self, profile: Profile, g) -> Finding:
        evidence = {
            "growth_kib_per_step": r(g.bytes_per_step / KIB, 1),
            "fit_r2": r(g.r2, 3),
            "steps_fitted": g.steps,
            "allocated_first_mib": r(g.first / 2**20),
            "allocated_last_mib": r(g.last / 2**20),
            "measured_on": g.source,
        }
        _, capacity = _peak_and_capacity(profile)
        if capacity and "cuda" in g.source:
            evidence["steps_until_full"] = int((capacity - g.last) / g.bytes_per_step)
        return Finding(
            "TP401",
            evidence=evidence,
            severity="high",
            detail=f"memory grows {g.bytes_per_step / KIB:.1f} KiB every step ({g.source})",
            fix="accumulate plain numbers: total += loss.item() (or loss.detach()); do not keep "
            "outputs, losses or hidden states of past steps in lists or attributes",
            notes=["a leak costs no time per step until memory runs out: ranked by severity"],
        )


class LowHeadroom(Check):
    """TP403: the step's peak device memory is close to the device's capacity."""

    # Above this share, allocator fragmentation or one longer batch ends in OOM.
    MAX_PEAK_SHARE = 0.90

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        peak, capacity = _peak_and_capacity(profile)
        if peak is None or not capacity or peak / capacity < self.MAX_PEAK_SHARE:
            return []
        return [
            Finding(
                "TP403",
                evidence={
                    "peak_gib": r(peak / 2**30),
                    "capacity_gib": r(capacity / 2**30),
                    "peak_pct": r(100 * peak / capacity, 1),
                },
                severity="medium",
                detail=f"peak memory is {100 * peak / capacity:.0f}% of the device",
                fix="activation checkpointing, a smaller micro-batch with gradient accumulation, "
                "or bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
                "fragmentation",
            )
        ]


CHECKS = [MemoryGrowth(), LowHeadroom()]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
