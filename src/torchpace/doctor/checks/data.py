"""Data loading and host-to-device copies: TP101, TP102, TP103, TP104."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, gpu_run, main_loader, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile

MIB = 2**20


class DataLoaderWithoutWorkers(Check):
    """TP101: the loop waits for batches loaded in its own process (num_workers=0)."""

    # Waiting on data for a tenth of the step is where workers start paying for their
    # start-up and memory; below it the loader is not the bottleneck.
    MIN_WAIT_SHARE = 0.10
    # ...and an absolute floor so that microsecond-scale toy loops are not flagged.
    MIN_WAIT_MS = 1.0

    def run(self, profile: Profile) -> list[Finding]:
        wait, step = profile.median.data_wait_ms, profile.step_ms
        measured = profile.throughput
        unprofiled = measured is not None and measured.unprofiled
        if unprofiled:
            # The same steps as the headline samples/s, and means as it is: the profiler
            # slows op-heavy loading most, and a loop whose batches come at uneven cost
            # waits for them as much as their mean says, not their median.
            wait, step = measured.data_wait_ms_mean, measured.step_ms_mean
        loader = main_loader(profile)
        in_process = (loader is not None and loader.num_workers == 0) or (
            loader is None and profile.loader_iter == "_SingleProcessDataLoaderIter"
        )
        if not in_process or wait < self.MIN_WAIT_MS:
            return []
        if not profile.synthetic_steps and step and wait / step < self.MIN_WAIT_SHARE:
            return []
        evidence = {"data_wait_ms": r(wait), "step_ms": r(step), "num_workers": 0}
        if unprofiled:
            evidence["measured_on"] = f"mean of {measured.steps} unprofiled steps"
        if loader is not None and loader.batch_size:
            evidence["batch_size"] = loader.batch_size
        return [
            Finding(
                "TP101",
                evidence=evidence,
                saving_ms=wait,
                step_ms=step,
                location=loader.location if loader else None,
                knob="num-workers",
                detail=f"the loop waits {wait:.1f} ms per step for batches built in the main "
                f"process ({100 * wait / step:.0f}% of the step)",
                fix="DataLoader(..., num_workers=N, persistent_workers=True, pin_memory=True on "
                "GPU): start with N = usable cores - 1 and measure (`torchpace tune`)",
                notes=[
                    "saving is an upper bound: workers hide loading only while free cores "
                    "remain for them; each worker holds a copy of the dataset object"
                ],
            )
        ]


class PageableCopies(Check):
    """TP102: batches copied to the GPU from pageable (unpinned) host memory."""

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
        if not self.worth_reporting(profile, saving):
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


class BlockingCopies(Check):
    """TP103: copies from pinned memory made blocking (no non_blocking=True)."""

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile) or profile.median.h2d_pinned_bytes <= 0:
            return []
        syncs = profile.median.copy_syncs
        saving = profile.median.copy_sync_wait_ms + profile.median.copy_sync_idle_ms
        if syncs < 1 or not self.worth_reporting(profile, saving):
            return []
        return [
            Finding(
                "TP103",
                evidence={"blocking_copies_per_step": r(syncs, 1), "host_wait_ms": r(saving)},
                saving_ms=saving,
                step_ms=profile.step_ms,
                # the pin-memory knob pins the loader's batches and makes their copies
                # non_blocking: there is no knob for non_blocking alone
                knob="pin-memory",
                detail=f"{syncs:.0f} host-to-device copies per step wait for the GPU",
                fix="x.to(device, non_blocking=True) for batches from a pinned DataLoader",
            )
        ]


class FloatInputTransfer(Check):
    """TP106: float32 batches of shape (N, 1|3, H, W) copied to the device every step.

    It claims only what its evidence shows. With evidence that the floats came from 8-bit
    images (the loader's transform or ``__getitem__`` converts them, or the first batch's
    values lie on a k/255 grid: capture/batch_origin.py), the fix is to copy uint8 and
    convert on the device: a quarter of the bytes. Without it the floats may be data that is
    float by nature: the finding then speaks of the bytes on the bus and of halving them
    (fp16/bf16 on the host), never of images or uint8.
    """

    # uint8 is a quarter of float32: the copy shrinks by this share...
    UINT8_SHRINK = 0.75
    # ...and fp16/bf16 half of it.
    HALF_SHRINK = 0.5
    MIN_BYTES = 1 * MIB  # per step; below it the copy is not worth reshaping the transform

    def run(self, profile: Profile) -> list[Finding]:
        if not gpu_run(profile):
            return []
        nbytes = profile.median.float_image_h2d_bytes
        copy_ms = profile.median.float_image_h2d_ms
        if nbytes < self.MIN_BYTES:
            return []
        loader = main_loader(profile)
        origin = loader.uint8_evidence if loader is not None else None
        if origin:
            saving = copy_ms * self.UINT8_SHRINK
            detail = f"{nbytes / MIB:.1f} MiB of float32 images per step cross the bus"
            fix = (
                "return uint8 tensors from the dataset (no ToTensor/Normalize there), copy "
                "them, then x = x.to(device, non_blocking=True).float().div_(255) and "
                "normalise on the device"
            )
            notes = [
                f"8-bit origin: {origin}",
                "saving counts only the smaller copy; the host also skips the float math",
            ]
        else:
            saving = copy_ms * self.HALF_SHRINK
            detail = f"{nbytes / MIB:.1f} MiB of float32 per step cross the bus"
            fix = (
                "send half the bytes: cast the batch to bfloat16/float16 on the host (or in "
                "the dataset) and back to float32 on the device, if its values allow; pin "
                "the memory first when the copy is pageable (TP102)"
            )
            notes = [
                "no evidence that these floats came from 8-bit images (no ToTensor or /255 "
                "in the loader, values not on a k/255 grid): uint8 is not offered",
                "saving: half the copy time (half the bytes)",
            ]
        if not self.worth_reporting(profile, saving):
            return []
        evidence = {"float32_h2d_mib_per_step": r(nbytes / MIB), "copy_ms": r(copy_ms)}
        if origin:
            evidence["uint8_origin"] = origin
        common = dict(
            evidence=evidence,
            saving_ms=saving,
            step_ms=profile.step_ms,
            location=loader.location if loader else None,
            detail=detail,
            fix=fix,
            notes=notes,
        )
        if origin and _device_transforms_apply(loader):
            return [Finding("TP106", knob="device-transforms", **common)]
        return [Finding("TP106", **common)]


def _device_transforms_apply(loader) -> bool:
    """The device-transforms knob moves a torchvision transform pipeline to the device."""
    return loader is not None and bool(loader.transform)


class DeviceUnderfilled(Check):
    """TP104: the GPU idles and its memory is mostly unused: a bigger batch would fill it."""

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


def _peak_and_capacity(profile: Profile) -> tuple[float | None, float | None]:
    peaks = [peak for key, peak in profile.device_peaks().items() if key.startswith("cuda:")]
    facts_peaks = [
        s.cuda_peak_bytes
        for s in (profile.facts.window if profile.facts else [])
        if s.cuda_peak_bytes
    ]
    peak = max(peaks + facts_peaks) if peaks or facts_peaks else None
    capacity = profile.memory_capacity
    if capacity is None and profile.process is not None:
        capacity = profile.process.cuda_total_memory_bytes
    return peak, capacity


CHECKS = [
    DataLoaderWithoutWorkers(),
    PageableCopies(),
    BlockingCopies(),
    FloatInputTransfer(),
    DeviceUnderfilled(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
