"""The step's rows, read from a configuration's own trials (unprofiled timed steps): the
wait for the loader's batch ("data") and the rest of the step ("compute": copies, forward,
backward, the optimizer). A knob acts on one row (``Knob.row``); the ladder screens the
knobs of the biggest row first, and screens again a knob that read nothing while another
row dominated once that row is gone (ladder.py). On a loader-bound GPU step bf16 read
-0.6% where, once loading was fixed by hand, it gave +11.9%.
"""

from __future__ import annotations

from torchpace.tune.trial import TrialResult

DATA, COMPUTE = "data", "compute"


def step_rows(runs: list[TrialResult]) -> dict[str, float] | None:
    """Each row's mean ms per timed step over these runs; None when none of them recorded
    its steps' data wait (nothing to split the step by)."""
    waits = [w for r in runs if r.ok for w in r.data_wait_ms]
    steps = [ms for r in runs if r.ok and r.data_wait_ms for ms in r.step_ms]
    if not waits or not steps:
        return None
    data = sum(waits) / len(waits)
    step = sum(steps) / len(steps)
    return {DATA: data, COMPUTE: max(step - data, 0.0)}


def biggest_row(rows: dict[str, float] | None) -> str | None:
    """The row that takes most of the step; None when the rows are unknown."""
    if not rows:
        return None
    return max(rows, key=lambda row: rows[row])


def in_words(rows: dict[str, float]) -> str:
    """ "data 61.0 ms, compute 39.0 ms": said in a rescreened knob's reason."""
    return ", ".join(f"{row} {ms:.1f} ms" for row, ms in rows.items())
