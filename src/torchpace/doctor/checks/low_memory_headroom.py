"""TP403 low-memory-headroom: Peak memory close to device capacity."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._data import _peak_and_capacity
from torchpace.doctor.checks._memory import peak_split
from torchpace.doctor.checks.base import Check, gpu_run, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class LowHeadroom(Check):
    """TP403: the step's peak memory is close to the memory there is: the device's on a GPU
    run; on a CPU run what the step's tensors can use under the process's binding limit
    (host RAM, RLIMIT_AS, RLIMIT_DATA, a cgroup's limit)."""

    code = "TP403"

    # Above this share, allocator fragmentation or one longer batch ends in OOM.
    MAX_PEAK_SHARE = 0.90

    def run(self, profile: Profile) -> list[Finding]:
        of = "of the device"
        if gpu_run(profile):
            peak, capacity = _peak_and_capacity(profile)
        else:
            split = peak_split(profile)
            if split is None or not split.usable:
                return []
            peak, capacity = split.peak, split.usable
            of = "of the memory the step can use under " + memory.capacity_phrase(
                split.capacity_kind, split.capacity or 0
            )
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
                detail=f"peak memory is {100 * peak / capacity:.0f}% {of}",
                fix="activation checkpointing, a smaller micro-batch with gradient accumulation, "
                "or bf16 autocast; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against "
                "fragmentation",
            )
        ]
