"""Is a trial faster than its reference, beyond what this machine's noise explains?

Made for shared machines (a 2-core VM where the same configuration ran 320-495 samples/s
within a minute, and a run now and then took 6-13x its usual time while something else had
the cores). Four ideas, each from a benchmarking tool that met the same problem:

- **Randomized interleaving** (RMIT, Abedi & Brecht): reference and candidate alternate in
  pairs, in an order drawn at random for each pair (search.py), so drift and periodic
  neighbours cancel instead of favouring whichever runs second.
- **Ratios, not differences**: each pair gives the log of reference time over candidate
  time; a 5% gain is +0.049 whether the step takes 14 ms or 140 ms.
- **Robust statistics** (criterion.rs, pyperf): the centre is the Hodges-Lehmann estimate
  (the median of the pairs' Walsh averages) and the interval is the distribution-free one
  that goes with it (Wilcoxon's signed-rank: order statistics of the Walsh averages). One
  disturbed pair at +1,259% moves the estimate by one rank, not by 1,259% / n as a mean does.
- **Sequential**: pairs are added until the interval clears the worth-it threshold, one way
  or the other, or MAX_PAIRS is reached; then the verdict says what could not be resolved.

A disturbed run is not left to the statistics alone: search.py re-runs it (see
`disturbance`). The back-to-back spread of the baseline runs (`Noise`) is kept as the scale
of the fast paths (a clear win or a clear loss needs no interval) and of the smallest change
this tune could have seen (`detectable_pct`).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import Enum

from torchpace import contention, stats

# A gain below this is not worth a configuration line, however quiet the machine.
MIN_GAIN_PCT = 3.0
# The most reference/candidate pairs one decision runs. On a 2-core VM's noise (about 6% from
# one pair to the next) a 5% gain takes 10-16 pairs to resolve; past SOFT_MAX_PAIRS only a
# candidate whose estimate is still worth a change goes on. A gain that MAX_PAIRS cannot
# separate from the noise is reported as such, with the smallest one they could have.
SOFT_MAX_PAIRS = 12
MAX_PAIRS = 16
# Each side of the interval errs with at most this probability (a 90% two-sided interval).
ALPHA = 0.05
# A win needs more: the test looks again after every pair, and each look is a chance for a
# knob worth nothing to cross; the lower bound of a win errs with at most this probability.
ALPHA_WIN = 0.025
# Pairs that each gain beyond the clear margin make a win without an interval from this many.
CLEAR_PAIRS = 2
# The clear margin in the pairs' own standard deviations, once PAIRS_FOR_SPREAD pairs have
# measured it: a knob worth nothing passes it in one pair 0.13% of the time on normal noise,
# in two pairs running one in 700,000 (a disturbed pair is run again, not counted).
CLEAR_SDS = 3.0
PAIRS_FOR_SPREAD = 6
# From this many pairs a candidate whose estimate is no gain at all is refused without
# waiting for the interval: a 5% gain under 6.5% pair noise shows <= 0 in 6 pairs 4% of times.
FUTILE_FROM = 6


# The clear-win threshold when fewer than two back-to-back baselines succeeded: one run has
# no spread, and a 0% noise figure would call any lucky pair a win.
UNMEASURED_THRESHOLD_PCT = 10.0
# the normal quantile of a one-sided 95% bound (low_bound_pct, detectable_pct)
Z_ONE_SIDED_95 = 1.645


@dataclass(frozen=True)
class Noise:
    # (max - min) / median of the back-to-back baseline medians, in %; None: fewer than two
    # of them succeeded, the noise is unknown
    pct: float | None
    medians_ms: tuple[float, ...]
    # the pairs' own spread (spread_of_pairs) once the tune's decisions have measured it over
    # PAIRS_FOR_SPREAD pairs at least; None before
    pair_sd_pct: float | None = None

    @property
    def threshold_pct(self) -> float:
        if self.pct is None:
            return UNMEASURED_THRESHOLD_PCT
        return max(self.pct, MIN_GAIN_PCT)

    @property
    def clear_pct(self) -> float:
        """A pair beyond this, every time, needs no interval: twice what a change must be
        worth, or the whole back-to-back spread when that is larger. Once the pairs' own
        spread is measured, CLEAR_SDS of it, never under twice what a change must be worth:
        the clear-win rule is about pairs, and the range of three back-to-back runs is not
        their noise, in either direction. One of them in a slow phase makes it too wide
        (makemore: a 41.9% range beside pairs that spread by 6.2%, so that num_workers=0 at
        +38, +22, +18, +75, +35, +40% took six pairs); all three in the same phase make it
        too narrow (gpt.py, whose processes run at one of two speeds: a 0.7% range beside
        pairs that spread by 11.8%, and bf16 kept at +7.9, +6.9% against the 6% floor, then
        refused with fused AdamW by the final check)."""
        if self.pair_sd_pct is None:
            return self.clear_by_runs_pct
        return max(CLEAR_SDS * self.pair_sd_pct, 2 * MIN_GAIN_PCT)

    @property
    def clear_by_runs_pct(self) -> float:
        """The clear margin before the pairs' spread is known."""
        return max(self.threshold_pct, 2 * MIN_GAIN_PCT)


