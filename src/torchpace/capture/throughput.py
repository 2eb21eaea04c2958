"""The unprofiled steps that give the doctor its headline figure: samples/s over enough steps.

A loop whose steps swing (main-process data loading, 38-134 ms a step on one H100 job) has
no throughput in three steps and a median: samples/s is total samples / total time over as
many steps as a time budget allows, with a floor (a mean over fewer steps is noise) and a
cap (a fast loop need not run for minutes). The steps run after the profiled window and the
probes, with the user's own settings, no profiler and no file written between them.

First come untimed settling steps: while the trace was exported the loader's workers kept
filling their queue, and the first steps after it take those ready batches at no wait. A
loader with W workers and prefetch factor F holds at most W x F batches; that many steps
(plus one, for the switch back from the last probe) drain it to its steady level.
"""

from __future__ import annotations

from torchpace.facts.run import LoaderFacts

# At least this many measured steps, whatever the budget: a mean over fewer is noise.
MIN_STEPS = 10
# At most this many: 200 steps of a steady loop give its mean within a percent.
MAX_STEPS = 200
# A loop so slow that the floor would take this many budgets stops at SLOW_MIN_STEPS.
SLOW_BUDGETS = 6
SLOW_MIN_STEPS = 3
# Settling steps: one for the last probe's switch back, plus the loader's queue, capped so
# that a loader with very many workers does not double the run.
MAX_SETTLE_STEPS = 32
DEFAULT_PREFETCH_FACTOR = 2  # torch's default when a loader has workers


def settle_steps(loaders: list[LoaderFacts]) -> int:
    """Untimed steps before the measured ones: 1 + the batches the main loader can queue."""
    if not loaders:
        return 1
    main = max(loaders, key=lambda lf: lf.batches_seen)
    queued = main.num_workers * (main.prefetch_factor or DEFAULT_PREFETCH_FACTOR)
    return min(MAX_SETTLE_STEPS, 1 + queued)


class ThroughputMeter:
    """Counts the settling and measured steps; says when enough have been measured."""

    def __init__(self, budget_s: float, settle: int):
        self.budget_s = max(0.0, budget_s)
        self.settle_left = settle
        self.steps = 0
        self.elapsed_s = 0.0

    @property
    def settling(self) -> bool:
        return self.settle_left > 0

    def record(self, wall_ms: float) -> bool:
        """Counts one ended step; True while more steps are wanted."""
        if self.settle_left > 0:
            self.settle_left -= 1
            return True
        self.steps += 1
        self.elapsed_s += wall_ms / 1000
        return not self.enough()

    def enough(self) -> bool:
        if self.steps >= MAX_STEPS:
            return True
        if self.steps >= MIN_STEPS and self.elapsed_s >= self.budget_s:
            return True
        slow = self.elapsed_s >= SLOW_BUDGETS * max(self.budget_s, 1.0)
        return slow and self.steps >= SLOW_MIN_STEPS
