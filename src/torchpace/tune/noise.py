"""Is a trial faster than its reference, beyond what this machine's noise explains?

Noise is measured, not assumed: after one run that warms the caches (the first process of a
tune reads the script, its imports and its data from disk: on the 2-core VM this was built
on it ran 25% slower than the next ones), the baseline runs three times back to back and
the spread between those runs' medians is this machine's noise for this script, from one
run to the next. Shared machines also drift: the same script measured 103 ms, then 98 ms,
then 80 ms a minute later. That drift is not noise between neighbours, so it is kept out
of the estimate, and every decision compares a trial with the reference run next to it in
time (search.py alternates them), where drift cancels.

A decision is a sequential paired test (`judge`): each pair is a reference run and the
candidate's run right after it, and its gain is the candidate's speed-up over that
reference. One pair never decides a win. Two pairs that each gain beyond the whole
back-to-back spread are a clear win. Otherwise more pairs are run while the mean gain is
worth having and the evidence is not yet enough, up to MAX_PAIRS, and the candidate wins
when the one-sided 90% lower confidence bound of its mean paired gain (Student's t on the
pairs' own spread) is above MIN_GAIN_PCT. That is how a real 10% gain (bf16 autocast on
this CPU) is kept on a machine whose runs swing 15% from one to the next, where a
threshold on single runs refused it, while a knob worth nothing is still refused: its
pairs scatter around zero. Step times are medians over K steps: one slow step (a GC pause,
a worker restart) does not move them.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from enum import Enum

# A gain below this is not worth a configuration line, however quiet the machine.
MIN_GAIN_PCT = 3.0
# The most reference/candidate pairs one decision runs: a gain that five pairs cannot
# separate from the noise is not worth the trials it would take.
MAX_PAIRS = 5
# Student's t, one-sided 90% quantile, by degrees of freedom (pairs - 1).
_T90 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397}


# The clear-win threshold when fewer than two back-to-back baselines succeeded: one run has
# no spread, and a 0% noise figure would call any lucky pair a win.
UNMEASURED_THRESHOLD_PCT = 10.0


@dataclass(frozen=True)
class Noise:
    # (max - min) / median of the back-to-back baseline medians, in %; None: fewer than two
    # of them succeeded, the noise is unknown
    pct: float | None
    medians_ms: tuple[float, ...]

    @property
    def threshold_pct(self) -> float:
        if self.pct is None:
            return UNMEASURED_THRESHOLD_PCT
        return max(self.pct, MIN_GAIN_PCT)


def measure_noise(medians_ms: list[float]) -> Noise:
    if len(medians_ms) < 2:
        return Noise(None, tuple(medians_ms))
    mid = statistics.median(medians_ms)
    return Noise(round(100 * (max(medians_ms) - min(medians_ms)) / mid, 2), tuple(medians_ms))


def gain_pct(candidate_ms: float, reference_ms: float) -> float:
    """How much faster the candidate is, in % of throughput (1.25x faster -> 25.0)."""
    return round(100 * (reference_ms / candidate_ms - 1), 2)


def faster(candidate_ms: float, reference_ms: float, noise: Noise) -> bool:
    """One comparison beyond the whole back-to-back spread (the clear-win test)."""
    return gain_pct(candidate_ms, reference_ms) > noise.threshold_pct


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
    def mean_gain_pct(self) -> float:
        return round(statistics.fmean(self.gains_pct), 2) if self.gains_pct else 0.0


def lower_bound_pct(gains: list[float] | tuple[float, ...]) -> float | None:
    """The one-sided 90% lower confidence bound of the mean paired gain (None under 2)."""
    n = len(gains)
    if n < 2:
        return None
    t = _T90.get(n - 1, 1.282)
    return statistics.fmean(gains) - t * statistics.stdev(gains) / math.sqrt(n)


def judge(gains: list[float], noise: Noise, max_pairs: int = MAX_PAIRS) -> Judgement:
    """The sequential paired test on the gains measured so far (see the module's text)."""
    gains_t = tuple(gains)
    n = len(gains_t)
    if n == 0:
        return Judgement(Decision.UNDECIDED, gains_t, "no pair yet")
    mean = statistics.fmean(gains_t)
    shown = ", ".join(f"{g:+.1f}%" for g in gains_t)
    if n == 1:
        if mean <= MIN_GAIN_PCT:
            word = "slower" if mean < 0 else "not faster beyond the noise"
            return Judgement(
                Decision.NOT_FASTER, gains_t, f"{word} ({mean:+.1f}%, worth a change from "
                f"{MIN_GAIN_PCT:.0f}%)",
            )  # fmt: skip
        return Judgement(Decision.UNDECIDED, gains_t, f"{mean:+.1f}%: to be confirmed")
    if all(g > noise.threshold_pct for g in gains_t):
        return Judgement(
            Decision.FASTER, gains_t, f"{mean:+.1f}% (pairs {shown}: each beyond the "
            f"{noise.threshold_pct:.1f}% noise)",
        )  # fmt: skip
    if mean <= MIN_GAIN_PCT:
        word = "slower" if mean < 0 else "not faster beyond the noise"
        return Judgement(
            Decision.NOT_FASTER, gains_t, f"{word} (mean {mean:+.1f}% over {n} pairs: {shown})"
        )
    bound = lower_bound_pct(gains_t)
    if n >= 3 and bound is not None and bound > MIN_GAIN_PCT:
        return Judgement(
            Decision.FASTER, gains_t, f"{mean:+.1f}% (pairs {shown}; 90% lower bound "
            f"{bound:+.1f}%)",
        )  # fmt: skip
    if n >= max_pairs:
        return Judgement(
            Decision.NOT_FASTER, gains_t, f"not faster beyond the noise (mean {mean:+.1f}% "
            f"over {n} pairs: {shown}; 90% lower bound {bound:+.1f}%, needs "
            f"{MIN_GAIN_PCT:.0f}%)",
        )  # fmt: skip
    return Judgement(Decision.UNDECIDED, gains_t, f"{mean:+.1f}% over {n} pairs: more pairs")