def measure_noise(medians_ms: list[float]) -> Noise:
    if len(medians_ms) < 2:
        return Noise(None, tuple(medians_ms))
    mid = statistics.median(medians_ms)
    return Noise(round(100 * (max(medians_ms) - min(medians_ms)) / mid, 2), tuple(medians_ms))


def gain_pct(candidate_ms: float, reference_ms: float) -> float:
    """How much faster the candidate is, in % of throughput (1.25x faster -> 25.0)."""
    return round(100 * (reference_ms / candidate_ms - 1), 2)


def faster(candidate_ms: float, reference_ms: float, noise: Noise) -> bool:
    """One comparison beyond the whole back-to-back spread."""
    return gain_pct(candidate_ms, reference_ms) > noise.threshold_pct


def _log(gain: float) -> float:
    return math.log1p(gain / 100)


def _pct(log_ratio: float) -> float:
    return 100 * math.expm1(log_ratio)


# --- Hodges-Lehmann and its signed-rank interval (torchpace.stats) -----------------------
@dataclass(frozen=True)
class Interval:
    """The gain of a candidate over its reference from paired runs, in %."""

    estimate_pct: float  # Hodges-Lehmann: the median of the Walsh averages of the log-ratios
    low_pct: float | None  # None: too few pairs for a bound at this confidence
    high_pct: float | None
    pairs: int


def interval(gains: list[float] | tuple[float, ...], alpha: float = ALPHA) -> Interval:
    """Hodges-Lehmann's estimate of the gain and the signed-rank interval around it: each
    bound is wrong with probability <= alpha whatever the noise's shape, provided it is
    symmetric about the true gain (it is, for log-ratios of runs in random order)."""
    logs = [_log(g) for g in gains]
    n = len(logs)
    if n == 0:
        return Interval(0.0, None, None, 0)
    estimate = round(_pct(stats.hodges_lehmann(logs)), 2)
    bounds = stats.signed_rank_interval(logs, alpha)
    if bounds is None:
        return Interval(estimate, None, None, n)
    return Interval(estimate, round(_pct(bounds[0]), 2), round(_pct(bounds[1]), 2), n)


def spread_of_pairs(gains_by_decision: list[list[float]]) -> float | None:
    """The pair-to-pair standard deviation of the log-ratio, in %, pooled over decisions:
    each pair's distance from its own decision's estimate (times sqrt(n / (n - 1)): a
    centre drawn from the same n pairs sits closer to them than the truth does), scaled from
    the median absolute deviation (a disturbed pair does not inflate it). None under three."""
    residuals = []
    for gains in gains_by_decision:
        n = len(gains)
        if n < 2:
            continue
        centre = _log(interval(gains).estimate_pct)
        widen = math.sqrt(n / (n - 1))
        residuals += [widen * abs(_log(g) - centre) for g in gains]
    if len(residuals) < 3:
        return None
    return round(100 * stats.MAD_TO_SIGMA * statistics.median(residuals), 2)


def low_bound_pct(gains: list[float], pooled: list[list[float]]) -> float | None:
    """A one-sided 95% lower bound of the gain of ``gains`` for pairs too few for their own
    signed-rank interval: their estimate less 1.645 standard errors, the pairs' spread
    pooled over ``pooled`` (pairs that share their noise: the block pairs of every arm of
    one process). None where the pool holds under three pairs' residuals. Two block pairs
    that agree say nothing of the noise: on the README's example (a Zen 4 EPYC) fused SGD
    read +18.3 and +15.1% beside foreach's +26.2 and -7.7% and bf16's +35.1, +13.9 and
    -11.4% in the same process, and, ranked by its own two, its decision (three processes,
    +1.9%) went before glibc malloc's, which the time budget then cut."""
    sd = spread_of_pairs(pooled)
    if not gains or sd is None:
        return None
    return round(interval(gains).estimate_pct - Z_ONE_SIDED_95 * sd / math.sqrt(len(gains)), 2)


def detectable_pct(pair_sd_pct: float, pairs: int = MAX_PAIRS) -> float:
    """The smallest gain the paired test finds 4 times out of 5 in `pairs` pairs, given the
    pairs' spread: (z_alpha + z_0.8) standard errors, the signed-rank test's efficiency
    (3/pi against the t-test on normal noise) counted. Never below the worth-it threshold."""
    z = Z_ONE_SIDED_95 + 0.842
    se = pair_sd_pct / math.sqrt(pairs * 3 / math.pi)
    return round(max(MIN_GAIN_PCT, z * se), 1)


# --- the decision ----------------------------------------------------------------------------
class Decision(Enum):
    FASTER = "faster"
    NOT_FASTER = "not-faster"
    UNDECIDED = "undecided"  # run another pair


