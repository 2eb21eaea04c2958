"""Events by time: the events that start in a step, or overlap it, found by bisection.

A trace's analyses look at each step's events; filtering every event for every step is
steps x events (a 200 MiB trace has thousands of steps and millions of events). An index is
built once per kind of event (sorted by start, O(n log n)) and then answers each step in
O(log n + the step's own events), so a whole analysis stays linear in the trace's size.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Generic, Protocol, TypeVar


class Timed(Protocol):
    ts: float


E = TypeVar("E", bound=Timed)


def _ts(event) -> float:
    return event.ts


class TimeIndex(Generic[E]):
    """``events`` sorted by start (stable: events that start together keep their order)."""

    def __init__(self, events: Iterable[E]):
        self.events: list[E] = sorted(events, key=_ts)
        self._starts = [e.ts for e in self.events]
        self._reach: list[float] | None = None  # the latest end among events[: i + 1]

    def __len__(self) -> int:
        return len(self.events)

    def starting_in(self, start: float, end: float) -> list[E]:
        """The events with ``start <= ts < end`` (a step's ``contains``), in time order."""
        lo = bisect.bisect_left(self._starts, start)
        hi = bisect.bisect_left(self._starts, end)
        return self.events[lo:hi]

    def last_before(self, end: float) -> E | None:
        """The last event that starts before ``end``."""
        i = bisect.bisect_left(self._starts, end)
        return self.events[i - 1] if i else None

    def overlapping(self, start: float, end: float) -> list[E]:
        """The events that end after ``start`` and start before ``end`` (the events need an
        ``end``), in time order. The running latest end skips every event that ended before
        ``start`` without looking at it."""
        reach = self._latest_ends()
        lo = bisect.bisect_right(reach, start)
        hi = bisect.bisect_left(self._starts, end)
        return [e for e in self.events[lo:hi] if e.end > start]  # type: ignore[attr-defined]

    def _latest_ends(self) -> list[float]:
        if self._reach is None:
            reach, latest = [], float("-inf")
            for e in self.events:
                latest = max(latest, e.end)  # type: ignore[attr-defined]
                reach.append(latest)
            self._reach = reach
        return self._reach
