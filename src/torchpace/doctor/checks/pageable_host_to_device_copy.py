"""TP102 pageable-host-to-device-copy: Batches copied from pageable memory."""

from __future__ import annotations

from torchpace.doctor.checks._data import MIB
from torchpace.doctor.checks.base import Check, gpu_run, main_loader, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class PageableCopies(Check):
    """TP102: batches copied to the GPU from pageable (unpinned) host memory.

    ## In a profile (torchpace doctor)

    On GPU runs only, the doctor sums the host-to-device copies (`Memcpy HtoD (Pageable ->
    Device)` in the trace) launched in each step: bytes, device time, and the host time blocked
    in the `cudaMemcpyAsync` calls that issued them. It reports TP102 from 1 MiB of pageable
    copies per step. The estimated saving is the host time blocked minus the time the same bytes
    take from pinned memory at a conservative 12 GB/s (PCIe 3.0 x16), assuming no overlap with
    compute, so it is a lower bound when `non_blocking=True` is also used.
    """

    code = "TP102"

    # Practical host-to-device bandwidth from pinned memory, by the GPU's generation and
    # the host link it ships with (conservative: about half the link's peak): PCIe 3.0 x16
    # before sm80, 4.0 on sm80 (A100), 5.0 from sm90 (H100). The copy time that remains
    # after pinning; a link slower than this makes the saving smaller.
    PINNED_H2D_GBPS = 12.0
    PINNED_H2D_GBPS_BY_CAPABILITY = ((9, 0), 40.0), ((8, 0), 22.0)
    # Below a mebibyte per step, pinning cannot save a measurable amount.
    MIN_PAGEABLE_BYTES = 1 * MIB

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        nbytes = profile.median.h2d_pageable_bytes
        blocked = profile.median.h2d_pageable_host_ms
        if nbytes < self.MIN_PAGEABLE_BYTES:
            return []
        gbps = self.pinned_gbps(profile)
        saving = max(0.0, blocked - nbytes / (gbps * 1e9) * 1000)
        if not self.worth_reporting(profile, saving, "device"):
            return []
        loader = main_loader(profile)
        return [
            Finding(
                "TP102",
                evidence={
                    "pageable_h2d_mib_per_step": r(nbytes / MIB),
                    "host_blocked_ms": r(blocked),
                    "copy_gbps": r(nbytes / (blocked * 1e6), 1) if blocked else 0.0,
                    "pinned_h2d_mib_per_step": r(profile.median.h2d_pinned_bytes / MIB),
                },
                saving_ms=saving,
                step_ms=profile.step_ms,
                cost="device",  # the copy's time: its bytes, not per-op cost (doctor/pricing.py)
                location=loader.location if loader else None,
                knob="pin-memory",
                detail=f"{nbytes / MIB:.1f} MiB per step copied from pageable memory, blocking "
                f"the host {blocked:.1f} ms",
                fix="DataLoader(..., pin_memory=True) and x.to(device, non_blocking=True); a "
                "custom batch type needs a pin_memory() method",
                notes=[f"saving assumes {gbps:g} GB/s once pinned, no overlap"],
            )
        ]

    def pinned_gbps(self, profile: Profile) -> float:
        for capability, gbps in self.PINNED_H2D_GBPS_BY_CAPABILITY:
            if profile.capability is not None and profile.capability >= capability:
                return gbps
        return self.PINNED_H2D_GBPS
