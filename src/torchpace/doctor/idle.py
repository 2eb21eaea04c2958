"""Each millisecond the GPU sat idle in a step, charged to the one cause that kept the host
from launching work: data wait, a sync, launch overhead, or host compute.

The device is idle in the gaps of its timeline (the union of its kernels, copies and memsets,
whatever step launched them) inside the step's span. Each gap is cut by what the loop's
thread was doing, in this order of precedence:

1. **data wait**: the thread was inside DataLoader ``__next__``: the batch was not there;
2. **sync**: the gap began while a sync call was waiting for the device, which returned
   within the gap (the sync drained the queue): what is left of it after the data wait,
   the host launching again from an empty queue, is the sync's cost;
3. **launch overhead**: a gap shorter than ``gpu.LAUNCH_GAP_US`` between two device ops: the
   host launching barely behind the device;
4. **host compute**: the rest: Python and CPU work on the loop's thread while nothing was
   queued.

Every idle microsecond gets exactly one cause, so the causes add up to the idle and never
more. The old rule charged a sync with all the idle up to the next device op, even when the
host went on to wait for the next batch (a Lightning step: 29.5 ms charged to two syncs,
28.7 of which was the data wait).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from torchpace.doctor.gpu import LAUNCH_GAP_US
from torchpace.trace.model import GpuOp, Span

# A sync "caused" a gap when it was in progress as the device went idle (it began before
# and returned after the gap's start), within this slack for the host and device clocks.
# A sync called after the device had already gone idle drained nothing: the host was late.
SYNC_SLACK_US = 5.0


@dataclass(frozen=True)
class IdleCauses:
    """GPU idle of one step by cause, in ms; ``idle_ms`` is their sum."""

    idle_data_ms: float = 0.0
    idle_sync_ms: float = 0.0
    idle_launch_ms: float = 0.0
    idle_host_ms: float = 0.0
    # of idle_sync_ms, what followed the syncs that finish a blocking host-to-device copy
    # (the copy findings' business, not the sync finding's)
    idle_copy_sync_ms: float = 0.0

    @property
    def idle_ms(self) -> float:  # idle_copy_sync_ms is inside idle_sync_ms
        return self.idle_data_ms + self.idle_sync_ms + self.idle_launch_ms + self.idle_host_ms


def idle_gaps(ops: list[GpuOp], start: float, end: float) -> list[tuple[float, float]]:
    """The device's idle intervals inside [start, end): the complement of its ops."""
    gaps, cursor = [], start
    for op in sorted(ops, key=lambda o: o.ts):
        if op.end <= cursor:
            continue
        if op.ts >= end:
            break
        if op.ts > cursor:
            gaps.append((cursor, op.ts))
        cursor = max(cursor, op.end)
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


def attribute_idle(
    ops: list[GpuOp],
    start: float,
    end: float,
    data: list[Span],
    syncs: list[Span],
    copy_syncs: list[Span] = (),
) -> IdleCauses:
    """The idle of the device in [start, end) by cause. ``ops``: every op of the device
    (from any step: a kernel of the previous step still running keeps it busy); ``data``:
    the loop thread's DataLoader spans; ``syncs``: its syncs (each from where it began: the
    copy to host memory that a ``.item()`` waits for, else the sync call), of which
    ``copy_syncs`` finish a blocking host-to-device copy."""
    data_us = sync_us = launch_us = host_us = copy_us = 0.0
    data_spans = sorted((s.ts, s.end) for s in data)
    starts = sorted(op.ts for op in ops)
    # the copies to host memory a sync may wait for (.item()'s scalar): a gap they end is
    # still the sync's when the sync began before it
    to_host = {op.ts for op in ops if op.kind == "memcpy" and op.direction == "DtoH"}
    others = [x for x in syncs if x not in copy_syncs]
    for a, b in idle_gaps(ops, start, end):
        in_data = _overlap(data_spans, a, b)
        data_us += in_data
        if (b - a) - in_data <= 0:
            continue
        after_sync = _sync_shadow(others, starts, to_host, a, b)
        after_copy = _sync_shadow([x for x in syncs if x in copy_syncs], starts, to_host, a, b)
        charged = _merge(after_sync + after_copy)
        sync_part = sum(hi - lo - _overlap(data_spans, lo, hi) for lo, hi in charged)
        copy_only = _minus(_merge(after_copy), _merge(after_sync))
        sync_us += sync_part
        copy_us += sum(hi - lo - _overlap(data_spans, lo, hi) for lo, hi in copy_only)
        rest = (b - a) - in_data - sync_part
        if rest <= 1e-9:
            continue
        if b - a < LAUNCH_GAP_US and a > start and b < end:
            launch_us += rest
        else:
            host_us += rest
    return IdleCauses(
        data_us / 1000, sync_us / 1000, launch_us / 1000, host_us / 1000, copy_us / 1000
    )


def _sync_shadow(
    syncs: list[Span], starts: list[float], to_host: set[float], gap_start: float, gap_end: float
) -> list[tuple[float, float]]:
    """The parts of the gap [gap_start, gap_end) that syncs cost: from where each sync began
    to the first device op that starts after it returned, for a sync whose return finds the
    device idle in this gap (the queue was empty: the host refills it from nothing), or
    whose own copy to host memory ends this gap (the host was busy issuing the sync).
    In a GPU-bound loop that is the idle after the sync drained the queue; in a launch-bound
    one, where the device is idle before the host even calls the sync, it is the idle from
    the sync's start until the host has launched again. Any other gap that ends before a
    sync returns was not the sync's doing: the device had more queued work after it."""
    out = []
    for s in syncs:
        if s.ts >= gap_end:
            continue
        returns_here = gap_start - SYNC_SLACK_US <= s.end <= gap_end + SYNC_SLACK_US
        own_copy = gap_end in to_host and s.ts <= gap_end <= s.end + SYNC_SLACK_US
        if not (returns_here or own_copy):
            continue
        i = bisect.bisect_left(starts, s.end)
        next_op = starts[i] if i < len(starts) else gap_end
        lo, hi = max(gap_start, s.ts), min(gap_end, max(next_op, gap_start))
        if own_copy:
            hi = gap_end
        if hi > lo:
            out.append((lo, hi))
    return out


def _merge(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for lo, hi in sorted(intervals):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _minus(
    intervals: list[tuple[float, float]], holes: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of the (merged) intervals outside the (merged) holes."""
    out = []
    for lo, hi in intervals:
        cursor = lo
        for h_lo, h_hi in holes:
            if h_hi <= cursor or h_lo >= hi:
                continue
            if h_lo > cursor:
                out.append((cursor, h_lo))
            cursor = max(cursor, h_hi)
        if cursor < hi:
            out.append((cursor, hi))
    return out


def _overlap(spans: list[tuple[float, float]], a: float, b: float) -> float:
    """Length of [a, b) covered by the (sorted, possibly overlapping) spans."""
    total, cursor = 0.0, a
    for s, e in spans:
        if e <= cursor:
            continue
        if s >= b:
            break
        lo, hi = max(s, cursor), min(e, b)
        if hi > lo:
            total += hi - lo
            cursor = hi
    return total
