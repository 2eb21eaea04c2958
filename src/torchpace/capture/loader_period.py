"""How fast the DataLoader's workers make batches: the time each worker takes to fetch one
(its dataset reads and the collate), told to the main process through shared memory.

Why: a step waits for the loader only for what the workers have not made yet. One worker
that makes a batch in 27 ms beside a 23 ms compute step leaves a 4.4 ms wait a step, and
the step's rows (tune/rows.py) then read "compute 23 ms": yet a compute step made free would
still wait 27 ms for each batch. The loader's period (a batch's fetch time over its workers)
says how much of the step a compute fix can save at most: 0.5 ms there, so the loader's row
is climbed first, as a person who profiles the step fixes the loader first.

Each worker adds its fetches to its own slot (no two processes write one slot); the main
process reads the totals at the timed steps' start and end (in a switched trial, at each
block's end too: each arm's pace is its own, what the rows under a rung decided within a
process need). The fetchers are patched before
the script builds any loader, so the workers forked from it inherit the patch; workers
started with "spawn" re-import torch unpatched and leave the slots at zero: the period is
then unknown and the rows are read as before.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import time
from dataclasses import dataclass

from torch.utils.data import get_worker_info
from torch.utils.data._utils import fetch as torch_fetch

# slot 0: fetches in the main process (num_workers=0: inside the step's own wait, so no
# period of their own); slot 1 + worker id: each worker's (ids past the last share it)
SLOTS = 65


@dataclass(frozen=True)
class Totals:
    seconds: tuple[float, ...]
    batches: tuple[int, ...]


NONE_MADE = Totals((0.0,) * SLOTS, (0,) * SLOTS)


def added(total: Totals, before: Totals, after: Totals) -> Totals:
    """``total`` and what the loader made between ``before`` and ``after``: one arm's blocks
    of a switched trial summed."""
    return Totals(
        tuple(t + a - b for t, b, a in zip(total.seconds, before.seconds, after.seconds,
                                           strict=True)),
        tuple(t + a - b for t, b, a in zip(total.batches, before.batches, after.batches,
                                           strict=True)),
    )  # fmt: skip


class LoaderPeriod:
    def __init__(self):
        # an anonymous shared mapping: forked workers write into the same pages, and no file
        # is made (multiprocessing's shared arrays make one in a temporary folder, which the
        # tune's file guard then watches the workers write beside)
        self._memory = mmap.mmap(-1, 2 * SLOTS * 8)
        self._seconds = (ctypes.c_double * SLOTS).from_buffer(self._memory)
        self._batches = (ctypes.c_int64 * SLOTS).from_buffer(self._memory, SLOTS * 8)

    def install(self) -> None:
        """Every fetcher's fetch (map-style and iterable datasets) adds its time to the
        calling process's slot."""
        for fetcher in (torch_fetch._MapDatasetFetcher, torch_fetch._IterableDatasetFetcher):
            fetcher.fetch = self._timed(fetcher.fetch)

    def _timed(self, original):
        seconds, batches = self._seconds, self._batches

        @functools.wraps(original)
        def fetch(fetcher, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(fetcher, *args, **kwargs)
            finally:
                info = get_worker_info()
                slot = 0 if info is None else min(1 + info.id, SLOTS - 1)
                seconds[slot] += time.perf_counter() - start
                batches[slot] += 1

        return fetch

    def totals(self) -> Totals:
        return Totals(tuple(self._seconds), tuple(self._batches))


def period_ms(before: Totals, after: Totals) -> tuple[float | None, int]:
    """The workers' mean time to make one batch, over the workers that made one between the
    two totals, divided by those workers (they make batches side by side): the pace at which
    the loader can hand out batches. (None, 0) when no worker made a batch."""
    seconds = [a - b for a, b in zip(after.seconds[1:], before.seconds[1:], strict=True)]
    batches = [a - b for a, b in zip(after.batches[1:], before.batches[1:], strict=True)]
    workers = sum(1 for n in batches if n > 0)
    if workers == 0:
        return None, 0
    per_batch_ms = 1000 * sum(seconds) / sum(batches)
    return round(per_batch_ms / workers, 3), workers
