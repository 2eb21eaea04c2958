"""TP407 allocator-fragmentation: CUDA memory fragmented: reserved far above allocated."""

from __future__ import annotations

from torchpace.doctor import memory
from torchpace.doctor.checks._memory import MIB
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class Fragmentation(Check):
    """TP407: on CUDA the caching allocator holds far more than is allocated at the peak,
    or it had to free its cache and retry an allocation inside the profiled steps.

    ## What it does

    On a CUDA run, at the moment of each profiled step's peak activations the capture reads
    `torch.cuda.memory_allocated()` and `torch.cuda.memory_reserved()`, and at each step's end
    the caching allocator's `num_alloc_retries` (`torch.cuda.memory_stats()`). TP407 is reported
    when the allocator retried inside the profiled steps (medium), or when reserved is at least
    1.5x allocated and at least 1 GiB above it (`Fragmentation.MIN_RESERVED_RATIO`,
    `MIN_CACHED_BYTES`; low).

    ## Why it matters

    A retry means the allocator could not find a free block, freed its whole cache (`cudaFree`,
    which synchronises the device) and allocated again. Reserved far above allocated is memory
    no request can use: the job runs out of memory with gigabytes "free". Variable shapes
    (TP406) are the usual cause.

    ## Example

    ```bash
    python train.py            # "reserved 70 GiB, allocated 41 GiB", then CUDA out of memory
    ```

    ## Use instead

    ```bash
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python train.py
    ```

    ## Fix safety

    `expandable_segments` changes how the allocator maps memory, not results; it must be set
    before the first CUDA allocation (the environment, not the script's middle).
    """

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
