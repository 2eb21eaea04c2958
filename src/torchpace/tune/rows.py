"""The step's rows, read from a configuration's own trials (unprofiled timed steps): the
wait for the loader's batch ("data") and the rest of the step ("compute": copies, forward,
backward, the optimizer). A knob acts on one row (``Knob.row``); the ladder screens the
knobs of the biggest row first, and screens again a knob that read nothing while another
row dominated once that row is gone (ladder.py). On a loader-bound GPU step bf16 read
-0.6% where, once loading was fixed by hand, it gave +11.9%.

Each row is what a fix of it could save at most. The data row: the wait (a free loader
saves it all). The compute row: the rest of the step, but no more than the step less the
loader's own pace where workers load beside the step (capture/loader_period.py): a free
compute step still waits for the next batch. One worker making a batch in 27 ms beside a
23 ms compute step leaves a 4.4 ms wait; the compute row is then 0.5 ms, not 23, and the
loader's row is climbed first (benchmarks/jobs/moving_bottleneck.py).
"""

from __future__ import annotations

import math
import statistics

from torchpace.tune.noise import gain_pct
from torchpace.tune.trial import TrialResult

DATA, COMPUTE = "data", "compute"


class StepRows(dict):
    """Each row's ms (row name -> ms), and the step they are rows of (``step_ms``): the rows
    need not add up to it where the loader's pace caps the compute row."""

    def __init__(self, rows: dict[str, float], step_ms: float):
        super().__init__(rows)
        self.step_ms = step_ms

    def room_pct(self, row: str) -> float:
        """The most a knob of this row could gain, in % of the step's speed: the step with
        the row made free."""
        rest = self.step_ms - self.get(row, 0.0)
        return gain_pct(rest, self.step_ms) if rest > 0 else math.inf


def step_rows(runs: list[TrialResult]) -> StepRows | None:
    """Each row's mean ms per timed step over these runs; None when none of them recorded
    its steps' data wait (nothing to split the step by)."""
    waits = [w for r in runs if r.ok for w in r.data_wait_ms]
    steps = [ms for r in runs if r.ok and r.data_wait_ms for ms in r.step_ms]
    if not waits or not steps:
        return None
    data = sum(waits) / len(waits)
    step = sum(steps) / len(steps)
    compute = step - data
    paces = [r.loader_period_ms for r in runs if r.ok and r.loader_period_ms]
    if paces:  # workers load beside the step: a free compute step still waits for them
        compute = min(compute, step - statistics.median(paces))
    return StepRows({DATA: data, COMPUTE: max(compute, 0.0)}, step)


def biggest_row(rows: dict[str, float] | None) -> str | None:
    """The row that takes most of the step; None when the rows are unknown."""
    if not rows:
        return None
    return max(rows, key=lambda row: rows[row])


def left_the_row(row: str, before: StepRows, after: StepRows) -> bool:
    """A fix of ``row`` moved the step's bottleneck: ``row`` was the biggest under the
    reference's runs (``before``) and another row is the biggest under the fix's
    (``after``). Two loader workers on moving_bottleneck: data 3.0 ms, compute 0.5 of a
    26 ms step (the one worker's pace set it), then data 1.5, compute 10.6 of 23 ms."""
    return biggest_row(before) == row and biggest_row(after) not in (None, row)


def in_words(rows: dict[str, float]) -> str:
    """ "data 61.0 ms, compute 39.0 ms": said in a rescreened knob's reason."""
    return ", ".join(f"{row} {ms:.1f} ms" for row, ms in rows.items())
