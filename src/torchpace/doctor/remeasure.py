"""The live doctor's second look at a disturbed window: when another process slowed the
profiled steps far below the unprofiled ones' pace (doctor/disturbance.py), the script runs
once more, into a folder of its own
inside the run folder, and the report is of that run, saying that the first was disturbed
(and whether the second was too). Once only: a machine busy twice in a row is busy, and
the report says so rather than running the user's script again and again."""

from __future__ import annotations

from dataclasses import replace

from torchpace.doctor.analyze import Diagnosis
from torchpace.doctor.disturbance import slowed

# The second run's folder, inside the first one's.
REMEASURED_DIR = "remeasured"


def needs_remeasure(diagnosis: Diagnosis) -> bool:
    """Only a window far slower than the unprofiled steps: its figures are wrong. A busy
    machine whose window kept the unprofiled steps' pace is said, not run again (on a
    shared machine, or in CI, it would double every run)."""
    check = diagnosis.window_check
    return check is not None and slowed(check)


def remeasured(first: Diagnosis, result, second: Diagnosis):
    """The second run's result and diagnosis, its check carrying the first one's."""
    if second.window_check is not None and first.window_check is not None:
        earlier = first.window_check.to_dict()
        second.window_check = replace(second.window_check, remeasured_from=earlier)
    return result, second
