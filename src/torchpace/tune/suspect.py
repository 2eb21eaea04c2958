"""tune's first minute goes to the biggest suspect: right after the cold run, before the noise
runs (and the fidelity check's plain runs), the knob that answers the doctor's top-ranked
finding (``TuneContext.first_finding``) is screened, each of its planned values once against
the cold run. A value that wins by several times what the cold run's own step jitter makes of
a comparison of two runs (WIN_SPREADS of it, at least MIN_WIN_PCT: the cold run is slower than
a warm one, and one run has no run-to-run noise yet) gets one pair at once, a fresh baseline
run and the value in random order; a pair that wins by as much keeps it. The kept value is
then the base of everything after: it is the ladder's first rung (its screen and its pair;
without the fidelity check the noise runs run it too, with it they stay runs of the script
as it is, which the check compares with plain runs), and the ladder counts it kept (the
knobs that build on it are screened on it). A win by little changes nothing here: the noise
runs go as without it, and the ladder screens the knob first, in its first row whatever the
knob's own (ladder.Ladder.climb): the doctor measured its cost, which may show in another
row than the knob's (workers that crowd the cores slow the compute, not the wait for the
batch).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchpace import knobs as registry
from torchpace.knobs.base import Knob, TuneContext
from torchpace.tune.ledger import BASELINE, Ledger, cost_ms
from torchpace.tune.noise import gain_pct
from torchpace.tune.result import KnobOutcome, KnobStatus
from torchpace.tune.trial import TrialResult

WIN_SPREADS = 3.0  # a suspect's win must be this many times a run's noise from its steps
MIN_WIN_PCT = 10.0  # and at least this, whatever the spread


@dataclass
class KeptSuspect:
    """The first finding's knob, kept before the noise runs: its rung's runs so far and the
    baseline run it was paired with (the baseline rung's)."""

    name: str  # the rung's label: "+ num_workers=4"
    config: dict
    runs: list[TrialResult]
    references: list[TrialResult]


def suspect_knob(ctx: TuneContext, only: list[str] | None) -> Knob | None:
    """The knob that answers the doctor's first finding (the registry's first of them): one
    that stands alone and changes no training (no opt-in); None when there is none."""
    if ctx.first_finding is None:
        return None
    for name in registry.NAMES:
        knob = registry.get(name)
        if only is not None and name not in only:
            continue
        if ctx.first_finding in knob.answers and not knob.depends_on and knob.opt_in is None:
            return knob
    return None


def win_margin_pct(cold: TrialResult) -> float:
    """The gain a suspect must pass: WIN_SPREADS times what the cold run's step jitter makes
    of a comparison of two runs, at least MIN_WIN_PCT. A run's time per step is a mean over
    its K timed steps: it moves by the steps' spread (the interquartile range as a standard
    deviation) over sqrt(K), 1.25 of that for a median (baseline.calibrated_steps' rule), and
    the difference of two runs by sqrt(2) of that. Not the steps' spread itself: on the
    planted crowded job (8 workers on 2 cores) the cold run's steps spread by 16% (a 48%
    margin) while its runs differed by 3.4%, and num_workers=0, +26.8% over it (1.24x in the
    alternated A/B), was left to the ladder; its margin is now 20%."""
    steps = sorted(cold.step_ms)
    if len(steps) < 4 or not cold.ms_per_step:
        return MIN_WIN_PCT
    q = statistics.quantiles(steps, n=4)
    sd_pct = 100 * (q[2] - q[0]) / 1.35 / cold.ms_per_step
    run_pct = math.sqrt(2) * 1.25 * sd_pct / math.sqrt(len(steps))
    return max(WIN_SPREADS * run_pct, MIN_WIN_PCT)


def screen_suspect(ledger: Ledger, ctx: TuneContext, only: list[str] | None) -> KeptSuspect | None:
    """The first finding's knob screened against the cold run and, winning by far, confirmed
    by one pair: its outcome kept in the ledger. None when there is no such knob or it did
    not win by far (then its screens are only evidence: the ladder decides it)."""
    knob = suspect_knob(ctx, only)
    if knob is None:
        return None
    plan = knob.plan(ctx)
    if not plan.applicable:
        return None
    cold = ledger.loss_reference
    margin = win_margin_pct(cold)
    best, best_gain = None, -math.inf
    for value in plan.values:
        run = ledger.trial({knob.name: value}, f"{knob.describe(value)} (first finding)")
        why = ledger.reject_reason(run) or run.not_held.get(knob.name)
        if why is not None:
            ledger.verdict(run, f"first finding's screen: {why}; left to the ladder")
            continue
        ledger.first_finding_screens.append(run)
        gain = gain_pct(cost_ms(run), cost_ms(cold))
        far = "by far: one pair" if gain >= margin else f"under {margin:.0f}%: left to the ladder"
        ledger.verdict(run, f"{gain:+.1f}% over the cold run ({ctx.first_finding}'s knob), {far}")
        if gain > best_gain:
            best, best_gain = run, gain
    if best is None or best_gain < margin:
        return None
    return _confirm(ledger, ctx, knob, best, best_gain, margin)


def _confirm(
    ledger: Ledger,
    ctx: TuneContext,
    knob: Knob,
    best: TrialResult,
    screened_gain: float,
    margin: float,
) -> KeptSuspect | None:
    """One pair, a fresh baseline run and the value in random order: kept when it wins by
    the margin again."""
    value = best.config[knob.name]
    name = knob.describe(value)
    ref = run = None
    for is_reference in (True, False) if ledger.order.random() < 0.5 else (False, True):
        if is_reference:
            ref = ledger.trial({}, f"{BASELINE} (first finding's pair)")
        else:
            run = ledger.trial(best.config, f"{name} (first finding's pair)")
    why = ledger.reject_reason(run) or ("its reference failed" if not ref.ok else None)
    gain = None if why is not None else gain_pct(cost_ms(run), cost_ms(ref))
    if gain is not None and gain < margin:
        why = f"{gain:+.1f}% in its pair, under {margin:.0f}%"
    if ref.ok:
        ledger.verdict(ref, f"reference: paired with {name}")
    if why is not None:
        ledger.verdict(run, f"first finding's pair: {why}; left to the ladder")
        return None
    ledger.note_baseline(ref)
    ledger.record_decision({}, best.config, [gain])
    ledger.knobs.append(
        KnobOutcome(
            knob.name, KnobStatus.KEPT,
            f"alone: the doctor's first finding ({ctx.first_finding}); {gain:+.1f}% in its "
            f"pair and {screened_gain:+.1f}% at its screen, both over {margin:.0f}%",
            value=value, gain_pct=gain, changes_numerics=knob.changes_numerics,
            answers=list(knob.answers), reported=True,
        )
    )  # fmt: skip
    ledger.gains[id(run)] = gain
    ledger.verdict(run, f"pair: {gain:+.1f}%, over {margin:.0f}%: kept before the noise runs")
    return KeptSuspect(f"+ {name}", dict(best.config), [best, run], [ref])
