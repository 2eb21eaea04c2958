"""The cross-rank view of a job: one trace per rank, read side by side.

Per rank: its step times, the time per step spent in collectives (NCCL kernels on the GPU;
gloo/NCCL/c10d operations on the CPU for a CPU job), the collective calls per step, and for
a GPU rank the communication share of the GPU's busy time and how much of it overlaps
compute kernels.

Across ranks: in a synchronous data-parallel job every rank's step lasts as long as the
slowest rank's (the all-reduce waits for it), so step times do not show the straggler.
What differs is the time outside collectives (the rank's own work): the straggler is the
rank with the most, and the others spend the difference waiting inside their collectives.

Step i of one rank is matched with step i of the others (the ranks of one job step
together); each rank's steps come from its own trace (ProfilerStep#N, else its markers).
"""

from __future__ import annotations

import itertools
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from torchpace import run_files
from torchpace.capture.runner import SPEC_NAME
from torchpace.capture.window import TRACE_NAME
from torchpace.doctor.checks._environment import COMM_BOUND_FIX
from torchpace.doctor.checks.communication_bound import CommunicationBound
from torchpace.facts.run import FACTS_NAME
from torchpace.report.model import CollectiveSkew, CrossRank, RankFigures
from torchpace.stats import robust_sigma
from torchpace.trace.index import TimeIndex
from torchpace.trace.model import (
    COLLECTIVE_KERNEL_WORD,
    COLLECTIVE_SPAN_PREFIXES,
    TraceModel,
)
from torchpace.trace.steps import derive_steps

RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.IGNORECASE)
NODE_FOLDER = re.compile(r"node\d+")
TRACE_SUFFIXES = (".json", ".json.gz")
# torchpace's own JSON files in a run folder, never traces.
NOT_TRACES = {SPEC_NAME, FACTS_NAME, run_files.DOCTOR_REPORT}
# CPU spans of collectives (COLLECTIVE_SPAN_PREFIXES: "gloo:all_reduce", "nccl:all_reduce",
# "c10d::allreduce_", record_param_comms; nested ones are merged) and NCCL kernels
# (COLLECTIVE_KERNEL_WORD) are named in trace/model.py, which the step breakdown shares.
__all__ = ["COLLECTIVE_KERNEL_WORD", "COLLECTIVE_SPAN_PREFIXES", "CrossRank", "RankFigures"]
# One per all-reduce call, on the calling thread (DDP: one per gradient bucket per synced
# backward; broadcasts of buffers are not counted).
ALLREDUCE_OP_PREFIX = "c10d::allreduce"
DDP_FORWARD = "DistributedDataParallel.forward"  # DDP's own record_function
# A straggler is a difference beyond the job's own noise (a shared machine's scheduling puts
# tens of ms into one rank's step now and the other's next), so all of these must hold:
# - its median work per step is longer than the least-loaded rank's by STRAGGLER_SHARE of
#   the median step;
# - in every compared step it does more work than every other rank, by at least
#   STRAGGLER_STEP_SHARE of the step (a rank descheduled in some steps is not a straggler);
# - its excess over the least-loaded rank is steady: the median excess is more than
#   NOISE_SIGMAS times the step-to-step spread of that excess (a robust sigma, from the
#   median absolute deviation): a real cause (a slow loader, rank-0-only work) adds about
#   the same time every step, noise does not;
# - at least STRAGGLER_MIN_STEPS steps were compared (one step shows no steadiness).
STRAGGLER_SHARE = 0.20
STRAGGLER_STEP_SHARE = 0.10
STRAGGLER_MIN_STEPS = 2
NOISE_SIGMAS = 2.0


