"""Was the profiled window disturbed? A window whose steps ran far slower than the same
run's unprofiled steps, or during which other processes kept this process's cores busy,
does not describe the job: its breakdown and its savings describe the contention.

Two facts, both from the capture (RunFacts): the window's and the unprofiled steps' wall
times (the profiler slows a step, but by a bounded factor: 97 against 76 ms on a quiet
2-core machine), and the CPU time other processes spent on this process's cores during the
window (capture/machine_load.py, from /proc/stat). Seen under contention on a 2-core
machine: windows 28 and 44 times slower than the unprofiled steps (786 vs 27.5 ms, 3,488
vs 79 ms). A trace alone (``--trace`` without run facts) has neither: no check.
"""

from __future__ import annotations

import statistics

from torchpace import contention
from torchpace.facts.run import RunFacts, StepPhase
from torchpace.report.window_model import WindowCheckReport

# The rule and its thresholds are contention.py's (window_slowed), beside the ones tune
# judges its runs by. A slowdown counts only with other processes busy on these cores where
# the capture measured them (facts from before machine_load.py have no such figure): without
# that, a slow window is the profiler's own cost, which a second run would only repeat.


def check_window(facts: RunFacts | None) -> WindowCheckReport | None:
    """The window's check; None without run facts or without profiled steps. The facts are
    read first (the steps of each phase, the machine's load in each), then judged by
    contention.py's rule."""
    if facts is None or not facts.window:
        return None
    window = statistics.median(s.wall_ms for s in facts.window)
    reference = [s.wall_ms for s in facts.in_phase(StepPhase.REFERENCE)]
    load, reference_load = facts.window_load, facts.reference_load
    other = load.other_cores() if load else None
    other_unprofiled = reference_load.other_cores() if reference_load else None
    cores = load.cores if load else None
    unprofiled = statistics.median(reference) if reference else None
    slowdown = window / unprofiled if unprofiled else None
    reasons = []
    if contention.window_slowed(window, unprofiled, other, cores):
        reasons.append(
            f"the profiled steps ran {slowdown:.0f}x slower than the unprofiled steps of the "
            f"same run ({window:,.1f} ms vs {unprofiled:,.1f} ms; the profiler alone costs "
            f"less than {contention.PROFILED_MAX_SLOWDOWN:.0f}x)"
        )
    if other is not None and cores and contention.busy_neighbour(other, cores):
        average = f", load average {load.load_1m:.1f}" if load.load_1m is not None else ""
        reasons.append(
            f"other processes used {other:.1f} of this process's {cores} cores during "
            f"the window{average}"
        )
    return WindowCheckReport(
        window_step_ms=round(window, 3),
        unprofiled_step_ms=round(unprofiled, 3) if unprofiled is not None else None,
        slowdown=round(slowdown, 2) if slowdown is not None else None,
        other_cores=other,
        other_cores_unprofiled=other_unprofiled,
        cores=cores,
        load_1m=load.load_1m if load else None,
        reasons=tuple(reasons),
        # the live doctor runs the script again after a slowed window (doctor/runs.py) and
        # keeps this check, as a dict, in the second run's (doctor/remeasure.py)
        remeasured_from=None,
        disturbed=bool(reasons),
        advice=ADVICE if reasons else None,
    )


def slowed(check: WindowCheckReport) -> bool:
    """The window's steps were far slower than the unprofiled ones, by more than the
    profiler's own cost and with other work on the cores: its numbers are wrong, not merely
    at risk (a busy machine alone may have left the window alone)."""
    return contention.window_slowed(
        check.window_step_ms, check.unprofiled_step_ms, check.other_cores, check.cores
    )


# What the reports say under a disturbed window's reasons.
ADVICE = (
    "the breakdown and the savings below describe the contention, not the job: run the "
    "doctor again on a quiet machine (or with the other work stopped)"
)
