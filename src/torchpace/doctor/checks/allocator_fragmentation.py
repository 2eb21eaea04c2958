"""TP407 allocator-fragmentation: CUDA memory fragmented: reserved far above allocated."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class Fragmentation(Check):
    """TP407: on CUDA the caching allocator holds far more than is allocated at the peak,
    or it had to free its cache and retry an allocation inside the profiled steps."""

    code = "TP407"

    # Reserved this many times the allocated bytes at the peak...
    MIN_RESERVED_RATIO = 1.5
    # ...and at least this much unallocated: below it, the cache is not worth a finding.
    MIN_CACHED_BYTES = 2**30

    def run(self, profile: Profile) -> list[Finding]:
        steps = profile.facts.memory.steps if profile.facts else []
        peaks = [s for s in steps if s.split.reserved and s.split.allocated]
        retries = sum(s.alloc_retries for s in steps)
        if not peaks and not retries:
            return []
        worst = max(peaks, key=lambda s: s.split.reserved - s.split.allocated, default=None)
        cached = worst.split.reserved - worst.split.allocated if worst else 0
        ratio = worst.split.reserved / worst.split.allocated if worst else 0.0
        fragmented = cached >= self.MIN_CACHED_BYTES and ratio >= self.MIN_RESERVED_RATIO
        if not fragmented and not retries:
            return []
        evidence = {"alloc_retries_in_window": retries}
        if worst:
            evidence |= {
                "reserved_mib": r(worst.split.reserved / MIB),
                "allocated_mib": r(worst.split.allocated / MIB),
            }
        detail = f"{memory.size(cached)} reserved but not allocated at the peak ({ratio:.1f}x)"
        if retries:
            detail = f"the allocator freed its cache and retried {retries} times in the window"
        return [
            Finding(
                "TP407",
                evidence=evidence,
                severity="medium" if retries else "low",
                detail=detail,
                fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set before the first "
                "CUDA allocation); fixed shapes (TP406) keep blocks reusable",
                notes=["a retry synchronises the device and calls cudaFree/cudaMalloc"],
            )
        ]