def rank_trace_files(folder: Path) -> list[Path]:
    """The traces in ``folder``, one per rank, ordered by rank: files with the rank in their
    names (``rank3.json``), or one trace in each ``rank<N>`` subfolder (what
    ``torchpace launch --doctor`` writes: one capture folder per rank), also inside
    ``node<K>`` subfolders (a multi-node ``launch --doctor``: one folder per node)."""
    files = [
        p
        for p in folder.iterdir()
        if p.is_file() and p.name.endswith(TRACE_SUFFIXES) and p.name not in NOT_TRACES
    ]
    for sub in folder.iterdir():
        if sub.is_dir() and RANK_IN_NAME.fullmatch(sub.name) and (sub / TRACE_NAME).is_file():
            files.append(sub / TRACE_NAME)
        elif sub.is_dir() and NODE_FOLDER.fullmatch(sub.name):  # launch --doctor, many nodes
            files.extend(
                rank / TRACE_NAME
                for rank in sub.iterdir()
                if rank.is_dir() and RANK_IN_NAME.fullmatch(rank.name)
                and (rank / TRACE_NAME).is_file()
            )  # fmt: skip

    def key(p: Path):
        number = _rank_in(p)
        return (0, number, str(p)) if number is not None else (1, 0, str(p))

    return sorted(files, key=key)


def _rank_in(path: Path) -> int | None:
    for name in (path.name, path.parent.name):
        m = RANK_IN_NAME.search(name)
        if m:
            return int(m.group(1))
    return None


def rank_number(path: Path, index: int) -> int:
    number = _rank_in(path)
    return number if number is not None else index


