"""The statistics of a switched comparison: a knob switched on and off in block pairs within
each process (capture/switching.py), against the script's own setting.

Between processes a shared machine adds a difference of its own (gpt.py's processes on the
2-core VM ran at ~20.5 or ~25 ms/step, drawn per process); inside one process that
difference cancels, so every block pair is a measurement of the knob. The search
(compare.py, `paired_switched`) runs the processes; this module says how many, how
long their blocks can be, and what their block pairs decide.
"""

from __future__ import annotations

from torchpace.capture.switching import BLOCK_PAIRS, MIN_BLOCK_STEPS, SETTLE_STEPS, block_steps
from torchpace.tune import noise
from torchpace.tune.noise import Decision, Judgement, Noise, judge
from torchpace.tune.trial import TrialResult

# A switched comparison runs at least this many processes, whatever the first one said (one
# process's layout or phase is not the script's), and at most this many (their block pairs
# all count) or until MAX_SWITCHED_PAIRS block pairs: four processes of 8 pairs, or more of
# a short script's.
MIN_SWITCHED_RUNS = 2
MAX_SWITCHED_RUNS = 16
MAX_SWITCHED_PAIRS = 4 * BLOCK_PAIRS


def block_steps_that_fit(timed_steps: int, warmup: int, lengths: list[int], arms: int = 2) -> int:
    """A switched trial's timed steps per block: about its K timed steps over BLOCK_PAIRS,
    fewer where the job or the script (``lengths``: --job-steps, a trial that ended first)
    would end the plan first: makemore's 300 steps held 6 of 8 pairs of 25-step blocks, the
    bundled example's 16 steps one pair of 7-step blocks, where blocks of two hold two.
    ``arms`` blocks a round (the script's setting and each value screened in the process).
    0 when not one round of MIN_BLOCK_STEPS blocks fits: the knob's trials are ordinary."""
    per_block = block_steps(timed_steps)
    if not lengths:
        return per_block
    room = min(lengths) - warmup
    if room < arms * (SETTLE_STEPS + MIN_BLOCK_STEPS):
        return 0
    return max(MIN_BLOCK_STEPS, min(per_block, room // (arms * BLOCK_PAIRS) - SETTLE_STEPS))


def block_estimate(run: TrialResult) -> float:
    """A switched run's own gain: Hodges-Lehmann over its block pairs."""
    return noise.interval(run.block_gains).estimate_pct


def switched_noise(gains: list[float]) -> Noise:
    """The noise of block pairs is their own spread (no back-to-back runs measure it)."""
    return Noise(None, (), noise.spread_of_pairs([gains]) if len(gains) >= 3 else None)


def switched_judgement(gains: list[float], processes: int, most: int) -> Judgement:
    """noise.judge on block pairs, said in fewer words than a list of every pair."""
    judgement = judge(gains, switched_noise(gains), max_pairs=most)
    if not gains:
        return judgement
    ci = noise.interval(gains)
    bounds = ""
    if ci.low_pct is not None:
        bounds = f"; 90% interval {ci.low_pct:+.1f}% to {ci.high_pct:+.1f}%"
    where = f"{len(gains)} block pairs in {processes} process{'es' if processes > 1 else ''}"
    head = {Decision.FASTER: "faster", Decision.NOT_FASTER: "not faster"}.get(
        judgement.decision, "more block pairs"
    )
    why = judgement.reason.split(" (")[0] if judgement.decision == Decision.NOT_FASTER else head
    text = f"{why} ({ci.estimate_pct:+.1f}% over {where}, switched within each{bounds})"
    return Judgement(judgement.decision, judgement.gains_pct, text)
