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
    the loop thread's DataLoader spans; ``syncs``: its sync runtime calls, of which
    ``copy_syncs`` finish a blocking copy."""
    data_us = sync_us = launch_us = host_us = copy_us = 0.0
    data_spans = sorted((s.ts, s.end) for s in data)
    for a, b in idle_gaps(ops, start, end):
        in_data = _overlap(data_spans, a, b)
        rest = (b - a) - in_data
        data_us += in_data
        if rest <= 0:
            continue
        if _sync_drained(syncs, a, b):
            sync_us += rest
            if _sync_drained(copy_syncs, a, b) and not _sync_drained(
                [x for x in syncs if x not in copy_syncs], a, b
            ):
                copy_us += rest
        elif b - a < LAUNCH_GAP_US and a > start and b < end:
            launch_us += rest
        else:
            host_us += rest
    return IdleCauses(
        data_us / 1000, sync_us / 1000, launch_us / 1000, host_us / 1000, copy_us / 1000
    )


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


def _sync_drained(syncs: list[Span], gap_start: float, gap_end: float) -> bool:
    """A sync was in progress when the device went idle and returned within the gap: the
    queue was empty (one returning later waited across the gap for work still queued)."""
    slack = SYNC_SLACK_US
    return any(
        s.ts <= gap_start + slack and gap_start - slack <= s.end <= gap_end + slack for s in syncs
    )