@dataclass(frozen=True)
class Judgement:
    decision: Decision
    gains_pct: tuple[float, ...]  # one per reference/candidate pair, in order
    reason: str

    @property
    def estimate_pct(self) -> float:
        """The gain these pairs show: Hodges-Lehmann, robust to a stray pair."""
        return interval(self.gains_pct).estimate_pct if self.gains_pct else 0.0

    @property
    def mean_gain_pct(self) -> float:  # the name the search and the report have always read
        return self.estimate_pct


def judge(gains: list[float], noise: Noise | None, max_pairs: int = MAX_PAIRS) -> Judgement:
    """The sequential test on the pairs measured so far (see the module's text):

    - every pair slower than the clear margin (one pair when three times beyond it): slower;
    - two pairs or more, every one faster than the clear margin: a clear win;
    - the interval's low bound above zero and the estimate worth a change: faster;
    - the interval's high bound under what a change must be worth: not worth it;
    - from FUTILE_FROM pairs, an estimate of no gain at all: not faster;
    - MAX_PAIRS without a decision: not faster beyond the noise, the interval said.
    """
    gains_t = tuple(gains)
    n = len(gains_t)
    if n == 0:
        return Judgement(Decision.UNDECIDED, gains_t, "no pair yet")
    noise = noise or Noise(0.0, ())
    clear = noise.clear_pct
    ci = interval(gains_t)
    shown = ", ".join(f"{g:+.1f}%" for g in gains_t)
    over = f"{n} pair{'s' if n > 1 else ''}: {shown}"
    if all(g < -clear for g in gains_t) and (n >= 2 or gains_t[0] < -3 * clear):
        return Judgement(Decision.NOT_FASTER, gains_t, f"slower ({ci.estimate_pct:+.1f}%, {over})")
    if n >= CLEAR_PAIRS and all(g > clear for g in gains_t):
        return Judgement(
            Decision.FASTER, gains_t, f"{ci.estimate_pct:+.1f}% ({over}: each beyond "
            f"{clear:.1f}%)",
        )  # fmt: skip
    bounds = ""
    win = interval(gains_t, ALPHA_WIN)
    if win.low_pct is not None and win.low_pct > 0 and ci.estimate_pct >= MIN_GAIN_PCT:
        bounds = f"; 95% lower bound {win.low_pct:+.1f}%"
        return Judgement(Decision.FASTER, gains_t, f"{ci.estimate_pct:+.1f}% ({over}{bounds})")
    if ci.low_pct is not None:
        bounds = f"; 90% interval {ci.low_pct:+.1f}% to {ci.high_pct:+.1f}%"
        if ci.high_pct < MIN_GAIN_PCT:
            word = "slower" if ci.high_pct < 0 else "not worth a change"
            return Judgement(
                Decision.NOT_FASTER, gains_t, f"{word} ({ci.estimate_pct:+.1f}%, {over}"
                f"{bounds}: under {MIN_GAIN_PCT:.0f}%)",
            )  # fmt: skip
    if n >= FUTILE_FROM and ci.estimate_pct <= 0:
        return Judgement(
            Decision.NOT_FASTER, gains_t, f"no gain ({ci.estimate_pct:+.1f}%, {over}{bounds})"
        )
    if n >= SOFT_MAX_PAIRS and ci.estimate_pct < MIN_GAIN_PCT and n < max_pairs:
        return Judgement(
            Decision.NOT_FASTER, gains_t, f"not worth a change ({ci.estimate_pct:+.1f}%, "
            f"{over}{bounds})",
        )  # fmt: skip
    if n >= max_pairs:
        return Judgement(
            Decision.NOT_FASTER, gains_t, f"not faster beyond the noise ({ci.estimate_pct:+.1f}%"
            f", {over}{bounds})",
        )  # fmt: skip
    more = f"{ci.estimate_pct:+.1f}% over {over}: more pairs"
    return Judgement(Decision.UNDECIDED, gains_t, more)


# --- a disturbed run -------------------------------------------------------------------------
# The thresholds are contention.py's, the one rule the doctor judges its window by too.


def disturbance(
    spread_pct: float | None,
    usual_spreads: list[float],
    others_cores: float | None,
    usual_others: list[float],
    cores: int | None = None,
) -> str | None:
    """Why a run looks disturbed from its own evidence, or None: its steps scatter far more
    than the tune's other runs' (a neighbour took the cores for part of it), or other
    processes used this process's ``cores`` (contention.busy_neighbour) much more during it
    than during the others.

    Both need two earlier runs to judge against: one run whose steps happened to be tight
    (2%) would make ordinary short-run scatter (14-25% over 4 steps on a shared VM) look
    disturbed, and every later run of that configuration would be set aside and run again."""
    if spread_pct is not None and len(usual_spreads) >= 2:
        usual = statistics.median(usual_spreads)
        if spread_pct > contention.spread_limit_pct(usual_spreads):
            return f"its steps spread {spread_pct:.0f}% (IQR/median; usual {usual:.0f}%)"
    if others_cores is not None and len(usual_others) >= 2:
        usual = statistics.median(usual_others)
        if contention.busy_neighbour(others_cores, cores, usual):
            return f"other processes used {others_cores:.1f} cores during it (usual {usual:.1f})"
    return None
