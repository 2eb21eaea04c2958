"""Distributed wrappers (TP501, TP503), communication-bound GPU ranks (TP506) and the
process environment (TP601)."""

from __future__ import annotations

from torchpace.doctor.checks.base import Check, r
from torchpace.doctor.checks.compute import probe_saving
from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile


class DataParallelUsed(Check):
    """TP501: nn.DataParallel (one process, threads, replicas copied every step).

    On one visible GPU DataParallel calls the module directly (no replicas, no scatter):
    it costs nothing, and the finding is information about what it will cost on several.
    """

    def run(self, profile: Profile) -> list[Finding]:
        wrappers = profile.facts.wrappers if profile.facts else []
        dp = [w for w in wrappers if w.kind == "DataParallel"]
        if not dp:
            return []
        devices = _visible_gpus(profile)
        evidence = {"wrapper": "nn.DataParallel", "wrapped_models": len(dp)}
        if devices is not None:
            evidence["visible_gpus"] = devices
        single = devices is not None and devices <= 1
        fix = (
            "DistributedDataParallel, one process per GPU, started with torchrun "
            "(`torchpace launch`)"
        )
        if single:
            return [
                Finding(
                    "TP501",
                    evidence=evidence,
                    severity="low",
                    saving_ms=0.0,
                    step_ms=profile.step_ms,
                    location=dp[0].location,
                    detail="nn.DataParallel on one visible GPU calls the model directly: no "
                    "cost here; on several GPUs it replicates the model and scatters the "
                    "batch from one Python process every step",
                    fix=f"before scaling to several GPUs: {fix}",
                    notes=[
                        "information, not a cost: nothing to gain on this one GPU; with N "
                        "GPUs DataParallel's per-step replicate/scatter/gather and the GIL "
                        "typically leave it well short of N x, where DDP scales close to it"
                    ],
                )
            ]
        return [
            Finding(
                "TP501",
                evidence=evidence,
                severity="medium",
                location=dp[0].location,
                detail="nn.DataParallel replicates the model and scatters inputs every step "
                "from one Python process",
                fix=fix,
                notes=["the saving is not estimated from one process's profile"],
            )
        ]


def _visible_gpus(profile: Profile) -> int | None:
    state = profile.process
    if state is not None and state.cuda_devices is not None:
        return state.cuda_devices
    return None


class FindUnusedParameters(Check):
    """TP503: DDP built with find_unused_parameters=True (a graph walk every step)."""

    def run(self, profile: Profile) -> list[Finding]:
        wrappers = profile.facts.wrappers if profile.facts else []
        hits = [w for w in wrappers if w.find_unused_parameters]
        if not hits:
            return []
        return [
            Finding(
                "TP503",
                evidence={"find_unused_parameters": "True"},
                severity="low",
                location=hits[0].location,
                detail="DDP traverses the autograd graph after every forward to find unused "
                "parameters",
                fix="find_unused_parameters=False unless some parameters really get no "
                "gradient in some steps",
            )
        ]


class CommunicationBound(Check):
    """TP506: most of the GPU's time in communication kernels (NCCL), little of it
    overlapped with compute, seen in one rank's trace (the cross-rank view,
    doctor/ranks.py, applies the same thresholds to every rank and names the worst).

    Read from the device's split of the profiled steps (doctor/breakdown.py): the NCCL
    kernels' share of the device's busy time, and the share of that time during which a
    compute kernel also ran. The cost is the communication left alone on the device per
    step (with the other ranks' traces, the wait for the slowest rank included): what
    overlapping it with the backward, or sending less, can give back at most.
    """

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
        if not self.worth_reporting(profile, exposed):
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


COMM_BOUND_FIX = (
    "communicate less per sample (a larger per-GPU batch, accumulation under no_sync), let "
    "buckets reduce during the backward (bucket_cap_mb, gradient_as_bucket_view), compress "
    "gradients (DDP's bf16/fp16 compress hook), and check the interconnect (NCCL_DEBUG=INFO: "
    "NVLink/InfiniBand or sockets?)"
)


class ThreadOversubscription(Check):
    """TP601: more intra-op threads than the cores this process may use."""

    # A probe that gains less than this share of the step is noise: no finding then...
    MIN_PROBE_GAIN = 0.03
    # ...unless the threads are this many times the cores: a setting that costs little in
    # this one process but multiplies with every process and DataLoader worker started.
    FAR_ABOVE = 2

    def run(self, profile: Profile) -> list[Finding]:
        state = profile.process
        if state is None or not state.usable_cpus:
            return []
        if state.intra_op_threads <= state.usable_cpus:
            return []
        saving, probe = probe_saving(profile, "threads-to-cores")
        far_above = state.intra_op_threads >= self.FAR_ABOVE * state.usable_cpus
        if probe is not None and saving < self.MIN_PROBE_GAIN * probe.baseline_ms:
            if not far_above:
                return []  # measured: the extra threads cost nothing here
            saving = 0.0  # far above the cores: worth knowing, though it costs ~0 here
        evidence: dict = {
            "intra_op_threads": state.intra_op_threads,
            "usable_cpus": state.usable_cpus,
        }
        evidence |= {k: v for k, v in state.thread_env.items() if k.endswith("NUM_THREADS")}
        if probe is not None:
            evidence |= {
                "step_ms_now": r(probe.baseline_ms),
                "step_ms_threads_to_cores": r(probe.probe_ms),
            }
        return [
            Finding(
                "TP601",
                evidence=evidence,
                saving_ms=saving,
                step_ms=probe.baseline_ms if probe else profile.step_ms,
                severity=None if saving is not None else "low",
                knob="threads",
                detail=f"{state.intra_op_threads} compute threads share {state.usable_cpus} "
                "usable cores: they preempt each other",
                fix=f"OMP_NUM_THREADS={state.usable_cpus} (or torch.set_num_threads); with "
                "several processes, cores / processes each (`torchpace launch` sets it)",
                notes=_thread_notes(probe, saving),
            )
        ]


def _thread_notes(probe, saving) -> list[str]:
    if probe is None:
        return ["no A/B probe ran: the saving is not estimated"]
    if not saving:
        return [
            "the probe measured no gain in this single process; the cost appears with "
            "several processes or DataLoader workers per machine"
        ]
    return ["saving measured by setting threads to the usable cores for a few steps"]


CHECKS = [
    DataParallelUsed(),
    FindUnusedParameters(),
    CommunicationBound(),
    ThreadOversubscription(),
]


def run(profile: Profile) -> list[Finding]:
    return [f for check in CHECKS for f in check.run(profile)]
