"""Each step's wall time split into rows that add up to the whole step, on two timelines.

**The host's split.** Every microsecond of the step's span is given to exactly one row, the
first of this list whose intervals cover it:

1. ``data_wait``: the loop's thread inside DataLoader ``__next__``;
2. ``h2d``: the host blocked in copies to the device from pageable memory, and in the syncs
   that finish a blocking copy;
3. ``collective`` (a) the host blocked in a sync while the device ran communication kernels
   (NCCL) and no compute kernel: the step waiting for the collective, and for the ranks it
   waits on;
4. ``sync``: the host blocked in any other sync (``cudaStreamSynchronize``, ``.item()``...);
5. ``collective`` (b) collective calls on the loop's thread (``c10d::``, ``nccl:``, ``gloo:``
   spans, ``record_param_comms``): a gloo all-reduce blocks its caller for the transfer and
   the wait for the slowest rank, an NCCL call for its launch;
6. ``optimizer``: ``Optimizer.step#``/``zero_grad#`` spans, less the closure they call;
7. ``backward``: each backward pass, from its first to its last autograd function (on any
   thread: CUDA runs them on the device's engine thread), the passes of an accumulation
   told apart by the loop thread's work between them (the next micro-step's forward);
8. ``forward``: from the step's start, or the end of a backward pass, to the start of the
   next backward pass (the whole step when there is none before the optimizer): the
   model's forward, the loss, and the loop's own Python before the backward;
9. ``collective`` (c) collective spans on other threads (gloo's worker, the autograd
   engine's DDP hooks) where nothing above claimed the time: the loop thread waiting for a
   collective another thread runs (DDP finishing its all-reduce after the backward);
10. ``other``: the rest, unattributed: after the backward and outside the optimizer
    (gradient clipping, the scheduler, logging, waits the trace shows no call for).

**The device's split** (GPU runs), over the same span on the main device's timeline (its
kernels, copies and memsets, whatever step launched them), again one row per microsecond:
``compute`` (any non-communication kernel runs), ``comm_alone`` (only communication
kernels run: exposed communication), ``copy_alone`` (only copies/memsets run), ``idle``.
The communication overlapped by compute is counted as compute and reported apart
(``comm`` is all the time a communication kernel runs).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from torchpace.trace.model import GpuOp, Span, is_collective_kernel

Interval = tuple[float, float]

HOST_ROWS = (
    "data_wait",
    "h2d",
    "sync",
    "collective",
    "optimizer",
    "backward",
    "forward",
    "other",
)


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time (empty ones dropped)."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return merge((max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi)


def subtract(keep: list[Interval], holes: list[Interval]) -> list[Interval]:
    """``keep`` minus ``holes``; both merged."""
    out, j = [], 0
    for a, b in keep:
        cursor = a
        while j < len(holes) and holes[j][1] <= cursor:
            j += 1
        k = j
        while k < len(holes) and holes[k][0] < b:
            h_a, h_b = holes[k]
            if h_a > cursor:
                out.append((cursor, h_a))
            cursor = max(cursor, h_b)
            if cursor >= b:
                break
            k += 1
        if cursor < b:
            out.append((cursor, b))
    return out


def intersect(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """Time covered by both (each merged)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def length(intervals: list[Interval]) -> float:
    return sum(b - a for a, b in intervals)


def partition(
    lo: float, hi: float, layers: Sequence[tuple[str, Iterable[Interval]]], rest: str = "other"
) -> dict[str, float]:
    """Each instant of [lo, hi) given to the first layer that covers it (a row may have
    several layers, at several ranks); what none covers goes to ``rest``. The values add up
    to ``hi - lo``. Times in the intervals' unit."""
    out: dict[str, float] = {}
    claimed: list[Interval] = []
    for row, intervals in layers:
        mine = subtract(clip(intervals, lo, hi), claimed)
        out[row] = out.get(row, 0.0) + length(mine)
        claimed = merge([*claimed, *mine])
    out[rest] = out.get(rest, 0.0) + max(0.0, (hi - lo) - length(claimed))
    return out


