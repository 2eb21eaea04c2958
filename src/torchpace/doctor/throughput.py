"""The headline figure: samples/s as total samples / total time over the capture's
unprofiled steps (capture/throughput.py says how many), with the spread of those steps.

A mean, not a median: a loop whose steps swing (a slow batch every few steps) is as fast as
its total time says, and a median of its steps says something else. The profiled window's
steps are used only when the run has no unprofiled ones (a script that ended first, a
trace from elsewhere), and the figure then says so: the profiler slows every op.
"""

from __future__ import annotations

import statistics

from torchpace.facts.run import RunFacts, StepPhase, StepRecord
from torchpace.report.model import Throughput
from torchpace.stats import quantile

__all__ = ["Throughput", "measure"]

UNPROFILED = "unprofiled steps after the window"
PROFILED = "profiled window steps (no unprofiled ones were measured)"


def measure(facts: RunFacts | None) -> Throughput | None:
    """The throughput of the run's unprofiled steps (else its window's); None without steps."""
    if facts is None:
        return None
    steps, source = facts.in_phase(StepPhase.REFERENCE), UNPROFILED
    if not steps:
        steps, source = facts.window, PROFILED
    if not steps:
        return None
    batch = _batch_size(facts)
    times = sorted(s.wall_ms for s in steps)
    seconds = sum(times) / 1000
    samples = _samples(steps, batch)
    half = len(steps) // 2
    first = _rate(steps[:half], batch) if half else None
    second = _rate(steps[half:], batch) if half else None
    return Throughput(
        source=source,
        steps=len(steps),
        seconds=round(seconds, 3),
        step_ms_mean=round(1000 * seconds / len(steps), 3),
        data_wait_ms_mean=round(statistics.fmean(s.data_wait_ms for s in steps), 3),
        samples=samples,
        samples_per_s=round(samples / seconds, 1) if samples and seconds else None,
        step_ms_p10=round(quantile(times, 0.10), 3),
        step_ms_median=round(statistics.median(times), 3),
        step_ms_p90=round(quantile(times, 0.90), 3),
        step_ms_min=round(times[0], 3),
        step_ms_max=round(times[-1], 3),
        first_half_samples_per_s=first,
        second_half_samples_per_s=second,
        unprofiled=source == UNPROFILED,
    )


def _batch_size(facts: RunFacts) -> int | None:
    if not facts.loaders:
        return None
    return max(facts.loaders, key=lambda lf: lf.batches_seen).batch_size


def _samples(steps: list[StepRecord], batch: int | None) -> int | None:
    """Samples the steps fetched, as counted at each step; a step with no count (a batch the
    capture could not size) counts the loader's batch size, and None when that is unknown."""
    total = 0
    for s in steps:
        n = s.samples or batch
        if not n:
            return None
        total += n
    return total


def _rate(steps: list[StepRecord], batch: int | None) -> float | None:
    samples, seconds = _samples(steps, batch), sum(s.wall_ms for s in steps) / 1000
    return round(samples / seconds, 1) if samples and seconds else None
