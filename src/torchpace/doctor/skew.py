"""Each collective's time, across the ranks of one job, split into the wait for the last rank
to arrive (skew: a straggler, load imbalance) and the transfer itself, as HolisticTraceAnalysis'
straggler view and TraceLens' NcclAnalyser read it.

The same collective is found on every rank by where it sits: the step (step i of one rank
is step i of the others, as doctor/ranks.py matches them), its process group (the
``Process Group Name`` record_param_comms gives it, else one group) and its order among
that group's collectives in the step. Every rank issues a group's collectives in the same
order (NCCL and gloo require it), so the n-th of a group is the same call everywhere; a
position whose kind differs between ranks is not compared.

Clocks: traces from different hosts (and different processes' clocks) are offset from each
other, so start times cannot be compared across ranks. What can: a symmetric collective
(all-reduce, all-gather, reduce-scatter, all-to-all, barrier) ends on every rank at nearly
the same moment, since none can finish before the last rank's data arrived. Each call is
aligned on its end: the rank that arrived last ran it for the shortest time, and that
shortest time is the transfer; every other rank's longer time is that transfer plus its
wait for the last arrival (``dur - min(dur)``). Aligning call by call, not by one offset
per trace, also absorbs clocks that drift. Broadcast, reduce and send/recv do not end
together (the root, the sender leave first): they are not split.

On a GPU rank a collective is its NCCL kernel (its time on the device, from the moment the
stream reached it); on a CPU rank, the backend's span (``gloo:all_reduce``).

Everything here is linear in the traces: one pass per rank keeps a few numbers per
collective (``RankCollectives``), the model itself is dropped, and the cross-rank pass
reads those.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from torchpace.doctor.comms import KIND_ALIASES, collective_calls
from torchpace.report.model import CollectiveSkew
from torchpace.trace.model import TraceModel

# Collectives that end together on every rank: the ones whose time is split.
SYMMETRIC_KINDS = frozenset({"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier"})
CPU_COLLECTIVE_PREFIX = "gloo:"  # the gloo backend's span around a collective, on a CPU rank
# The rank that arrived last in calls carrying at least this share of the wait is named as
# the one the others wait for; below it, the last rank changes from call to call.
SLOWEST_SHARE = 0.5


@dataclass(frozen=True)
class RankCollectives:
    """One rank's collectives, reduced to what the cross-rank split reads: per (step, process
    group, order in the group's step), the kind and the time in microseconds."""

    rank: int
    steps: int
    calls: dict[tuple[int, str, int], tuple[str, float]]


def rank_collectives(model: TraceModel, rank: int) -> RankCollectives:
    """The collectives of one rank's trace (a model whose steps are already found)."""
    if model.gpu_ops:
        found = [
            (model.step_of(launch), group or "", kind, kernel.dur)
            for kernel, kind, group, launch in collective_calls(model)
        ]
    else:
        found = [
            (model.step_of(s.ts), "", _cpu_kind(s.name), s.dur)
            for s in sorted(model.annotations, key=lambda s: s.ts)
            if s.name.startswith(CPU_COLLECTIVE_PREFIX)
        ]
    order: dict[tuple[int, str], int] = defaultdict(int)
    calls: dict[tuple[int, str, int], tuple[str, float]] = {}
    for step, group, kind, dur in found:
        if step is None:
            continue
        n = order[(step, group)]
        order[(step, group)] = n + 1
        calls[(step, group, n)] = (kind, dur)
    return RankCollectives(rank=rank, steps=len(model.steps), calls=calls)


def _cpu_kind(name: str) -> str:
    op = name.removeprefix(CPU_COLLECTIVE_PREFIX)
    return KIND_ALIASES.get(op, op)


class _Sums:
    """One kind's calls, and its time and wait summed over the ranks."""

    def __init__(self, steps: int = 0):
        self.calls, self.time_us, self.wait_us = 0, 0.0, 0.0
        self.by_step = [0.0] * steps  # the wait summed over the ranks, per step
        self.caused: dict[int, float] = defaultdict(float)  # last rank -> the others' wait


def collective_skew(ranks: list[RankCollectives]) -> tuple[CollectiveSkew, ...]:
    """Per collective kind, the mean rank's time per step in it, split into the wait for the
    last rank and the transfer, with the rank that arrived last; most wait first. Empty
    with fewer than two ranks."""
    ranks = [r for r in ranks if r.steps]
    if len(ranks) < 2:
        return ()
    steps = min(r.steps for r in ranks)
    sums: dict[str, _Sums] = defaultdict(lambda: _Sums(steps))
    keys = {k for r in ranks for k in r.calls if k[0] < steps}
    for key in sorted(keys):
        seen = [(r.rank, *r.calls[key]) for r in ranks if key in r.calls]
        kinds = {kind for _, kind, _ in seen}
        if len(seen) < 2 or len(kinds) != 1 or (kind := kinds.pop()) not in SYMMETRIC_KINDS:
            continue
        last_rank, transfer = min(((rank, dur) for rank, _, dur in seen), key=lambda x: x[1])
        s = sums[kind]
        s.calls += 1
        s.time_us += sum(dur for _, _, dur in seen) * len(ranks) / len(seen)
        wait = sum(dur - transfer for _, _, dur in seen) * len(ranks) / len(seen)
        s.wait_us += wait
        s.by_step[key[0]] += wait
        s.caused[last_rank] += wait
    out = []
    for kind, s in sums.items():
        per_step = 1000.0 * steps * len(ranks)  # us summed over ranks -> ms per step per rank
        slowest, share = None, 0.0
        if s.wait_us > 0:
            rank, caused = max(s.caused.items(), key=lambda x: (x[1], -x[0]))
            share = caused / s.wait_us
            slowest = rank if share >= SLOWEST_SHARE else None
        out.append(
            CollectiveSkew(
                kind=kind,
                calls_per_step=s.calls / steps,
                ms_per_step=s.time_us / per_step,
                wait_ms_per_step=s.wait_us / per_step,
                transfer_ms_per_step=(s.time_us - s.wait_us) / per_step,
                slowest_rank=slowest,
                slowest_share=share,
                wait_ms_by_step=tuple(w / 1000.0 / len(ranks) for w in s.by_step),
            )
        )
    return tuple(sorted(out, key=lambda c: -c.wait_ms_per_step))
