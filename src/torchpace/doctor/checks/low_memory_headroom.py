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
    (host RAM, RLIMIT_AS, RLIMIT_DATA, a cgroup's limit).

    ## What it does

    Reports a GPU run whose peak allocated device memory in a step is at least 90% of the
    device's memory (`LowHeadroom.MAX_PEAK_SHARE`). The peak comes from the captured per-step
    `torch.cuda.max_memory_allocated` (run facts) or from the trace's `[memory]` events; the
    capacity from the device properties.

    On a CPU run the same share is taken of the memory the step's tensors can use under the
    process's binding limit: the least room among the host's RAM, `RLIMIT_AS`, `RLIMIT_DATA` and
    the cgroup's memory limit, less what that limit counted besides the step's tensors at the
    peak (docs/doctor.md, Memory). A job run under `ulimit -v`, `ulimit -d` or a container's
    `--memory` is told it is near its own limit, named: "peak memory is 94% of the memory the
    step can use under the 1.02 GiB RLIMIT_DATA".

    ## Why it matters

    Near the limit, allocator fragmentation, one longer sequence or one more evaluation batch
    ends the run with an out-of-memory error, often hours in; the caching allocator also starts
    freeing and re-allocating (`cudaFree`/`cudaMalloc`), which synchronises the device and slows
    every step.

    ## Example

    ```python
    loader = DataLoader(train_set, batch_size=256)    # peak 38.5 of 40 GiB
    ```

    ## Use instead

    ```python
    # smaller micro-batches with gradient accumulation, activation checkpointing, or bf16:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(x).loss
    # and against fragmentation:
    #   PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    ```

    ## Fix safety

    Each remedy trades something: checkpointing costs recomputation, accumulation changes the
    step count per epoch, autocast changes numerics. No saving in time is estimated; the finding
    is about the risk of running out.
    """

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
