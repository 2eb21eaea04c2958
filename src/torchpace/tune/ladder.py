"""tune's second and third phases: each knob screened, then decided, climbing a ladder.

The knobs go a row of the step at a time (see below). Every candidate value of every
applicable knob of a row is screened once against the most recent run of what is kept
(compare.screen); values within the clear margin of the best are ranked in one more block (a
fresh reference and each once, random order); the best one with the loss intact is then
decided by the sequential paired test (compare.paired). Every knob of a row is screened
before any is decided (those answering the doctor's findings first), and the knobs are
decided in the order of what their best screens assure (the gain less its uncertainty:
_assured_gain): a budget's pairs go where this machine showed a gain. A knob clear at its
screen already is decided at once.

Each knob's pairs run **on top of every knob kept before it**: the decisions climb a ladder,
each kept knob a rung, as a careful person's ladder does. Interactions are real (fused AdamW
1.00x beside 4 loader workers on 2 cores, 1.14x on top of num_workers=0), and a knob kept is
kept in the company it will run in. Knobs that build on another (persistent workers on
workers) are screened and decided after it, on top of it.

The knobs are screened by the row of the step they act on (rows.py: the wait for the
loader's batch, the rest of the step), the biggest row first. Each kept rung's own runs
re-read the rows: when another row is then the biggest, the climb goes there and the row's
knobs not yet decided come back after it (_row_moved). A knob that read nothing (not
clearly slower, not kept) while another row dominated is screened again on top of the kept
configuration once its own row is the biggest, or once its own row has grown to twice the
room it had (_hidden), and decided there: bf16
reads -0.6% behind a loader-bound GPU step and +11.9% once loading is fixed. One knob goes
first whatever its row: the one that answers the doctor's first finding
(suspect.suspect_knob), when its screen before the noise runs did not keep it already. The
doctor measured that finding's cost, and it may show in another row than the knob's: loader
workers that crowd the cores leave no wait for the batch and slow the compute, so on the
planted crowded job num-workers (the data row) waited behind the whole compute row and a
180 s budget ended first. It joins the first row climbed, screened ahead of its knobs.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from torchpace import knobs as registry
from torchpace.knobs.base import Knob, TuneContext
from torchpace.tune import compare, payback
from torchpace.tune import noise as stats
from torchpace.tune.ledger import Ledger, cost_ms, label
from torchpace.tune.noise import Decision, Judgement, gain_pct
from torchpace.tune.result import KnobOutcome, KnobStatus
from torchpace.tune.rows import StepRows, biggest_row, in_words, left_the_row, step_rows
from torchpace.tune.suspect import suspect_knob
from torchpace.tune.switched import switched_noise
from torchpace.tune.trial import TrialResult

# a knob that read nothing is screened again once its row leaves it this many times the
# room it had (rows.StepRows.room_pct), beyond the clear margin
ROOM_GROWTH = 2.0
# one knob's decision may take this part of the time budget left when it began, and is then
# refused as undecided: the knobs not yet screened get their turn (compare.spent_its_share)
DECISION_SHARE = 1 / 3
# a knob decided in pairs of processes is decided at its screen only when it gains more than
# this many clear margins there (one within-process screen past the margin is enough)
CLEAR_BY_FAR = 2.0


@dataclass
class _Candidate:
    knob: Knob
    config: dict  # the rung: every knob kept before it, and this one
    value: object
    runs: list[TrialResult]  # its confirmation's runs, on top of the knobs kept before
    switched_gain_pct: float | None = None  # decided within processes: the block pairs' gain


@dataclass
class _Screened:
    """A knob whose screens left values worth deciding (between its screens and its
    paired test)."""

    knob: Knob
    outcome: KnobOutcome
    base_config: dict
    promising: list[TrialResult]
    # a value refused by its pairs before this decision, in words ("num_workers=2: not
    # confirmed: ..."): the runner-up values get their own decision, after the other knobs
    earlier: str = ""
    refused_by_pairs: bool = False  # set by the decision: the pairs said no (not a failure)
    # the 90% high bound of the gain the refusing pairs allow (None: too few for one), and
    # the reference they were read against: what _second_look weighs the screen against
    refused_high_pct: float | None = None
    refused_on: dict | None = None
    second_look: bool = False  # this decision is a second look (_second_look): decided afresh

    def best(self, gain_of: Callable[[TrialResult], float]) -> TrialResult:
        """Its value that read the largest gain."""
        return max(self.promising, key=gain_of)

    def best_gain(self, gain_of: Callable[[TrialResult], float]) -> float:
        return gain_of(self.best(gain_of))


@dataclass
class _Judged:
    """A knob's screen and the rows of the step it ran on: what decides whether it is
    screened again once another row is gone."""

    knob: Knob
    values: tuple
    rows: StepRows | None  # the step's rows under the screen's reference
    best_gain: float  # its best screened value's gain, in %
    base: dict  # the screen's reference: what each value was screened on top of
    # what its latest decision was made on top of (None: not decided): a knob decided on
    # top of what is kept now has been measured where its row now stands
    decided_on: dict | None = None


def ordered_knobs(ctx: TuneContext, only: list[str] | None) -> list[Knob]:
    """The knobs to try: the doctor's findings first (a tight budget tries what was seen to
    cost), then the registry's order; dependents stay after what they build on."""
    names = [n for n in registry.NAMES if only is None or n in only]
    knobs = [registry.get(n) for n in names]
    return sorted(
        knobs,
        key=lambda k: (
            bool(k.depends_on),
            not (set(k.answers) & ctx.finding_codes),
            names.index(k.name),
        ),
    )


def _switched(screen: _Screened) -> bool:
    """Its screens were switched within processes: so is its decision (compare.switch_for)."""
    return all(run.switched for run in screen.promising)


def _held_against(name: str, runs: list[TrialResult]) -> str:
    """The script's own lines that the knob held its setting against (its later
    set_num_threads(32)): said in the verdict; the source edit changes them too."""
    lines = list(dict.fromkeys(line for r in runs for line in r.overridden_at.get(name, ())))
    return f"; held against the script's {', '.join(lines)}" if lines else ""


