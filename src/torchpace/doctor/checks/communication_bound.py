"""TP506 communication-bound: Most GPU time in collectives, little of it overlapped with compute."""

from __future__ import annotations

from torchpace.doctor.checks._environment import COMM_BOUND_FIX
from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class CommunicationBound(Check):
    """TP506: most of the GPU's time in communication kernels (NCCL), little of it
    overlapped with compute, seen in one rank's trace (the cross-rank view,
    doctor/ranks.py, applies the same thresholds to every rank and names the worst).

    Read from the device's split of the profiled steps (doctor/breakdown.py): the NCCL
    kernels' share of the device's busy time, and the share of that time during which a
    compute kernel also ran. The cost is the communication left alone on the device per
    step (with the other ranks' traces, the wait for the slowest rank included): what
    overlapping it with the backward, or sending less, can give back at most.

    ## What it sees

    For a GPU rank's trace: the NCCL kernels run 50% or more of the device's busy time, and less
    than 30% of that NCCL time overlaps a compute kernel. The estimated saving is the exposed
    communication per step: the time the device runs only NCCL kernels (no compute kernel beside
    them), the "communication alone" of the device's split of the step (docs/doctor.md, "The
    step breakdown"); with the other ranks' traces the wait for the slowest rank is part of it.
    An upper bound: overlapping all of it with compute, or sending nothing, would give it back.

    It is seen in the report of a single trace or script (from the device's split of the
    profiled steps) and in the cross-rank view of `--trace DIR` / `launch --doctor`, which
    applies the same thresholds to every rank (NCCL share of all kernel time, overlap with
    compute kernels, over the trace) and names the most communication-bound rank; that one
    replaces the lowest rank's. The figures agree with HolisticTraceAnalysis's
    `get_comm_comp_overlap` and temporal breakdown on the same window (docs/doctor.md). The
    shared 2-rank NCCL traces (`sampled_rank0/1`): rank 0's NCCL kernels are 72% of its busy
    time, 15% overlapped: 168.5 ms per step of a 615 ms step (high).

    Without it such a job got "the GPU idles with no cause found here", a generic line.

    ## Why it matters

    The GPUs wait for the network instead of computing: adding GPUs then adds little speed.

    ## Fix

    Communicate less per sample: a larger per-GPU batch, or gradient accumulation with
    `no_sync()` on all micro-steps but the last. Let DDP's buckets start reducing during the
    backward (`bucket_cap_mb`, `gradient_as_bucket_view=True`, no `find_unused_parameters`
    unless needed). Compress gradients (DDP's `bf16_compress_hook`/`fp16_compress_hook`). Check
    the interconnect: `NCCL_DEBUG=INFO` says whether NCCL uses NVLink/InfiniBand or falls back
    to sockets.
    """

    code = "TP506"

    # NCCL kernels running this share of the device's busy time or more...
    COMM_SHARE = 0.5
    # ...with less than this share of it overlapped by compute kernels: the GPUs wait for
    # the network. DDP with its buckets overlaps most of an all-reduce with the backward.
    OVERLAP_LOW = 0.3
    # Little overlapped, communication the device runs alone for this share of the step or
    # more is a row of the breakdown worth explaining, whatever NCCL's share of the GPU (a
    # recommender's all-to-all: 13% of the step exposed, 2% overlapped, NCCL a third of the
    # GPU's busy time).
    EXPOSED_SHARE = 0.10

    def run(self, profile: Profile) -> list[Finding]:
        steps = [m for m in profile.per_step if m.traced]
        comm = sum(m.gpu_comm_ms for m in steps)
        busy = sum(m.wall_ms - m.gpu_idle_ms for m in steps)
        if not profile.has_gpu or comm <= 0 or busy <= 0:
            return []
        alone = sum(m.gpu_comm_alone_ms + m.gpu_rank_wait_ms for m in steps)
        share, overlap = comm / busy, 1 - alone / comm
        m = profile.median
        exposed = m.gpu_comm_alone_ms + m.gpu_rank_wait_ms
        bound = share >= self.COMM_SHARE and overlap < self.OVERLAP_LOW
        exposed_share = exposed / profile.step_ms if profile.step_ms else 0.0
        exposed_row = exposed_share >= self.EXPOSED_SHARE and overlap < self.OVERLAP_LOW
        if not (bound or exposed_row):
            return []
        if not self.worth_reporting(profile, exposed, "device"):
            return []
        return [
            Finding(
                "TP506",
                evidence={
                    "comm_share_of_gpu_pct": round(100 * share),
                    "overlap_pct": round(100 * overlap),
                    "nccl_ms_per_step": r(m.gpu_comm_ms, 1),
                    "exposed_comm_ms": r(exposed, 1),
                    "waiting_for_other_ranks_ms": r(m.gpu_rank_wait_ms, 1),
                    "gpu_compute_ms": r(m.gpu_compute_ms, 1),
                },
                saving_ms=exposed,
                step_ms=profile.step_ms,
                cost="device",  # NCCL kernels' exposed time (doctor/pricing.py)
                detail=f"NCCL kernels are {100 * share:.0f}% of the GPU's busy time and only "
                f"{100 * overlap:.0f}% of it overlaps compute: {exposed:.0f} ms per step the "
                "GPU only communicates",
                notes=[
                    "saving: the communication the GPU runs alone, per step (an upper bound: "
                    "what overlapping it with compute, or sending less, gives back)"
                ],
                fix=COMM_BOUND_FIX,
            )
        ]
