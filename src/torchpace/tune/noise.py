"""Is a trial faster than its reference, beyond what this machine's noise explains?

Noise is measured, not assumed: the baseline runs three times back to back and the spread
between those runs' medians is this machine's noise for this script, from one run to the
next. Shared machines also drift: the same script measured 103 ms, then 98 ms, then 80 ms
a minute later on the 2-core VM this was built on. That drift is not noise between
neighbours, so it is kept out of the estimate, and every decision compares a trial with
the reference run next to it in time (search.py alternates them), where drift cancels.
A gain counts only when it exceeds that noise and a floor below which a change is not
worth a config line. Step times are medians over K steps: one slow step (a GC pause,
a worker restart) does not move them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

# A gain below this is not worth a configuration line, however quiet the machine.
MIN_GAIN_PCT = 3.0


@dataclass(frozen=True)
class Noise:
    pct: float  # (max - min) / median of the back-to-back baseline medians, in %
    medians_ms: tuple[float, ...]

    @property
    def threshold_pct(self) -> float:
        return max(self.pct, MIN_GAIN_PCT)


def measure_noise(medians_ms: list[float]) -> Noise:
    if len(medians_ms) < 2:
        return Noise(0.0, tuple(medians_ms))
    mid = statistics.median(medians_ms)
    return Noise(round(100 * (max(medians_ms) - min(medians_ms)) / mid, 2), tuple(medians_ms))


def gain_pct(candidate_ms: float, reference_ms: float) -> float:
    """How much faster the candidate is, in % of throughput (1.25x faster -> 25.0)."""
    return round(100 * (reference_ms / candidate_ms - 1), 2)


def faster(candidate_ms: float, reference_ms: float, noise: Noise) -> bool:
    return gain_pct(candidate_ms, reference_ms) > noise.threshold_pct