def _union_ms(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total / 1000.0


def _overlap_ms(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    """Time covered by both sets of intervals (each merged first)."""

    def merged(xs):
        out: list[list[float]] = []
        for lo, hi in sorted(xs):
            if out and lo <= out[-1][1]:
                out[-1][1] = max(out[-1][1], hi)
            else:
                out.append([lo, hi])
        return out

    ma, mb = merged(a), merged(b)
    i = j = 0
    total = 0.0
    while i < len(ma) and j < len(mb):
        lo, hi = max(ma[i][0], mb[j][0]), min(ma[i][1], mb[j][1])
        total += max(0.0, hi - lo)
        if ma[i][1] < mb[j][1]:
            i += 1
        else:
            j += 1
    return total / 1000.0


def rank_figures(model: TraceModel, rank: int) -> RankFigures:
    model = model.with_steps(derive_steps(model))
    steps = model.steps
    step_ms = tuple(s.dur / 1000.0 for s in steps)
    kernels = [op for op in model.gpu_ops if op.kind == "kernel"]
    comm = [(op.ts, op.end) for op in kernels if COLLECTIVE_KERNEL_WORD in op.name.lower()]
    compute = [(op.ts, op.end) for op in kernels if COLLECTIVE_KERNEL_WORD not in op.name.lower()]
    if kernels:
        on = "gpu"
        spans = TimeIndex(_Interval(lo, hi) for lo, hi in comm)
    else:
        on = "cpu"
        spans = TimeIndex(
            _Interval(s.ts, s.end)
            for s in (*model.cpu_ops, *model.annotations)  # gloo's are user annotations
            if s.name.startswith(COLLECTIVE_SPAN_PREFIXES)
        )
    per_step = [
        _union_ms(
            [(max(x.ts, st.ts), min(x.end, st.end)) for x in spans.overlapping(st.ts, st.end)]
        )
        for st in steps
    ]
    work = [st.dur / 1000.0 - c for st, c in zip(steps, per_step, strict=True)]
    reduces = TimeIndex(s for s in model.cpu_ops if s.name.startswith(ALLREDUCE_OP_PREFIX))
    forwards = TimeIndex(s for s in model.annotations if s.name == DDP_FORWARD)
    calls = [len(reduces.starting_in(st.ts, st.end)) for st in steps]
    synced = [_synced_backwards(forwards, reduces, st) for st in steps]
    share = overlap = None
    per_step_overlap: list[float | None] = []
    if kernels:
        # Kernels belong to the step that launched them (HTA's attribution too).
        for ops in model.gpu_ops_by_step().values():
            ks = [op for op in ops if op.kind == "kernel"]
            c = [(k.ts, k.end) for k in ks if COLLECTIVE_KERNEL_WORD in k.name.lower()]
            rest = [(k.ts, k.end) for k in ks if COLLECTIVE_KERNEL_WORD not in k.name.lower()]
            c_ms = _union_ms(c)
            per_step_overlap.append(_overlap_ms(c, rest) / c_ms if c_ms else None)
        comm_ms, busy_ms = _union_ms(comm), _union_ms([(k.ts, k.end) for k in kernels])
        share = comm_ms / busy_ms if busy_ms else 0.0
        overlap = _overlap_ms(comm, compute) / comm_ms if comm_ms else None
    return RankFigures(
        rank=rank,
        path=str(model.path) if model.path else "",
        step_ms=step_ms,
        median_step_ms=statistics.median(step_ms) if step_ms else 0.0,
        collective_ms=statistics.median(per_step) if per_step else 0.0,
        collective_on=on,
        work_ms=statistics.median(work) if work else 0.0,
        work_per_step=tuple(work),
        allreduce_calls=statistics.median(calls) if calls else 0.0,
        synced_backwards=statistics.median(synced) if synced else 0.0,
        comm_share_of_gpu=share,
        comm_overlap=overlap,
        comm_overlap_per_step=tuple(per_step_overlap),
    )


@dataclass(frozen=True)
class _Interval:
    ts: float
    end: float


def _synced_backwards(forward_spans: TimeIndex, reduce_spans: TimeIndex, step) -> int:
    """How many of the step's DDP forwards were followed by an all-reduce before the next
    forward: 1 with accumulation under no_sync (or none), one per micro-step without it."""
    forwards = [s.ts for s in forward_spans.starting_in(step.ts, step.end)]
    reduces = [s.ts for s in reduce_spans.starting_in(step.ts, step.end)]
    bounds = [*forwards, step.end]
    return sum(1 for lo, hi in itertools.pairwise(bounds) if any(lo < t < hi for t in reduces))


def cross_rank(figures: list[RankFigures], skew: tuple[CollectiveSkew, ...] = ()) -> CrossRank:
    """The job from its ranks' figures; ``skew``: its collectives split into the wait for
    the last rank and the transfer (doctor/skew.py)."""
    n = min((len(f.step_ms) for f in figures), default=0)
    with_steps = [f for f in figures if f.step_ms]
    straggler, excess, wait = None, 0.0, 0.0
    if len(with_steps) > 1:
        slow = max(with_steps, key=lambda f: f.work_ms)
        light = min(with_steps, key=lambda f: f.work_ms)
        excess = slow.work_ms - light.work_ms
        step = statistics.median([f.median_step_ms for f in with_steps])
        if _is_straggler(slow, light, with_steps, n, step):
            straggler = slow.rank
        wait = statistics.mean(slow.work_ms - f.work_ms for f in with_steps if f is not slow)
    most = [max(f.work_per_step[i] for f in with_steps) for i in range(n)] if with_steps else []
    waits = tuple(
        tuple(max(0.0, most[i] - f.work_per_step[i]) for i in range(n))
        if f.step_ms and len(with_steps) > 1
        else ()
        for f in figures
    )
    return CrossRank(
        ranks=tuple(figures),
        steps_compared=n,
        straggler=straggler,
        straggler_excess_ms=excess,
        wait_ms_per_step=wait,
        rank_wait_per_step=waits,
        collective_skew=skew,
    )


def _is_straggler(slow: RankFigures, light: RankFigures, ranks, n: int, step: float) -> bool:
    """Is ``slow``'s extra work beyond the noise of the job (see STRAGGLER_SHARE)?"""
    if n < STRAGGLER_MIN_STEPS or step <= 0:
        return False
    if slow.work_ms - light.work_ms < STRAGGLER_SHARE * step:
        return False
    margin = STRAGGLER_STEP_SHARE * step
    for i in range(n):
        others = [f.work_per_step[i] for f in ranks if f is not slow]
        if slow.work_per_step[i] - max(others) < margin:
            return False
    excess = [slow.work_per_step[i] - light.work_per_step[i] for i in range(n)]
    return statistics.median(excess) > NOISE_SIGMAS * robust_sigma(excess)


def rank_wait_of(cross: CrossRank, rank: int) -> list[float] | None:
    """The rank's wait for the slowest rank in each compared step, or None (one rank, or a
    rank without steps)."""
    for figures, waits in zip(cross.ranks, cross.rank_wait_per_step, strict=False):
        if figures.rank == rank and waits:
            return list(waits)
    return None


# A GPU rank whose collectives take this share of its kernel time, overlapped less than
# OVERLAP_LOW with compute, is communication-bound: the single-rank check's thresholds.
COMM_BOUND_SHARE = CommunicationBound.COMM_SHARE
OVERLAP_LOW = CommunicationBound.OVERLAP_LOW


def cross_rank_findings(cross: CrossRank) -> list:
    """Findings for the job: a straggler (TP505), accumulation without no_sync (TP502), a
    communication-bound GPU job (TP506)."""
    from torchpace.doctor.finding import Finding

    out = []
    ranks = [r for r in cross.ranks if r.step_ms]
    step = statistics.median([r.median_step_ms for r in ranks]) if ranks else None
    if cross.straggler is not None:
        waited = skew_wait_ms(cross)
        out.append(
            Finding(
                "TP505",
                evidence={
                    "rank": cross.straggler,
                    "excess_ms": round(cross.straggler_excess_ms, 1),
                    "wait_ms_per_step": round(cross.wait_ms_per_step, 1),
                    **({"collective_wait_ms": round(waited, 1)} if waited else {}),
                },
                saving_ms=cross.wait_ms_per_step,
                step_ms=step,
                detail=f"rank {cross.straggler}'s own work takes "
                f"{cross.straggler_excess_ms:.1f} ms per step more than the least-loaded "
                f"rank's; the others wait {cross.wait_ms_per_step:.1f} ms per step for it",
                fix=f"find what rank {cross.straggler} does more: its input pipeline (a slow "
                "disk, too few workers), longer batches (torchpace.distributed."
                "LengthBucketBatchSampler), rank-0-only work inside the step (logging, "
                "checkpoints, evaluation), a slower device or a busier host",
            )
        )
    skew = _skew_finding(cross, step)
    if skew is not None:
        out.append(skew)
    extra = [r for r in ranks if r.synced_backwards > 1]
    if extra:
        r = max(extra, key=lambda r: r.synced_backwards)
        wasted = r.collective_ms * (r.synced_backwards - 1) / r.synced_backwards
        out.append(
            Finding(
                "TP502",
                evidence={
                    "rank": r.rank,
                    "synced_backwards_per_step": r.synced_backwards,
                    "allreduces_per_step": r.allreduce_calls,
                },
                saving_ms=wasted,
                step_ms=step,
                detail=f"{r.synced_backwards:g} backward passes per step all-reduce the "
                "gradients (every micro-step of an accumulation), where only the last needs to",
                fix="run all micro-steps but the last under model.no_sync() "
                "(torchpace.distributed.accumulate does it)",
            )
        )
    bound = [
        r for r in ranks
        if r.comm_share_of_gpu is not None and r.comm_share_of_gpu >= COMM_BOUND_SHARE
        and (r.comm_overlap or 0.0) < OVERLAP_LOW
    ]  # fmt: skip
    if bound:
        r = max(bound, key=lambda r: r.comm_share_of_gpu)
        exposed = r.collective_ms * (1 - (r.comm_overlap or 0.0))
        out.append(
            Finding(
                "TP506",
                evidence={
                    "rank": r.rank,
                    "comm_share_of_gpu_pct": round(100 * r.comm_share_of_gpu),
                    "overlap_pct": round(100 * (r.comm_overlap or 0.0)),
                    "exposed_comm_ms": round(exposed, 1),
                },
                saving_ms=exposed,
                step_ms=step,
                detail=f"NCCL kernels are {100 * r.comm_share_of_gpu:.0f}% of rank {r.rank}'s "
                f"GPU time and only {100 * (r.comm_overlap or 0.0):.0f}% of it overlaps "
                f"compute: {exposed:.0f} ms per step of exposed communication",
                fix=COMM_BOUND_FIX,
            )
        )
    return out


# The collectives' wait for the last rank (doctor/skew.py) is a finding when it is more of
# their time than the transfer itself and at least this share of the step in every compared
# step, the margin the straggler rule asks of every step: two ranks sharing a busy machine's
# cores wait 2-12% of a step for one another, step by step, without anything to fix (a clean
# 2-rank gloo job here).
SKEW_STEP_SHARE = STRAGGLER_STEP_SHARE


def skew_wait_ms(cross: CrossRank) -> float:
    """The mean rank's wait per step, in all its collectives, for the last rank to arrive."""
    return sum(c.wait_ms_per_step for c in cross.collective_skew)


def _skew_finding(cross: CrossRank, step: float | None):
    """TP505 from the collectives themselves, where the straggler rule (own work per step)
    did not fire: the ranks wait for one another inside the collectives more than the
    transfer takes. With one rank arriving last most of the time it is named; otherwise the
    last rank changes from call to call (load imbalance)."""
    from torchpace.doctor.finding import Finding

    if cross.straggler is not None or not cross.collective_skew or not step:
        return None
    wait = skew_wait_ms(cross)
    transfer = sum(c.transfer_ms_per_step for c in cross.collective_skew)
    waits = [c.wait_ms_by_step for c in cross.collective_skew]
    by_step = [sum(w) for w in zip(*waits, strict=False)]
    # in every compared step, as the straggler rule asks: a busy machine's scheduling puts
    # tens of ms of wait into some steps and none into others
    if wait <= transfer or not by_step or min(by_step) < SKEW_STEP_SHARE * step:
        return None
    top = cross.collective_skew[0]  # most wait first
    kinds = ", ".join(
        f"{c.kind} {c.wait_ms_per_step:.1f} ms waiting + {c.transfer_ms_per_step:.1f} ms transfer"
        for c in cross.collective_skew
        if c.wait_ms_per_step > 0
    )
    evidence = {
        "wait_ms_per_step": round(wait, 1),
        "transfer_ms_per_step": round(transfer, 1),
        "kind": top.kind,
    }
    if top.slowest_rank is not None:
        evidence["rank"] = top.slowest_rank
        who = f"rank {top.slowest_rank} arrives last ({100 * top.slowest_share:.0f}% of the wait)"
        fix = (
            f"find what rank {top.slowest_rank} does more before its collectives: its input "
            "pipeline (a slow disk, too few workers), longer batches (torchpace.distributed."
            "LengthBucketBatchSampler), rank-0-only work inside the step (logging, "
            "checkpoints, evaluation), a slower device or a busier host"
        )
    else:
        who = "the last rank to arrive changes from call to call (load imbalance)"
        fix = (
            "balance the work between collectives across ranks: equal shards and batch "
            "budgets (torchpace.distributed.LengthBucketBatchSampler for variable lengths), "
            "balanced embedding-table sharding, no per-rank work inside the step"
        )
    return Finding(
        "TP505",
        evidence=evidence,
        saving_ms=wait,
        step_ms=step,
        detail=f"the ranks spend {wait:.1f} ms per step inside collectives waiting for the "
        f"last rank to arrive, against {transfer:.1f} ms of transfer ({kinds}); {who}",
        fix=fix,
        notes=[
            "wait and transfer from each collective aligned on its end across ranks "
            "(clock offsets between the traces cancel)"
        ],
    )
