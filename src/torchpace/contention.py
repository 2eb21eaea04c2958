"""When a measurement was disturbed by other work on the machine: the one rule the doctor
(doctor/disturbance.py: a profiled window) and tune (tune/disturbed.py, tune/noise.py: a
trial run) both judge by, with every threshold here (the standard library only: it sits on
the lowest floor, below both verbs and the capture that measures the load).

Three signs, each against what is usual for the same measurement:
- far slower: the steps took this many times the comparable steps (the doctor compares a
  profiled window with the same run's unprofiled steps, so its factor allows for the
  profiler's own cost; tune compares a run with its configuration's other runs);
- scattered: a run's own steps spread (IQR / median) far more than usual;
- a busy neighbour: other processes used half of the CPUs this process may run on beyond
  what they usually used (capture/machine_load.py reads both figures). The share, not a
  count of cores: a neighbour's core takes half a 2-core job and a 64th of a 64-core one.
"""

from __future__ import annotations

import statistics

# Other processes using this share of this process's CPUs beyond their usual use: the job
# ran on what was left of the machine.
BUSY_SHARE = 0.5
# The profiler's own cost stays under this factor of the unprofiled step (its hooks add
# per-op work: 1.3x on the example loop, up to ~2x on the most op-heavy CPU loops); a window
# slower than this was slowed by something else.
PROFILED_MAX_SLOWDOWN = 3.0
# ...but on a step of a few ms the profiler's per-op cost alone can be several times the
# step (a tiny MLP: 1 ms unprofiled, 5 ms profiled, on a quiet machine): a slowdown counts
# only past this many ms per step.
PROFILED_MIN_EXCESS_MS = 10.0
# A run this much slower (in %) than its configuration's other runs, or three times the
# machine's noise when that is larger, was disturbed (seen on a shared 2-core VM: a baseline
# at 478 ms between runs of 44-52 ms, which made the next two knobs look 140% and 1,000%
# faster).
RUN_MAX_SLOWER_PCT = 50.0
RUN_NOISE_FACTOR = 3.0
# A tune run beside a busy neighbour is disturbed only when it is also slower than its
# configuration's other runs by the noise's threshold, or by this much (in %) before the
# noise is measured: on a machine whose load comes and goes all the time, re-running every
# run beside it would measure nothing else.
RUN_MIN_SLOWED_PCT = 3.0
# A run whose own steps spread this many times the usual (and past the floor) was disturbed.
SPREAD_FACTOR = 3.0
SPREAD_FLOOR_PCT = 10.0


def busy_neighbour(other_cores: float, cores: int | None, usual_cores: float = 0.0) -> bool:
    """Other processes used BUSY_SHARE of this process's ``cores`` (one where unknown)
    beyond ``usual_cores``: 0 for a quiet machine (the doctor: a busy neighbour all along
    still makes the breakdown describe the contention), the median of the comparable runs
    for tune (a neighbour there all along slows both sides of a pair alike)."""
    return other_cores - usual_cores >= BUSY_SHARE * (cores or 1)


def far_slower(ms: float, usual_ms: float, factor: float, min_excess_ms: float = 0.0) -> bool:
    """``ms`` at least ``factor`` times ``usual_ms``, and by at least ``min_excess_ms``."""
    return usual_ms > 0 and ms >= factor * usual_ms and ms - usual_ms >= min_excess_ms


def window_slowed(
    window_ms: float | None, unprofiled_ms: float | None, other_cores: float | None,
    cores: int | None,
) -> bool:  # fmt: skip
    """The doctor's rule for a profiled window: its steps far slower than the same run's
    unprofiled ones (by more than the profiler's own cost), with other processes busy on
    these cores, or their use not measured (facts from before the machine's load was read)."""
    if window_ms is None or not unprofiled_ms:
        return False
    if not far_slower(window_ms, unprofiled_ms, PROFILED_MAX_SLOWDOWN, PROFILED_MIN_EXCESS_MS):
        return False
    return other_cores is None or busy_neighbour(other_cores, cores)


def run_slower_limit_pct(noise_pct: float) -> float:
    """How much slower (in %) than its configuration's other runs a tune run may be."""
    return max(RUN_MAX_SLOWER_PCT, RUN_NOISE_FACTOR * noise_pct)


def spread_limit_pct(usual_spreads: list[float]) -> float:
    """The step spread (IQR / median, %) past which a run's steps scattered far more than
    the ``usual_spreads`` of comparable runs (not empty)."""
    return max(SPREAD_FLOOR_PCT, SPREAD_FACTOR * statistics.median(usual_spreads))
