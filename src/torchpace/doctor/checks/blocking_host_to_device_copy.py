"""TP103 blocking-host-to-device-copy: Host-to-device copy without non_blocking."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class BlockingCopies(Check):
    """TP103: copies from pinned memory made blocking (no non_blocking=True).

    ## In a profile (torchpace doctor)

    On GPU runs only, the doctor finds copies from pinned memory (`Memcpy HtoD (Pinned ->
    Device)`) whose issuing thread then waits in `cudaStreamSynchronize`: the copy was made
    without `non_blocking=True`. The estimated saving is the host wait in those syncs plus the
    device idle after them (until the next device op). Pageable copies wait too, but there
    `non_blocking` alone does not help: they are TP102.
    """

    code = "TP103"

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or profile.median.h2d_pinned_bytes <= 0:
            return []
        syncs = profile.median.copy_syncs
        saving = profile.median.copy_sync_wait_ms + profile.median.copy_sync_idle_ms
        if syncs < 1 or not self.worth_reporting(profile, saving, "idle"):
            return []
        return [
            Finding(
                "TP103",
                evidence={"blocking_copies_per_step": r(syncs, 1), "host_wait_ms": r(saving)},
                saving_ms=saving,
                step_ms=profile.step_ms,
                cost="idle",  # the copy's wait and the device idle after it (doctor/pricing.py)
                # the pin-memory knob pins the loader's batches and makes their copies
                # non_blocking: there is no knob for non_blocking alone
                knob="pin-memory",
                detail=f"{syncs:.0f} host-to-device copies per step wait for the GPU",
                fix="x.to(device, non_blocking=True) for batches from a pinned DataLoader",
            )
        ]
