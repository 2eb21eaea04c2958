"""What a knob costs once (torch.compile's compilation, autotuning: warm-up time beyond its
reference's), and whether its saving per step repays it within the job (--job-steps, else
the script's own end once a trial saw it, the cold run's run-on included: Ledger.job_length;
a script that ran past the run-on is a long job, and the verdict says how far it ran). A knob
faster a step that is not repaid within the job still makes the job slower end to end: it is
refused, at its screen already when even the best one noisy pair allows could not repay it.
"""

from __future__ import annotations

import math
import statistics

from torchpace.tune import noise as stats
from torchpace.tune.ledger import Ledger
from torchpace.tune.noise import Judgement
from torchpace.tune.result import KnobOutcome
from torchpace.tune.trial import TrialResult

ONE_TIME_REPORTED_S = 1.0  # warm-up time beyond the baseline's worth a line


def one_time_s(
    ledger: Ledger, runs: list[TrialResult], references: list[TrialResult]
) -> float | None:
    """What a knob costs once, in warm-up (torch.compile's compilation, autotuning),
    beyond what its references paid in the same warm-up steps (a script's first
    evaluation, its first epoch's set-up, are paid by both). None when it is within the
    references' own run-to-run spread, or under ONE_TIME_REPORTED_S."""
    refs = [r for r in references if r.ok] or ledger.baseline_runs
    # index for index: a script's first evaluation at step 5 is in the warm-up of a
    # trial with loader workers (a longer, drained warm-up) and in the measured steps of
    # its reference: both paid it
    cands = [r for r in runs if r.ok and r.warmup_ms]
    steps = max((len(r.warmup_ms) for r in cands), default=0)
    extra = [x for x in (_excess_s(r, len(r.warmup_ms)) for r in cands) if x is not None]
    base = [x for x in (_excess_s(r, steps) for r in refs) if x is not None]
    if not extra or not base:
        return None
    one_time = statistics.median(extra) - statistics.median(base)
    spread = max(base) - min(base) if len(base) > 1 else 0.0
    return one_time if one_time >= max(ONE_TIME_REPORTED_S, 3 * spread) else None


def one_time_cost(
    ledger: Ledger,
    outcome: KnobOutcome,
    runs: list[TrialResult],
    references: list[TrialResult],
    judgement: Judgement,
) -> str:
    """The one-time cost's words in a verdict, and how many steps the knob's saving per
    step takes to repay it: at the least gain its pairs show beyond the noise
    (`assured_gain_pct`), not at their estimate."""
    one_time = one_time_s(ledger, runs, references)
    if one_time is None:
        return ""
    outcome.one_time_s = round(one_time, 1)
    text = f"; one-time cost {one_time:.1f} s in warm-up"
    if not judgement.gains_pct or judgement.mean_gain_pct <= 0:
        return text
    gain = assured_gain_pct(judgement, ledger.clear_pct)
    if gain <= 0:
        outcome.payback_steps = None
        return text + ", its repayment not assured by its pairs"
    ms = statistics.median(r.ms_per_step for r in runs if r.ok)
    outcome.payback_steps = payback_steps(one_time, ms, gain)
    outcome.assured_gain_pct = round(gain, 1)
    past = ledger.script_runs_past if ledger.job_length() is None else None
    runs_on = (f"; the script ran past {past:,} steps (--job-steps N if the job is shorter)"
               if past else "")  # fmt: skip
    return (text + f", repaid after {outcome.payback_steps:,} steps{_at_assured(outcome)}"
            + runs_on)  # fmt: skip


def assured_gain_pct(judgement: Judgement, clear_pct: float) -> float:
    """The least gain a decision's pairs show beyond the noise: the 90% interval's low
    bound once it has one, else what the best pair shows beyond the clear margin (each
    pair is within it of the truth). Under load makemore's torch.compile won two pairs
    at +114% and +85% (margin 64%) and was kept as repaid after 236 of the job's 300
    steps; whole runs read 1.18x a step and the job ran 0.89x end to end."""
    gains = judgement.gains_pct
    ci = stats.interval(gains)
    if ci.low_pct is not None:
        return min(ci.low_pct, judgement.mean_gain_pct)
    return min(max(gains) - clear_pct, judgement.mean_gain_pct)


