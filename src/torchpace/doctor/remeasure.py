"""The live doctor's second look at a disturbed window: when another process slowed the
profiled steps (doctor/disturbance.py), the script runs once more, into a folder of its own
inside the run folder, and the report is of that run, saying that the first was disturbed
(and whether the second was too). Once only: a machine busy twice in a row is busy, and
the report says so rather than running the user's script again and again."""

from __future__ import annotations

from torchpace.doctor.analyze import Diagnosis

# The second run's folder, inside the first one's.
REMEASURED_DIR = "remeasured"


def needs_remeasure(diagnosis: Diagnosis) -> bool:
    check = diagnosis.window_check
    return check is not None and check.disturbed


def remeasured(first: Diagnosis, result, second: Diagnosis):
    """The second run's result and diagnosis, its check carrying the first one's."""
    if second.window_check is not None and first.window_check is not None:
        second.window_check.remeasured_from = first.window_check.to_dict()
    return result, second
