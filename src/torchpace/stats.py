"""The robust statistics every verb measures with, each written once (the standard library
only: it sits on the lowest floor, below everything that times a step).

pyperf keeps its statistics in one module apart from its runner and its workers; so does
torchpace. What each estimator is for:

- the median absolute deviation (MAD), scaled to a standard deviation: the spread of a few
  steps that one GC pause or one busy neighbour does not inflate (doctor/ranks.py's
  stragglers, tune's pair-to-pair spread);
- the standard error of a median from that spread (compare's noise of each side);
- Hodges-Lehmann's estimate (the median of the Walsh averages) and the distribution-free
  interval that goes with it, Wilcoxon's signed rank, counted exactly (tune's paired test);
- the trimmed mean: a run's time per step less its extremes (tune's trials, the blocks of
  a switched run);
- the quantile by linear interpolation, numpy's default (the doctor's p10/p90 step times).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from functools import lru_cache

# 1 / Phi^-1(3/4): the MAD of normal noise times this is its standard deviation.
MAD_TO_SIGMA = 1.4826
# sqrt(pi / 2): the standard error of the median of n normal draws is this many sigma /
# sqrt(n) (the median is 64% as efficient as the mean on normal noise, and far steadier on
# noise with outliers).
MEDIAN_SE_FACTOR = 1.2533


def median_absolute_deviation(values: Iterable[float]) -> float:
    """The median of the distances from the median (0 for one value)."""
    values = list(values)
    middle = statistics.median(values)
    return statistics.median(abs(v - middle) for v in values)


def robust_sigma(values: Iterable[float]) -> float:
    """A standard deviation read from the MAD: one wild value moves it by one rank."""
    return MAD_TO_SIGMA * median_absolute_deviation(values)


def median_standard_error(values: Sequence[float]) -> float:
    """The standard error of the median of ``values``, from their robust spread (0 under 2)."""
    if len(values) < 2:
        return 0.0
    return MEDIAN_SE_FACTOR * robust_sigma(values) / math.sqrt(len(values))


def trimmed_mean(values: Iterable[float], cut: int) -> float:
    """The mean of ``values`` less the ``cut`` smallest and the ``cut`` largest."""
    ordered = sorted(values)
    kept = ordered[cut : len(ordered) - cut]
    if not kept:
        raise ValueError(f"cutting {cut} from each end of {len(ordered)} values leaves none")
    return statistics.fmean(kept)


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between the closest ranks (numpy's default);
    ``sorted_values`` sorted ascending, not empty."""
    pos = q * (len(sorted_values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


# --- Hodges-Lehmann and the signed-rank interval ------------------------------------------
def walsh_averages(values: Sequence[float]) -> list[float]:
    """Every pair's mean, each value with itself included (n(n+1)/2 of them), sorted."""
    return sorted((a + b) / 2 for i, a in enumerate(values) for b in values[i:])


def hodges_lehmann(values: Sequence[float]) -> float:
    """The centre of a symmetric sample: the median of its Walsh averages. One stray value
    moves it by one rank, not by its size over n as it moves the mean."""
    return statistics.median(walsh_averages(values))


@lru_cache(maxsize=128)
def signed_rank_cdf(n: int) -> tuple[float, ...]:
    """P(W+ <= w) for w = 0..n(n+1)/2, W+ Wilcoxon's signed-rank statistic of n values under
    no effect (each rank's sign a fair coin): counted exactly, as subset sums of 1..n."""
    total = n * (n + 1) // 2
    counts = [1] + [0] * total
    for rank in range(1, n + 1):
        for w in range(total, rank - 1, -1):
            counts[w] += counts[w - rank]
    cdf, running, outcomes = [], 0, 2**n
    for c in counts:
        running += c
        cdf.append(running / outcomes)
    return tuple(cdf)


def signed_rank_interval(values: Sequence[float], alpha: float) -> tuple[float, float] | None:
    """The distribution-free interval around the Hodges-Lehmann estimate: the c-th smallest
    and c-th largest Walsh averages, c the largest with P(W+ <= c - 1) <= alpha, so that
    each bound is wrong with probability <= alpha whatever the noise's shape, provided it is
    symmetric about the centre. None where n values are too few for that confidence (under
    5 at alpha = 0.05: all n agreeing has probability 1/2^n)."""
    cdf = signed_rank_cdf(len(values))
    c = 0
    while c < len(cdf) and cdf[c] <= alpha:
        c += 1
    if c == 0:
        return None
    walsh = walsh_averages(values)
    return walsh[c - 1], walsh[-c]
