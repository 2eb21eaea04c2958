"""TP104 device-underfilled: Batch too small to fill the device."""

from __future__ import annotations

from torchpace.doctor.checks._data import _peak_and_capacity
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class DeviceUnderfilled(Check):
    """TP104: the GPU idles and its memory is mostly unused: a bigger batch would fill it."""

    code = "TP104"

    # The device idles at least this share of the step...
    MIN_IDLE_SHARE = 0.40
    # ...while the step's peak memory stays under this share of the device: room for 4x.
    MAX_MEMORY_SHARE = 0.25

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or not profile.step_ms:
            return []
        idle_share = profile.median.gpu_idle_ms / profile.step_ms
        peak, capacity = _peak_and_capacity(profile)
        if peak is None or not capacity or idle_share < self.MIN_IDLE_SHARE:
            return []
        if peak / capacity > self.MAX_MEMORY_SHARE:
            return []
        return [
            Finding(
                "TP104",
                evidence={
                    "gpu_idle_pct": r(100 * idle_share, 1),
                    "peak_memory_gib": r(peak / 2**30),
                    "device_memory_gib": r(capacity / 2**30),
                },
                severity="low",
                knob="batch-size",
                detail=f"the GPU idles {100 * idle_share:.0f}% of the step and uses "
                f"{100 * peak / capacity:.0f}% of its memory",
                fix="a larger batch (with the learning rate scaled to it) fills the device",
                notes=[
                    "changes training semantics (batch size, learning rate): opt-in only; "
                    "the saving is not estimated: `torchpace tune` measures it"
                ],
            )
        ]
