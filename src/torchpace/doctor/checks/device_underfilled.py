"""TP104 device-underfilled: Batch too small to fill the device."""

from __future__ import annotations

from torchpace.doctor.checks._data import _peak_and_capacity
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class DeviceUnderfilled(Check):
    """TP104: the GPU idles and its memory is mostly unused: a bigger batch would fill it.

    ## What it does

    Reports a GPU run in which the device idles for a large part of every step **and** the
    step's peak device memory is a small share of the device: the batch leaves both compute and
    memory unused. Thresholds (`DeviceUnderfilled` in `src/torchpace/doctor/checks/data.py`):
    the GPU idles at least 40% of the step and the peak memory stays under 25% of the device's
    memory (room for a batch four times larger).

    ## Why it matters

    A GPU runs a small batch in about the same time as a larger one until its SMs are full;
    below that, samples per second grow almost linearly with the batch. Article 002 doubled and
    quadrupled the batch as one of its optimisation steps for that reason.

    ## Example

    ```python
    loader = DataLoader(train_set, batch_size=8)          # on a 40 GiB GPU, 2 GiB peak
    ```

    ## Use instead

    ```python
    loader = DataLoader(train_set, batch_size=64)          # and scale the learning rate with it
    ```

    ## Fix safety

    Opt-in only: a larger batch changes training semantics (the effective learning rate, the
    number of optimizer steps per epoch, batch-norm statistics, convergence). The doctor never
    estimates a saving for it; `torchpace tune` measures it only when asked to.
    """

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