def backward_passes(autograd: list[Span], loop_work: list[Span]) -> list[Interval]:
    """The backward passes: the autograd functions' spans grouped into runs, a run ending
    where the loop's thread starts work of its own between two of them (``loop_work``: its
    spans that are neither autograd functions nor inside one, nor collectives): the next
    micro-step's forward in an accumulation."""
    spans = sorted(autograd, key=lambda s: s.ts)
    if not spans:
        return []
    starts = sorted(s.ts for s in loop_work)
    runs: list[list[float]] = [[spans[0].ts, spans[0].end]]
    for s in spans[1:]:
        gap_lo, gap_hi = runs[-1][1], s.ts
        i = bisect.bisect_left(starts, gap_lo)
        if gap_hi > gap_lo and i < len(starts) and starts[i] < gap_hi:
            runs.append([s.ts, s.end])
        else:
            runs[-1][1] = max(runs[-1][1], s.end)
    return [(a, b) for a, b in runs]


def outside(spans: list[Span], intervals: list[Interval]) -> list[Span]:
    """The spans that start outside the (merged) intervals."""
    out = []
    for s in spans:
        i = bisect.bisect_right(intervals, (s.ts, float("inf"))) - 1
        if i < 0 or not intervals[i][0] <= s.ts < intervals[i][1]:
            out.append(s)
    return out


def forward_regions(
    lo: float, hi: float, passes: list[Interval], optimizer: list[Interval]
) -> list[Interval]:
    """Where the forward runs: from the step's start, or a backward pass's end, to the next
    backward pass; with no backward pass, up to the optimizer (or the step's end)."""
    passes = clip(passes, lo, hi)
    if not passes:
        first_optim = min((a for a, _ in clip(optimizer, lo, hi)), default=hi)
        return [(lo, first_optim)]
    out, cursor = [], lo
    for a, b in passes:
        if a > cursor:
            out.append((cursor, a))
        cursor = max(cursor, b)
    return out


@dataclass(frozen=True)
class DeviceSplit:
    """The device's time in a step span (ms): compute + comm_alone + copy_alone + idle is
    the span; ``comm`` is all the time a communication kernel ran (overlapped or not)."""

    compute_ms: float = 0.0
    comm_alone_ms: float = 0.0
    copy_alone_ms: float = 0.0
    idle_ms: float = 0.0
    comm_ms: float = 0.0


def device_intervals(ops: list[GpuOp]) -> tuple[list[Interval], list[Interval], list[Interval]]:
    """(compute kernels, communication kernels, copies and memsets), each merged."""
    compute = merge(
        (o.ts, o.end) for o in ops if o.kind == "kernel" and not is_collective_kernel(o.name)
    )
    comm = merge((o.ts, o.end) for o in ops if o.kind == "kernel" and is_collective_kernel(o.name))
    copies = merge((o.ts, o.end) for o in ops if o.kind != "kernel")
    return compute, comm, copies


def device_split(ops: list[GpuOp], lo: float, hi: float) -> DeviceSplit:
    """The device's timeline in [lo, hi) split by what ran (see the module's docstring)."""
    compute, comm, copies = device_intervals(ops)
    parts = partition(
        lo, hi, [("compute", compute), ("comm_alone", comm), ("copy_alone", copies)], "idle"
    )
    return DeviceSplit(
        compute_ms=parts["compute"] / 1000,
        comm_alone_ms=parts["comm_alone"] / 1000,
        copy_alone_ms=parts["copy_alone"] / 1000,
        idle_ms=parts["idle"] / 1000,
        comm_ms=length(clip(comm, lo, hi)) / 1000,
    )


def comm_only(ops: list[GpuOp], lo: float, hi: float) -> list[Interval]:
    """Where the device runs communication kernels and no compute kernel, in [lo, hi)."""
    compute, comm, _ = device_intervals(ops)
    return subtract(clip(comm, lo, hi), clip(compute, lo, hi))
