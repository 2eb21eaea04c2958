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

Where the knob switches all its values within one process (compare.switches_together) and
the script holds rounds of their blocks, the values are **arms of one process** beside the
script's own setting instead (compare.screen_arms): one process's set-up where a process a
value paid it (5-6 s of an H100 trial's 11-12; four worker counts, four set-ups), and each
value read against the script in the same process rather than against the cold run, which
runs slow for its disk reads. It wins by far when the 90% interval of its block pairs' gain
lies wholly above MIN_WIN_PCT; its pair is one more process switching the best value alone,
and it is kept when that process gains MIN_WIN_PCT too and the block pairs of both are
judged faster (switched.switched_judgement). Not kept, both processes are the ladder's
evidence: the screen its screen, the second process's block pairs the start of its decision.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from torchpace import knobs as registry
from torchpace.knobs.base import Knob, TuneContext
from torchpace.tune import compare
from torchpace.tune.ledger import BASELINE, Ledger, cost_ms
from torchpace.tune.noise import Decision, gain_pct, interval
from torchpace.tune.result import KnobOutcome, KnobStatus, Rung
from torchpace.tune.switched import MAX_SWITCHED_PAIRS, block_estimate, switched_judgement
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
    references: list[TrialResult]  # none where it was kept within processes
    # kept within processes (its values arms of one process): the block pairs' gain, which
    # its rung's figures chain on the baseline's (figures._chain_rungs)
    switched_gain_pct: float | None = None

    def rung(self, ledger: Ledger) -> Rung:
        rung = ledger.rung(self.name, self.config, self.runs)
        rung.switched_gain_pct = self.switched_gain_pct
        return rung


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
    arms = _arms_of_one_process(ledger, ctx, knob, plan.values)
    if arms is not None:
        return _switched_suspect(ledger, ctx, knob, arms)
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


# --- its values arms of one process --------------------------------------------------------


def _arms_of_one_process(
    ledger: Ledger, ctx: TuneContext, knob: Knob, values: tuple
) -> list[tuple[TrialResult, str | None]] | None:
    """Every value an arm of one process beside the script's own setting: (its screen,
    why it is out) per value. None where the knob cannot switch them all there, the script
    would not hold ROUNDS_AT_LEAST rounds of their blocks, or the process could not switch
    them (its values then go a process each, against the cold run)."""
    pairs = [(knob.name, value) for value in values]
    if not compare.switches_together(ledger, {}, knob.name, list(values)):
        return None
    if not compare.can_share_a_process(ledger, {}, pairs, knob.settle_estimate(values, ctx)):
        return None
    names = [f"{knob.describe(value)} (first finding)" for value in values]
    return compare.screen_arms(ledger, {}, pairs, names)


def wins_by_far(run: TrialResult) -> tuple[bool, str]:
    """Whether a switched screen of the suspect wins by far: the 90% interval of its block
    pairs' gain (noise.interval, signed-rank) lies wholly above MIN_WIN_PCT; and its words.
    Not a multiple of the block pairs' spread: loader workers switched against none read
    +105% over 5 block pairs that spread by 50%, all of them past +50%."""
    ci = interval(run.block_gains)
    if ci.low_pct is None:
        return False, f"{len(run.block_gains)} block pairs bound nothing yet"
    bound = f"90% interval from {ci.low_pct:+.1f}%"
    if ci.low_pct >= MIN_WIN_PCT:
        return True, f"by far ({bound}, over {MIN_WIN_PCT:.0f}%)"
    return False, f"not by far ({bound}, under {MIN_WIN_PCT:.0f}%)"


def _switched_suspect(
    ledger: Ledger, ctx: TuneContext, knob: Knob, screens: list[tuple[TrialResult, str | None]]
) -> KeptSuspect | None:
    """The arms' screens read: the best value that wins by far gets one more process
    switching it alone; kept when that process gains MIN_WIN_PCT too and every block pair
    of the two is judged faster."""
    best, best_gain = None, -math.inf
    for run, why in screens:
        said = ledger.verdicts.get(ledger.index(run), "")
        if why is None and knob.name in run.not_held:
            why = f"could not apply: {run.not_held[knob.name]}"
        if why is not None:
            ledger.verdict(run, f"{said}; left to the ladder")
            if knob.name not in run.not_held:
                ledger.first_finding_screens.append(run)
            continue
        ledger.first_finding_screens.append(run)
        gain = ledger.gains[id(run)]
        far, words = wins_by_far(run)
        then = "one more process" if far else "left to the ladder"
        ledger.verdict(run, f"{said}; {ctx.first_finding}'s knob, {words}: {then}")
        if far and gain > best_gain:
            best, best_gain = run, gain
    if best is None:
        return None
    return _confirm_switched(ledger, ctx, knob, best)


def _confirm_switched(
    ledger: Ledger, ctx: TuneContext, knob: Knob, best: TrialResult
) -> KeptSuspect | None:
    """One more process, the best value alone against the script's own setting."""
    value = best.config[knob.name]
    name, config = knob.describe(value), {knob.name: value}
    run = ledger.trial(config, f"{name} (first finding's pair)", knob.name)
    why = ledger.reject_reason(run)
    if why is None and not run.switched:
        # the knob's later comparisons are processes in pairs, as anywhere a switch failed
        compare.cannot_switch(ledger, knob.name, run)
        why = f"not switched ({ledger.not_switched[knob.name]})"
    if why is not None:
        ledger.verdict(run, f"first finding's pair: {why}; left to the ladder")
        return None
    gain = ledger.gains[id(run)] = block_estimate(run)
    # its block pairs start the ladder's decision of this very comparison, kept or not
    ledger.switched_decisions.append(({}, dict(config), list(run.block_gains), 1))
    judgement = switched_judgement([*best.block_gains, *run.block_gains], 2, MAX_SWITCHED_PAIRS)
    if gain < MIN_WIN_PCT or judgement.decision != Decision.FASTER:
        short = f"{gain:+.1f}% in its process, under {MIN_WIN_PCT:.0f}%" if (
            gain < MIN_WIN_PCT) else judgement.reason  # fmt: skip
        ledger.verdict(run, f"first finding's pair: {short}; left to the ladder")
        return None
    ledger.knobs.append(
        KnobOutcome(
            knob.name, KnobStatus.KEPT,
            f"alone: the doctor's first finding ({ctx.first_finding}); {judgement.reason}; "
            f"{block_estimate(best):+.1f}% at its screen and {gain:+.1f}% in its pair's "
            f"process",
            value=value, gain_pct=judgement.estimate_pct, changes_numerics=knob.changes_numerics,
            answers=list(knob.answers), reported=True,
        )
    )  # fmt: skip
    ledger.verdict(run, f"{gain:+.1f}% over its {len(run.block_gains)} block pairs, over "
                        f"{MIN_WIN_PCT:.0f}%: kept before the noise runs")  # fmt: skip
    return KeptSuspect(
        f"+ {name}", dict(config), [best, run], [], switched_gain_pct=judgement.estimate_pct
    )