def screen_gain(ledger: Ledger, run: TrialResult) -> float:
    """A screened value's gain over every pair it had: a second look's first pair counts
    (a +17.7% second run after a -23.9% first is not a +17.7% value)."""
    gains = [*ledger.prior_gains.get(id(run), []), ledger.gains.get(id(run), 0.0)]
    return sum(gains) / len(gains)


class Ladder:
    """The climb: ``climb(knobs)`` screens and decides them, appending each knob's outcome
    and each kept knob's rung to the ledger."""

    def __init__(self, ledger: Ledger, ctx: TuneContext):
        self.ledger = ledger
        self.ctx = ctx
        # knob name -> its kept rung (decided on top of the knobs kept before it): what a
        # knob that builds on it is screened on
        self._winners: dict[str, _Candidate] = {}
        # the step's rows under the baseline, and under the ladder's top (its kept rung's runs)
        self._baseline_rows = step_rows(ledger.baseline_runs)
        # a knob kept before the ladder (suspect.py) is its top already: the rows under it
        top = [t for t in ledger.trials if t.config == ledger.kept] if ledger.kept else []
        self._top_rows = step_rows(top) or self._baseline_rows
        self._judged: dict[str, _Judged] = {}  # knob name -> its latest screen
        # knob name -> its screen, not decided yet: its row was left for a bigger one after a
        # rung (_row_moved); decided when the ladder comes back to its row
        self._deferred: dict[str, _Screened] = {}
        self._reused: set[int] = set()  # id(trial): the first finding's screens, not run again
        # a row's knobs screened together in one process on top of this configuration
        # (_screen_row_together): knob name -> each value's (screen, why it is out)
        self._row_base: dict | None = None
        self._row_screens: dict[str, list[tuple[TrialResult, str | None]]] = {}
        self._once: list[Knob] = []  # the knobs that pay once, for climb_once
        # screens that read under a change's worth while other rows waited (_decide_weak)
        self._weak: list[_Screened] = []
        # the knobs that build on others, with their outcomes and values (_dependent): tried
        # again once what they build on is kept late (_climb_from_refused_fixes)
        self._dependents: list[tuple[Knob, KnobOutcome, tuple]] = []

    def _gain(self, run: TrialResult) -> float:
        return screen_gain(self.ledger, run)

    def climb(self, knobs: list[Knob]) -> dict:
        """The knobs a row at a time, the biggest row of the ladder's top first (all at once
        where the rows are unknown), the first finding's knob first of all, each row's knobs
        screened on top of what is kept (the first row's on the baseline), then those
        whose screens read under a change's worth while rows waited (_decide_weak), then
        the knobs that build on others, then those that read nothing behind another row
        screened again. A knob that pays once (torch.compile) waits for ``climb_once``: the batch
        size (search.py) goes between them. Returns the configuration kept; each kept knob
        is a rung."""
        dependents: list[tuple[Knob, KnobOutcome, tuple]] = []
        lead = self._first_finding_knob(knobs)
        # a knob that pays once (torch.compile) is climbed after every row: its trial pays
        # its one-time cost before it shows anything (20-25 s of makemore's ~200 s, after
        # which fused AdamW's decision, or the loader workers' screen, no longer fit)
        self._once = [k for k in knobs if k.pays_once and k is not lead]
        remaining = [k for k in knobs if k not in self._once]
        while remaining:
            row = self._next_row(remaining)
            # the first finding's knob joins the first row, whatever its own, ahead of it
            group = [k for k in remaining if row is None or k.row == row or k is lead]
            group.sort(key=lambda k: k is not lead)  # stable: the row's own order after it
            lead = None
            remaining = [k for k in remaining if k not in group]
            others = {k.row for k in remaining}
            climbed, left = self._climb_row(group, row, others)
            dependents += climbed
            remaining = left + remaining  # a row left after a rung: its knobs come back
        self._decide_weak()
        self._dependents = dependents
        for knob, outcome, values in dependents:
            self._dependent(knob, outcome, values)
        self._screen_again_where_the_row_moved()
        self._climb_from_refused_fixes()
        return self.ledger.kept

    def _assured_gain(self, screen: _Screened) -> float:
        """What a knob's best screen assures at least, the order its decision goes in: of a
        screen switched within its process, the low bound of its block pairs' 90% interval,
        or, with too few of them for one, the same bound from their spread pooled over
        every arm of its process (noise.low_bound_pct; its gain less their clear margin
        where the process holds too few pairs even for that); of a screen of one pair of
        processes, its gain less the pairs' clear margin. A precise switched
        screen goes before a process screen of the same gain (two processes decide most of
        them, six pairs or more inside the noise: on makemore's 150 s glibc malloc's pairs
        left fused AdamW, +13.2% at its switched screen, undecided), and a process screen far
        past its margin before a switched one of two block pairs: on the README's example on
        a Zen 4 EPYC the fused optimizer (+3.7% over 2 block pairs) took three processes
        before glibc malloc (+22.8%; with bf16, 1.35x by hand there) had one pair."""
        best = screen.best(self._gain)
        gain = self._gain(best)
        if not best.switched:
            return gain - self.ledger.clear_pct
        ci = stats.interval(best.block_gains)
        if ci.low_pct is not None:
            return ci.low_pct
        pooled = [run.block_gains for run in self.ledger.process_of(best)]
        low = stats.low_bound_pct(best.block_gains, pooled)
        if low is not None:
            return low
        return gain - switched_noise(best.block_gains).clear_pct

    def _weak_screen(self, screen: _Screened) -> bool:
        """Its best value read under what a change must be worth, and its block pairs say
        so: switched within a process, their 90% interval (noise.interval) under twice what
        a change must be worth. Not a screen of one pair of processes, nor of two or three
        block pairs (a short job's), nor one whose interval reaches far past it: their noise
        is larger than the gain. On the README's example bf16 read -6.4% over 3 block pairs
        where two processes of 5 read +20.3%, and, the doctor's first finding, +0.6% over 5
        whose interval reached +15.0%; waiting, it was never decided."""
        best = screen.best(self._gain)
        if not _switched(screen) or self._gain(best) >= stats.MIN_GAIN_PCT:
            return False
        high = stats.interval(best.block_gains).high_pct
        return high is not None and high < 2 * stats.MIN_GAIN_PCT

    def _decide_weak(self) -> None:
        """The knobs whose best screen read under what a change must be worth (_weak_screen),
        decided once every row's knobs were screened (and the stronger decided), on top of
        what is kept then: their decisions (two processes or more to refuse a gain whose
        interval reaches 3%) go where this machine showed less, after the rows still to
        climb, as a person fixes the big rows first."""
        weak, self._weak = self._weak, []
        weak.sort(key=lambda screen: -self._assured_gain(screen))
        for screen in weak:  # grows: a refused value's runners-up, last
            self._decide_screened(screen, weak)

    def climb_once(self) -> dict:
        """The knobs that pay once (torch.compile), last, on top of everything kept, the
        batch size included: compiled for the shapes the job will run, and its trial's
        compilation paid after every cheaper decision. Returns the configuration kept."""
        once, self._once = self._once, []
        if once:
            for knob, outcome, values in self._climb_row(once, None, set())[0]:
                self._dependent(knob, outcome, values)
        return self.ledger.kept

    def _first_finding_knob(self, knobs: list[Knob]) -> Knob | None:
        """Of these knobs, the one that answers the doctor's first finding (suspect.py's
        choice), unless decided already (kept at its screen before the noise runs)."""
        chosen = suspect_knob(self.ctx, [k.name for k in knobs])
        if chosen is None or self.ledger.outcome(chosen.name) is not None:
            return None
        return next(k for k in knobs if k.name == chosen.name)

    def _next_row(self, knobs: list[Knob]) -> str | None:
        """Of the rows these knobs act on, the biggest in the ladder's top step; None (all
        the knobs at once) when the step's rows are unknown."""
        rows = self._top_rows
        if rows is None:
            return None
        return max(dict.fromkeys(k.row for k in knobs), key=lambda row: rows.get(row, 0.0))

    def _climb_row(
        self, knobs: list[Knob], row: str | None, others: set[str]
    ) -> tuple[list[tuple[Knob, KnobOutcome, tuple]], list[Knob]]:
        """These knobs' values screened first (on top of what is kept), then the knobs
        decided in the order of what their screens assure (_assured_gain), each on top of
        the knobs kept before it. Decided in the registry's order, a knob with no effect
        took 24 of gpt.py's 38 trials under --time-budget 300 before fused AdamW was
        screened.

        After each rung the step's rows are read again, as a person profiles again after a
        fix: when another row (of ``others``, the rows still to climb) is now the biggest,
        this row is left there, its knobs not yet screened or decided returned to be climbed
        after it. Returns the knobs that build on others, for later, and those returned."""
        screens: list[_Screened] = []
        dependents: list[tuple[Knob, KnobOutcome, tuple]] = []
        base = self.ledger.kept
        self._screen_row_together(knobs, base)
        knobs = self._biggest_shared_first(knobs)
        for i, knob in enumerate(knobs):
            if (deferred := self._deferred.pop(knob.name, None)) is not None:
                screens.append(deferred)  # screened before its row was left: decided now
                continue
            if (first := self.ledger.outcome(knob.name)) is not None:
                # kept before the noise runs (suspect.py): the base of every rung, and what
                # the knobs that build on it are screened on
                self._winners[knob.name] = _Candidate(
                    knob, {knob.name: first.value}, first.value, []
                )
                continue
            outcome = KnobOutcome(
                knob.name, KnobStatus.NOT_TRIED, "", changes_numerics=knob.changes_numerics,
                answers=list(knob.answers),
                reported=bool(set(knob.answers) & self.ctx.finding_codes),
            )  # fmt: skip
            self.ledger.knobs.append(outcome)
            if knob.opt_in == "--allow-batch-size":
                if not self.ctx.allow_batch_size:
                    outcome.reason = "changes training: tried only with --allow-batch-size"
                continue  # tried on top of the combination (batch_finder.py, processes.py)
            plan = knob.plan(self.ctx)
            if not plan.applicable:
                outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, plan.reason
                continue
            if knob.depends_on:
                dependents.append((knob, outcome, plan.values))
                continue
            screen = self._screen_values(knob, plan.values, base, outcome)
            if screen is None:
                continue
            if self._clear_at_its_screen(screen):
                # decided now, while the other knobs wait to be screened. One more clear pair
                # keeps it, and a budget that ends during the screens keeps it too: on the
                # H100 a 240 s tune screened loader workers at +135% and device transforms at
                # +189% (clear margin 35%) and ended with the script as it is, both "to be
                # confirmed"
                if self._decide_screened(screen, screens) and self._row_moved(row, others):
                    return dependents, self._leave_row(knobs[i + 1 :], screens)
            else:
                screens.append(screen)
        # the decisions in the order of what their screens assure (_assured_gain), a second
        # look (_second_look: a knob decided at its screen, refused) after the others
        screens.sort(key=lambda screen: (screen.second_look, -self._assured_gain(screen)))
        if others:  # rows still to climb: a knob that read under a change's worth waits
            weak = [s for s in screens if self._weak_screen(s)]
            self._weak += weak
            screens = [s for s in screens if s not in weak]
        for i, screen in enumerate(screens):  # grows: a refused value's runners-up, last
            if self._decide_screened(screen, screens) and self._row_moved(row, others):
                return dependents, self._leave_row([], screens[i + 1 :])
        return dependents, []

    def _row_moved(self, row: str | None, others: set[str]) -> bool:
        """After a rung: another row still to climb is now the biggest of the step. On
        moving_bottleneck in a slow phase the compute step outran the loader, fused AdamW was
        kept first, and the loader then set the pace; bf16's screen and pairs and glibc
        malloc's pairs (50 s) came before the loader's workers, and the short job's time
        ended during their screens."""
        now = biggest_row(self._top_rows)
        return row is not None and now is not None and now != row and now in others

    def _leave_row(self, unscreened: list[Knob], undecided: list[_Screened]) -> list[Knob]:
        """This row's knobs not yet screened, and those screened and not yet decided (their
        screens kept for when the ladder comes back: decided on top of what is kept then),
        returned to be climbed after the row that is now the biggest."""
        for screen in undecided:
            self._deferred[screen.knob.name] = screen
        return list(dict.fromkeys([*(screen.knob for screen in undecided), *unscreened]))

    def _clear_at_its_screen(self, screen: _Screened) -> bool:
        """Decided at once: a screen past the clear margin whose decision is made within
        processes, or, in pairs of processes, by far (twice the margin). One pair of
        processes past the margin is often luck: on the quick-start glibc malloc screened
        +11.8% (margin 8%), was decided at once, and its pairs (-4.0, -1.5, +7.1, ...) took
        the 150 s while the fused optimizer waited unscreened."""
        gain, margin = screen.best_gain(self._gain), self.ledger.clear_pct
        return gain > margin and (_switched(screen) or gain > CLEAR_BY_FAR * margin)

    def _rows_under(self, config: dict) -> StepRows | None:
        """The step's rows under a screen's reference: the baseline's, or the top rung's."""
        return self._baseline_rows if not config else self._top_rows

    def _screen_again_where_the_row_moved(self) -> None:
        """Each knob that read nothing while another row dominated, screened again on top of
        the kept configuration once its own row is the biggest of the top rung's step, and
        decided there; each rung it keeps re-reads the rows."""
        again: set[str] = set()
        while True:
            now = biggest_row(self._top_rows)
            waiting = [
                judged for name, judged in self._judged.items()
                if name not in again and self._hidden(judged, now)
            ]  # fmt: skip
            if not waiting:
                return
            judged = waiting[0]
            again.add(judged.knob.name)
            self._screen_again(judged)

    def _hidden(self, judged: _Judged, now: str | None) -> bool:
        """Refused, not clearly slower, and screened where it could not show: another row
        than its own dominated then and its own does now, or its own row has grown since
        (the most it could gain at least ROOM_GROWTH times what it was, and beyond the clear
        margin). With one worker making batches at the pace of the compute step (rows of
        1.7 and 2.1 ms in a 29 ms step: room for +7.8%), the fused optimizer reads nothing;
        once two workers give the compute row 17 ms of the step (room for +134%), the same
        knob is worth +25%."""
        if not self._refused_not_slower(judged) or now is None or judged.rows is None:
            return False
        if judged.decided_on == self.ledger.kept:
            # decided on top of what is kept now: screening it there again repeats that
            # decision (loader_just_behind: bf16's 5 processes on top of fused AdamW, then
            # 2 more "again", 56 block pairs for -0.4%, while the 176 s ran out)
            return False
        row = judged.knob.row
        moved = row == now and biggest_row(judged.rows) != now
        then, now_pct = judged.rows.room_pct(row), self._top_rows.room_pct(row)
        # a row that was the whole step then had all the room there is: it cannot grow (gpt.py
        # has no loader: its compute row is every step, and each refused knob was screened
        # again for nothing, 47 s of a 255 s tune)
        grown = math.isfinite(then) and now_pct >= max(ROOM_GROWTH * then, self.ledger.clear_pct)
        return moved or grown

    def _screen_again(self, judged: _Judged) -> None:
        knob, outcome = judged.knob, self.ledger.outcome(judged.knob.name)
        then, now = biggest_row(judged.rows), biggest_row(self._top_rows)
        behind = f"the {then} row" if then != knob.row else f"a small {knob.row} row"
        grown = "the biggest" if now == knob.row and then != now else "grown"
        earlier = (f"behind {behind} ({in_words(judged.rows)}), "
                   f"screened again once the {knob.row} row was {grown} "
                   f"({in_words(self._top_rows)}): {outcome.reason}")  # fmt: skip
        outcome.status, outcome.reason, outcome.gain_pct = KnobStatus.NOT_TRIED, "", None
        screen = self._screen_values(knob, judged.values, self.ledger.kept, outcome)
        if screen is None:
            outcome.reason = f"{outcome.reason}; before it, {earlier}"
            return
        screen.earlier = earlier
        candidate = self._decide(screen)
        if candidate is not None:
            self._winners[knob.name] = candidate
            self._add_rung(candidate)

    def _climb_from_refused_fixes(self) -> None:
        """A fix of the biggest row refused for its own gain, whose runs show that row gone
        (rows.left_the_row), is climbed from as a person climbs from it: the knobs that
        read nothing behind that row (_hidden_behind) are screened on top of it, and the
        best of them decided there; kept, the fix is a rung and that knob the next. On
        moving_bottleneck on a 2-core EPYC two loader workers gained +2.0% over 22 block
        pairs (1.06x by hand) and were refused, while the fused optimizer, -3.0% behind the
        loader, is 1.4x on top of them (workers and fused 1.49x by hand): the ladder kept
        nothing. The fix's own gain is not confirmed, so the pair is kept only when the
        knob's confirmed gain on top of it leaves the two together worth a change (the
        final check then judges the whole ladder against the script, in pairs)."""
        for name, judged in list(self._judged.items()):
            outcome = self.ledger.outcome(name)
            if name in self.ledger.kept or outcome is None or outcome.status != KnobStatus.REJECTED:
                continue
            moved = self._fix_that_moved_its_row(judged)
            if moved is None:
                continue
            hidden = [j for j in self._judged.values() if self._hidden_behind(j, judged, moved[2])]
            if hidden and self._climb_from(judged, moved, hidden):
                return  # the rows have moved: one fix climbed from a tune

    def _refused_not_slower(self, judged: _Judged) -> bool:
        """Refused, and not clearly slower by its best evidence: the best of its screen and
        its decision (more processes than the screen's one), so it may have done something.
        loader_just_behind at 02248a3: two workers screened at -7.9% over 4 block pairs in
        one process, past a 6% clear margin, then read -4.4% over 9 in two; by the screen
        alone they were "slower" and never screened again on top of the fused optimizer,
        where the data row had grown from 11% to 39% of the step (by hand +7-13%)."""
        outcome = self.ledger.outcome(judged.knob.name)
        if outcome is None or outcome.status != KnobStatus.REJECTED:
            return False
        decided = outcome.gain_pct if outcome.gain_pct is not None else -math.inf
        return max(judged.best_gain, decided) > -self.ledger.clear_pct

    def _fix_that_moved_its_row(
        self, judged: _Judged
    ) -> tuple[object, list[TrialResult], StepRows, float] | None:
        """Of a refused knob's values, the one whose own runs (its screen and its pairs)
        show its row, the biggest under their reference, no longer the biggest, and that
        read the best gain among such: (the value, its runs, the rows under them, its
        gain); None when no value moved it, or when the best is slower than the new
        biggest row's room could make up. Slower is no bar by itself: two loader workers
        read -7.1% beside none on moving_bottleneck's 2 cores (1.06x by hand) with the
        data row gone under them, and 1.49x with the fused optimizer."""
        row = judged.knob.row
        if judged.rows is None or biggest_row(judged.rows) != row:
            return None
        moved = []
        for value in judged.values:
            config = {**judged.base, judged.knob.name: value}
            runs = [t for t in self.ledger.trials if t.ok and t.config == config]
            rows = step_rows(runs)
            gain = self._value_gain(judged.knob.name, value, runs)
            if rows is not None and left_the_row(row, judged.rows, rows) and gain is not None:
                moved.append((value, runs, rows, gain))
        best = max(moved, key=lambda m: m[3], default=None)
        if best is None:
            return None
        # what the knobs of the row now the biggest could give back at most: a fix slower
        # by more leaves the two together under a change's worth whatever they gain
        room = best[2].room_pct(biggest_row(best[2]))
        return best if 100 + best[3] > (100 + stats.MIN_GAIN_PCT) / (1 + room / 100) else None

    def _value_gain(self, name: str, value: object, runs: list[TrialResult]) -> float | None:
        """A refused value's gain: its decision's, or its screens' mean where it had none."""
        outcome = self.ledger.outcome(name)
        if outcome is not None and outcome.value == value and outcome.gain_pct is not None:
            return outcome.gain_pct
        gains = [self._gain(r) for r in runs if id(r) in self.ledger.gains]
        return statistics.fmean(gains) if gains else None

    def _hidden_behind(self, judged: _Judged, fix: _Judged, rows: StepRows) -> bool:
        """A knob refused, not clearly slower, screened where the fix's row was the biggest,
        whose own row is the biggest under the fix."""
        if judged is fix or judged.knob.name in self.ledger.kept:
            return False
        if not self._refused_not_slower(judged) or judged.rows is None:
            return False
        row = judged.knob.row
        return biggest_row(judged.rows) == fix.knob.row != row and biggest_row(rows) == row

    def _climb_from(
        self, fix: _Judged, moved: tuple[object, list[TrialResult], StepRows, float],
        hidden: list[_Judged],
    ) -> bool:  # fmt: skip
        """The hidden knobs screened on top of the fix, and decided there in the order of
        what their screens assure: the first kept makes the fix a rung and itself the next
        (True)."""
        knob, outcome = fix.knob, self.ledger.outcome(fix.knob.name)
        value, runs, rows, fix_gain = moved
        base = {**self.ledger.kept, knob.name: value}
        refused = outcome.reason
        screens: list[_Screened] = []
        # the one that showed most first, as a person climbs: on moving_bottleneck the
        # first finding's bf16 (+0.2%, judged first) went before fused AdamW (+8.3% at its
        # screen), and the default 175 s ended before fused's screen on top of two workers
        for judged in sorted(hidden, key=lambda judged: -judged.best_gain):
            hid = self.ledger.outcome(judged.knob.name)
            earlier = (f"behind the {fix.knob.row} row ({in_words(judged.rows)}), screened "
                       f"again on top of {knob.describe(value)}, under which the "
                       f"{judged.knob.row} row was the biggest ({in_words(rows)}): "
                       f"{hid.reason}")  # fmt: skip
            hid.status, hid.reason, hid.gain_pct = KnobStatus.NOT_TRIED, "", None
            screen = self._screen_values(judged.knob, judged.values, base, hid)
            self._judged[judged.knob.name].rows = rows  # screened under the fix's rows
            if screen is None:
                hid.reason = f"{hid.reason}; before it, {earlier}"
                continue
            screen.earlier = earlier
            screens.append(screen)
        screens.sort(key=lambda screen: -self._assured_gain(screen))
        for screen in screens:
            candidate = self._decide(screen)
            if candidate is None:
                continue
            together = (1 + fix_gain / 100) * (1 + (screen.outcome.gain_pct or 0.0) / 100)
            if 100 * (together - 1) < stats.MIN_GAIN_PCT:
                screen.outcome.status = KnobStatus.REJECTED
                screen.outcome.reason = (
                    f"faster on top of {knob.describe(value)}, but the two together are not "
                    f"worth a change ({fix_gain:+.1f}% and {screen.outcome.reason})"
                )
                continue
            fix_rung = _Candidate(knob, base, value, runs)
            if runs and all(r.switched for r in runs):
                fix_rung.switched_gain_pct = stats.interval(
                    [g for r in runs for g in r.block_gains]
                ).estimate_pct
            self._winners[knob.name] = fix_rung
            self._add_rung(fix_rung)
            outcome.status, outcome.value = KnobStatus.KEPT, value
            outcome.reason = (
                f"kept as the rung {candidate.knob.describe(candidate.value)} climbed from: "
                f"it left the {knob.row} row smaller than the {candidate.knob.row} row "
                f"({in_words(rows)}), and alone {refused}"
            )
            self._winners[candidate.knob.name] = candidate
            self._add_rung(candidate)
            for other in screens:  # the others, on top of both
                if other is not screen and self.ledger.outcome(other.knob.name).status \
                        == KnobStatus.NOT_TRIED:  # fmt: skip
                    self._decide_screened(other, [])
            self._dependents_of(knob.name)
            return True
        return False

    def _dependents_of(self, name: str) -> None:
        """The knobs that build on ``name``, refused as not applicable while it was not
        kept, tried on top of it now."""
        for knob, outcome, values in self._dependents:
            if name in knob.depends_on and outcome.status == KnobStatus.NOT_APPLICABLE:
                outcome.status, outcome.reason = KnobStatus.NOT_TRIED, ""
                self._dependent(knob, outcome, values)

    def _dependent(self, knob: Knob, outcome: KnobOutcome, values: tuple) -> None:
        """A knob that builds on others: screened and decided on top of their kept rungs."""
        base_config: dict = {}
        for dependency in knob.depends_on:
            if dependency not in self._winners:
                outcome.status = KnobStatus.NOT_APPLICABLE
                outcome.reason = f"builds on {dependency}, which was not kept"
                return
            base_config.update(self._winners[dependency].config)
        if (idle := knob.on_top_of(base_config)) is not None:
            outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, idle
            return
        screen = self._screen_values(knob, values, base_config, outcome)
        candidate = self._decide(screen) if screen is not None else None
        if candidate is not None:
            self._winners[knob.name] = candidate
            self._add_rung(candidate)

    def _decide_screened(self, screen: _Screened, screens: list[_Screened]) -> bool:
        """A screened knob decided: kept (the ladder's next rung: True), or its runners-up
        queued at the end of ``screens``."""
        candidate = self._decide(screen)
        if candidate is not None:
            self._winners[screen.knob.name] = candidate
            self._add_rung(candidate)
            return True
        if (runner_up := self._runners_up(screen)) is not None:
            screens.append(runner_up)
        elif (again := self._second_look(screen)) is not None:
            screens.append(again)
        return False

    def _second_look(self, screen: _Screened) -> _Screened | None:
        """A knob refused by its pairs on top of what was kept after its screen, where the
        screen assures more (its own 90% low bound, a change's worth at least) than the
        pairs allow (their 90% high bound), and the step's rows do not explain the drop
        (its row still has room for what the screen assured): the two readings cannot both
        be the knob's alone. On the README's example bf16 screened +24.1% over 5 block pairs
        on the baseline, then read -2.4% over 10 in 2 processes on top of glibc malloc
        (interval -4.9% to -0.1%), where by hand, in the same hour, it gave 1.13-1.25x on
        top of it: with glibc's thresholds raised some processes draw a state where bf16
        gains nothing, and both had. Decided once more, afresh (its refusing pairs not
        pooled), after the other decisions of its row: later, in other processes, as a
        person measures a surprise again. A knob that truly does nothing on top of the
        other costs one decision more."""
        if not screen.refused_by_pairs or screen.second_look or screen.refused_high_pct is None:
            return None
        if screen.refused_on == screen.base_config:  # the screen's pair was the decision's
            return None
        assured = self._assured_gain(screen)
        if assured < stats.MIN_GAIN_PCT or assured <= screen.refused_high_pct:
            return None
        rows = self._top_rows
        if rows is not None and rows.room_pct(screen.knob.row) < assured:
            return None  # its row shrank under what it gained: the ladder's rows explain it
        outcome = screen.outcome
        earlier = (f"{screen.knob.describe(outcome.value)} was screened at {assured:+.1f}% at "
                   f"least, then {outcome.reason}; decided again later")  # fmt: skip
        outcome.status, outcome.reason = KnobStatus.NOT_TRIED, ""
        return _Screened(
            screen.knob, outcome, screen.base_config, screen.promising, earlier=earlier,
            second_look=True,
        )  # fmt: skip

    def _add_rung(self, candidate: _Candidate) -> None:
        """A kept knob is the ladder's next rung: its runs were decided on top of the one
        before."""
        name = f"+ {candidate.knob.describe(candidate.value)}"
        rung = self.ledger.rung(name, candidate.config, candidate.runs)
        rung.switched_gain_pct = candidate.switched_gain_pct
        self.ledger.ladder.append(rung)
        self._top_rows = step_rows(candidate.runs) or self._top_rows

    def _screen_values(
        self, knob: Knob, values: tuple, base_config: dict, outcome: KnobOutcome
    ) -> _Screened | None:
        """Each value once against the reference (with a second look at a slow one): the
        values worth deciding, or None when the knob's outcome is settled here (every value
        slower, or none could be applied)."""
        promising: list[TrialResult] = []
        screened: list[TrialResult] = []
        reasons = []
        not_applied = []
        together = self._row_screens.pop(knob.name, None) if base_config == self._row_base else None
        together = together or self._screen_together(knob, values, base_config)
        for i, value in enumerate(values):
            config = {**base_config, knob.name: value}
            result, why = (
                together[i] if together else self._first_finding_screen(config)
            ) or compare.screen(self.ledger, base_config, config, knob.describe(value))
            if knob.name in result.not_held:  # measured something else: no judgement
                not_applied.append(f"{knob.describe(value)}: {result.not_held[knob.name]}")
                self.ledger.verdict(result, f"could not apply: {result.not_held[knob.name]}")
                continue
            screened.append(result)
            if why:
                reasons.append(f"{knob.describe(value)}: {why}")
            else:
                promising.append(result)
        if screened:
            rows = self._rows_under(base_config)
            gains = [self._gain(r) for r in screened if id(r) in self.ledger.gains]
            best = max(gains, default=-math.inf)  # a failed screen read nothing to redo
            self._judged[knob.name] = _Judged(knob, values, rows, best, dict(base_config))
        if not promising and not_applied and not screened:
            outcome.status = KnobStatus.COULD_NOT_APPLY
            outcome.reason = "could not apply: " + "; ".join(not_applied)
            return None
        if not promising:
            outcome.status = KnobStatus.REJECTED
            no_gain = Judgement(Decision.NOT_FASTER, (), "")
            cost = payback.one_time_cost(self.ledger, outcome, screened, [], no_gain)
            outcome.reason = "; ".join(reasons) + cost
            return None
        return _Screened(knob, outcome, base_config, promising)

    def _screen_row_together(self, knobs: list[Knob], base: dict) -> None:
        """The row's knobs that can be switched within a process, every value of each an
        arm of one process on top of ``base`` (compare.screen_arms), before the row's
        screens begin; each knob's screen then reads its arms (``_row_screens``). On a GPU
        a row's bf16, channels_last, cudnn.benchmark and fused optimizer were four
        processes, each paying the CUDA set-up before its first step. Not the knobs decided
        already, opted in, built on others, paying once (their trial pays compilation) or
        screened by the first finding; a knob whose arms would make the rounds too long for
        a script whose end is near goes alone (the quick-start's 32 steps hold two rounds of
        the fused optimizer's two values and bf16, not channels_last too)."""
        self._row_base, self._row_screens = base, {}
        pairs: list[tuple[str, object]] = []
        names: list[str] = []
        settle = 1
        for knob in knobs:
            if (
                knob.name in self._deferred
                or self.ledger.outcome(knob.name) is not None
                or knob.opt_in or knob.depends_on or knob.pays_once
            ):  # fmt: skip
                continue
            plan = knob.plan(self.ctx)
            if not plan.applicable or not self._can_share(knob, plan.values, base):
                continue  # screened alone
            more = [(knob.name, value) for value in plan.values]
            wants = max(settle, knob.settle_estimate(plan.values, self.ctx))
            if not compare.can_share_a_process(self.ledger, base, pairs + more, wants):
                continue  # the script is too short for its arms too: screened alone
            pairs, settle = pairs + more, wants
            names += [knob.describe(value) for value in plan.values]
        if len({name for name, _ in pairs}) < 2:
            return  # one knob's values: its own screen puts them in one process
        screened = compare.screen_arms(self.ledger, base, pairs, names)
        for (name, _), screen in zip(pairs, screened or [], strict=False):
            self._row_screens.setdefault(name, []).append(screen)

    def _biggest_shared_first(self, knobs: list[Knob]) -> list[Knob]:
        """The knobs the row's shared process screened, in the order of their best screened
        gain, in the places they held; the others where they were. A screen past the clear
        margin is decided at once, before the next knob's screen: one at a time, that lets
        the decisions begin while the rest wait to be screened; read all at once, it would
        decide the registry's first before the biggest (dcgan on an AMX CPU: fused Adam at
        +7% took two processes while bf16 at +86% waited behind it)."""
        shared = [k for k in knobs if k.name in self._row_screens]

        def best(knob: Knob) -> float:
            screens = self._row_screens[knob.name]
            gains = [self._gain(r) for r, _ in screens if id(r) in self.ledger.gains]
            return max(gains, default=-math.inf)

        by_gain = iter(sorted(shared, key=best, reverse=True))
        return [next(by_gain) if k.name in self._row_screens else k for k in knobs]

    def _can_share(self, knob: Knob, values: tuple, base_config: dict) -> bool:
        """Its values can be arms of a process on top of ``base_config``: switched there
        together, and not screened already by the first finding."""
        configs = [{**base_config, knob.name: value} for value in values]
        if any(r.config in configs for r in self.ledger.first_finding_screens):
            return False
        return compare.switches_together(self.ledger, base_config, knob.name, list(values))

    def _screen_together(
        self, knob: Knob, values: tuple, base_config: dict
    ) -> list[tuple[TrialResult, str | None]] | None:
        """A knob's values screened in one process, an arm each (compare.screen_arms),
        unless the first finding's screens on the script as it is read them already."""
        if len(values) < 2 or not self._can_share(knob, values, base_config):
            return None
        pairs = [(knob.name, value) for value in values]
        settle = knob.settle_estimate(values, self.ctx)
        if not compare.can_share_a_process(self.ledger, base_config, pairs, settle):
            return None
        names = [knob.describe(value) for value in values]
        return compare.screen_arms(self.ledger, base_config, pairs, names)

    def _first_finding_screen(self, config: dict) -> tuple[TrialResult, str | None] | None:
        """The first finding's screen of this value on the script as it is (suspect.py),
        when it did not keep the knob: the ladder's screen, not run again, its gain read
        against the noise runs (the cold run it was screened against runs slow), or, an arm
        of a switched process, against the script's own setting there. makemore's
        num_workers screens were run twice, 26 s of a 160 s tune."""
        ledger = self.ledger
        run = next((r for r in ledger.first_finding_screens if r.config == config), None)
        if run is not None and run.switched:
            # against the script's own setting in its own process: read as it was, and it
            # counts in the decision as any switched screen does
            return run, compare.switched_screen_out(run)
        references = [cost_ms(r) for r in ledger.baseline_runs if r.ok]
        if run is None or not references:
            return None
        gain = gain_pct(cost_ms(run), statistics.median(references))
        ledger.gains[id(run)] = gain
        self._reused.add(id(run))
        said = ledger.verdicts.get(ledger.index(run), "")
        ledger.verdict(run, f"{said}; the ladder's screen: {gain:+.1f}% against the noise runs")
        why = f"slower ({gain:+.1f}% at the first finding's screen)" if (
            gain < -ledger.clear_pct) else None  # fmt: skip
        return run, why

    def _decide(self, screen: _Screened) -> _Candidate | None:
        """The best of a knob's promising values (ranked when several are close), then the
        sequential paired test against its reference: kept or refused."""
        knob, outcome, base_config, promising = (
            screen.knob, screen.outcome, screen.base_config, screen.promising,
        )  # fmt: skip
        too_dear = payback.not_repaid_at_screen(self.ledger, outcome, promising, self._gain)
        if too_dear is not None:  # no pair could change it: they are left to other knobs
            outcome.status, outcome.reason = KnobStatus.REJECTED, too_dear
            return None
        best = self._rank(knob, promising, base_config)
        value = best.config[knob.name]
        outcome.value = value
        # decided on top of every knob kept so far (the screens ran on the baseline)
        reference = {**self.ledger.kept, **base_config}
        config = {**reference, **best.config}
        if (judged := self._judged.get(knob.name)) is not None:
            judged.decided_on = reference
        # The screening pair counts as evidence only when it did not also select the value
        # (the best of several noisy screens is biased toward a lucky run) and its
        # reference is this decision's.
        # (nor a first finding's screen, read against other runs than its reference)
        fair = id(best) not in self._reused
        counted = best if len(promising) == 1 and reference == base_config and fair else None
        prior = self.ledger.prior_gains.get(id(best)) if counted is not None else None
        pairs = compare.paired(
            self.ledger, reference, config, knob.describe(value), counted, prior=prior,
            share=DECISION_SHARE, afresh=screen.second_look,
        )  # fmt: skip
        judgement, runs, why = pairs.judgement, pairs.runs, pairs.failed
        if why is None and judgement.gains_pct:
            outcome.gain_pct = judgement.mean_gain_pct
        if why is None and judgement.decision != Decision.FASTER:
            why = judgement.reason
            screen.refused_by_pairs = True
            screen.refused_high_pct = stats.interval(judgement.gains_pct).high_pct
            screen.refused_on = reference
        measured = [best, *runs] if reference == base_config else runs  # one configuration
        held = _held_against(knob.name, [best, *runs])
        cost = payback.one_time_cost(self.ledger, outcome, measured, pairs.references, judgement)
        cost += held
        earlier = f"; before it, {screen.earlier}" if screen.earlier else ""
        on_top = f" on top of {label(reference)}" if reference else ""
        if why is not None:
            outcome.status = KnobStatus.REJECTED
            outcome.reason = f"not confirmed{on_top}: {why}{cost}{earlier}"
            return None
        not_repaid = payback.not_repaid(outcome, self.ledger.job_length())  # faster, yet dearer
        if not_repaid is not None:
            outcome.status, outcome.reason = KnobStatus.REJECTED, f"{not_repaid}{held}{earlier}"
            return None
        outcome.status = KnobStatus.KEPT
        outcome.reason = f"{on_top.strip() or 'alone'}: {judgement.reason}{cost}{earlier}"
        switched = judgement.estimate_pct if runs and all(r.switched for r in runs) else None
        return _Candidate(knob, config, value, runs, switched)

    def _runners_up(self, screen: _Screened) -> _Screened | None:
        """A knob whose chosen value its pairs refused, with other values that screened
        faster than their reference: those get a decision of their own, after every other
        knob's. One run a value cannot always pick the right one on a shared machine:
        makemore's num_workers=2 screened -23.9% then +17.7% and took 12 pairs to refuse,
        while num_workers=0 (1.33x by hand) screened +5.4% in a slow phase and was never
        paired."""
        if not screen.refused_by_pairs:
            return None
        knob, tried = screen.knob, screen.outcome.value
        rest = [
            r for r in screen.promising
            if r.config[knob.name] != tried and self._gain(r) > 0
        ]  # fmt: skip
        if not rest:
            return None
        earlier = f"{knob.describe(tried)}: {screen.outcome.reason}"
        # not decided yet: a limit that stops the tune before the runner-up's decision
        # leaves the knob undecided, not refused
        screen.outcome.status, screen.outcome.reason = KnobStatus.NOT_TRIED, ""
        return _Screened(knob, screen.outcome, screen.base_config, rest, earlier=earlier)

    def _rank(self, knob: Knob, promising: list[TrialResult], base_config: dict) -> TrialResult:
        """The value to confirm, of several that screened well. One run each cannot rank
        values whose screens lie within the clear margin of the best: on the 2-core VM,
        makemore's num_workers=0 (1.62x faster over whole runs) screened at 15.3 ms/step
        beside workers=2's 13.5 and was never paired. Those values run once more with one
        fresh reference run, all in random order (a block: one phase of the machine for
        all of them), and the best mean gain over both rounds is confirmed."""
        ledger = self.ledger
        first = {id(r): self._gain(r) for r in promising}
        if all(r.switched for r in promising):  # each measured in its own process: precise
            return max(promising, key=lambda r: first[id(r)])
        top = max(first.values())
        close = [r for r in promising if top - first[id(r)] < ledger.clear_pct]
        # the block and the fewest pairs that can confirm a value (stats.CLEAR_PAIRS) must fit
        # in the trials left: a --budget that the ranking would use up leaves the knob
        # undecided, worse than confirming the best screen (two ranks' bucket sizes, +282% and
        # +279%: the block took 3 of --budget 12's last 6 trials)
        left = ledger.trials_left()
        if len(close) < 2 or left < len(close) + 1 + 2 * stats.CLEAR_PAIRS:
            return max(promising, key=lambda r: first[id(r)])
        block: list[TrialResult | None] = [None, *close]
        ledger.order.shuffle(block)
        ref, again = None, {}
        for item in block:
            if item is None:
                ref = ledger.trial(base_config, f"reference {label(base_config)} (ranking)")
            else:
                name = f"{knob.describe(item.config[knob.name])} (ranking)"
                again[id(item)] = ledger.trial(item.config, name)
        if not ref.ok:
            ledger.verdict(ref, f"reference failed: {ref.outcome}; ranked on the first runs")
            for run in again.values():
                ledger.verdict(run, "ranking: its reference failed")
            return max(close, key=lambda r: first[id(r)])
        ledger.verdict(ref, f"reference: ranking the values of {knob.name}")
        gains = {}
        for r in close:
            run, why = again[id(r)], ledger.reject_reason(again[id(r)])
            if why is not None:
                ledger.verdict(run, why)  # confirmed or refused by its own pairs later
                gains[id(r)] = first[id(r)]
                continue
            second = gain_pct(cost_ms(run), cost_ms(ref))
            gains[id(r)] = (first[id(r)] + second) / 2
            ledger.verdict(run, f"{second:+.1f}%: ranking (first run {first[id(r)]:+.1f}%, "
                                f"mean {gains[id(r)]:+.1f}%)")  # fmt: skip
        return max(close, key=lambda r: gains[id(r)])