def not_repaid(outcome: KnobOutcome, job: tuple[int, str] | None) -> str | None:
    """Why a faster knob still makes the job slower end to end: its one-time cost is
    repaid after more steps than the job runs (``job``: Ledger.job_length, --job-steps or
    the script's own end). makemore under --max-steps 300 kept torch.compile at +30.9% a
    step: 25 s of compilation, repaid after 9,783 steps, made the whole job slower."""
    payback = outcome.payback_steps
    if job is None or outcome.one_time_s is None:
        return None
    job_steps, job_words = job
    if payback is None:  # its pairs do not show a gain beyond the noise to repay it with
        return (
            f"not repaid within the job: faster by {outcome.gain_pct:+.1f}% a step, but "
            f"its pairs assure no gain beyond the noise to repay its one-time cost of "
            f"{outcome.one_time_s:.1f} s ({job_words})"
        )
    if payback <= job_steps:
        return None
    return (
        f"not repaid within the job: faster by {outcome.gain_pct:+.1f}% a step, but its "
        f"one-time cost of {outcome.one_time_s:.1f} s is repaid after {payback:,} steps"
        f"{_at_assured(outcome)} and {job_words}"
    )


def not_repaid_at_screen(
    ledger: Ledger, outcome: KnobOutcome, promising: list[TrialResult], screen_gain
) -> str | None:
    """A knob that its screens already show cannot repay its one-time cost within the
    job (--job-steps), even at its screened gain plus the clear margin (the most one
    noisy pair allows): refused without pairs. On makemore (300 steps) torch.compile,
    3.4 s of compilation repaid after 1,711 steps, took a dozen trials to confirm and
    refuse, and fused AdamW, 1.11x on top of the kept knob by hand, was left undecided
    when the 300 s ended. ``screen_gain``: a screened run's gain (ladder.screen_gain)."""
    job = ledger.job_length()
    if job is None:
        return None
    job_steps, job_words = job
    paybacks = []
    for run in promising:
        one_time = one_time_s(ledger, [run], [])
        # the most one pair allows, and never under what a change must be worth
        gain = max(screen_gain(run) + ledger.clear_pct, stats.MIN_GAIN_PCT)
        if one_time is None or not run.ms_per_step:
            return None  # this value costs nothing once that can be told: decide it
        payback = payback_steps(one_time, run.ms_per_step, gain)
        if payback <= job_steps:
            return None
        paybacks.append((payback, one_time, gain, screen_gain(run)))
    payback, one_time, best_case, screened = min(paybacks)
    outcome.one_time_s = round(one_time, 1)
    return (
        f"not repaid within the job: its one-time cost of {one_time:.1f} s would be "
        f"repaid after {payback:,} steps even at {best_case:+.1f}% a step (its first run "
        f"{screened:+.1f}%, plus the {ledger.clear_pct:.1f}% margin of one pair), and "
        f"{job_words}"
    )


def _at_assured(outcome: KnobOutcome) -> str:
    """The payback's gain in words, where it is not the estimate."""
    assured = outcome.assured_gain_pct
    if assured is None or outcome.gain_pct is None or assured >= outcome.gain_pct:
        return ""
    return f" at {assured:+.1f}% a step, the least its pairs assure"


def payback_steps(one_time_s: float, ms_per_step: float, gain_pct: float) -> int:
    """Steps a one-time cost takes to repay at a gain of `gain_pct` (% of throughput) on
    steps of `ms_per_step` (the knob's speed: it saves ms * gain / 100 against its reference)."""
    return math.ceil(one_time_s * 1000 / (ms_per_step * gain_pct / 100))


def _excess_s(run: TrialResult, steps: int) -> float | None:
    """The first `steps` steps of a run (its warm-up, then its measured steps) beyond its
    own steady step time, in seconds: what those steps cost once."""
    every = [*run.warmup_ms, *run.step_ms]
    if not run.ms_per_step or len(every) < steps:
        return None
    return (sum(every[:steps]) - steps * run.ms_per_step) / 1000
