"""The search: which knobs make this script faster, alone and together. This module holds
the order of the phases and the one way a search stops; each phase is a module of its own,
and all of them read and add to one ledger of evidence (ledger.py):

1. The baseline (baseline.py): one run that warms the caches and gives the reference losses
   (loss_check.py); the doctor's first finding's knob screened against it, and kept at once
   when it wins by far and its one pair agrees (suspect.py), before any other run; then
   three back to back: this machine's run-to-run noise for this script (noise.py). With
   --fidelity-limit they are runs of the script as it is, the first two beside a plain run
   each, more while the check needs them (fidelity.py), and a kept first finding's rung is
   its screen and its pair; without it, they are runs of the kept knob, if any. A fidelity
   check that stops the tune voids a knob kept before it: it was judged on another workload
   than the script's.
2. The ladder (ladder.py): a row of the step at a time (rows.py: the wait for the loader,
   the rest), the biggest row first, each applicable knob's values screened on top of what
   is kept, then the knobs decided by the sequential paired test (compare.py), in the order
   of their best screened gain, each on top of every knob kept before it: each kept knob is
   a rung. The first finding's knob, when not kept already, joins the first row whatever
   its own, and is screened first. A knob that read nothing while another row dominated is
   screened again once its own row is the biggest. A knob
   whose one-time cost its saving does not repay within the job is refused (payback.py).
3. With --allow-batch-size, batch sizes on top of the combination (batch_finder.py), the
   first from the doctor's memory estimate; then the knobs that pay once (torch.compile:
   Ladder.climb_once), compiled for that batch; then, for a CPU job of N local ranks,
   other process counts (processes.py).
4. The final check (final.py): the ladder's top against the script as it is, in pairs; not
   faster, down the ladder. tune never returns a slower configuration.

A budget in trials and seconds bounds it (the time budget counts from the command's start
and a trial that would not end within it is not started); Ctrl-C stops it. Every stop (a
limit, Ctrl-C during a trial or between trials, the fidelity check) goes through
`Tuner._stopped`: what was measured is kept, the knobs that ran but were not decided are
"undecided", those never reached "not tried", and the best configuration confirmed so far
(the ladder's top) is the result. While the search runs, the final check's fewest runs are
held back from the budget (`Ledger.final_hold`): a limit ends the search, and the ladder's
top still has its final check. Every figure the user sees comes from
`TuneResult.figures`, computed once at the end (figures.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from torchpace import knobs as registry
from torchpace.capture.file_restore import FilesTouched
from torchpace.capture.signals import interrupt_name
from torchpace.knobs.base import Knob, TuneContext
from torchpace.tune import fidelity as fidelity_check
from torchpace.tune.baseline import cold_run, noise_runs
from torchpace.tune.batch_finder import find_batch_size
from torchpace.tune.figures import settle_figures
from torchpace.tune.final import final_check, final_needs
from torchpace.tune.ladder import Ladder, ordered_knobs
from torchpace.tune.ledger import Budget, Ledger, Progress, Stop
from torchpace.tune.loss_check import DEFAULT_TOLERANCE
from torchpace.tune.processes import processes_per_node
from torchpace.tune.result import KnobOutcome, KnobStatus, TuneResult
from torchpace.tune.suspect import screen_suspect
from torchpace.tune.trial import TrialSettings

__all__ = ["Budget", "Tuner"]


# the stops after which the ladder's top is still checked against the script as it is (the
# search held the check's trials and time back from them): a limit, not the user nor a fault
LIMITS = ("budget", "time-budget")


class Tuner:
    """One search. Its public surface: ``run()`` (the result, whatever stopped it),
    ``time_short_for(runs, config)`` (whether what the time budget leaves holds that many
    more runs) and ``fidelity_failure()`` (the fidelity check's words when it stopped the
    tune)."""

    def __init__(
        self,
        settings: TrialSettings,
        ctx: TuneContext,
        run_dir: Path,
        progress: Progress,
        budget: Budget | None = None,
        loss_tolerance: float = DEFAULT_TOLERANCE,
        only: list[str] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        started: float | None = None,
        calibrate: bool = False,
        job_steps: int | None = None,
        fidelity_limit: float | None = None,
        note: Callable[[str], None] | None = None,
    ):
        """``clock``/``started``: the time budget counts from the command's start (the
        doctor's run included). ``calibrate``: choose the timed steps from the first baseline
        run (--steps not given). ``job_steps`` (--job-steps): the real job's length; a knob
        whose one-time cost its saving does not repay within them is refused.
        ``fidelity_limit`` (--fidelity-limit; None: no check): the baseline's repeats
        alternate with plain runs of the script (tune/fidelity.py), and a trial that times
        another workload stops the tune. ``note``: lines for the progress display (the plain
        runs, the fidelity's verdict)."""
        started = clock() if started is None else started
        self.ledger = Ledger(
            settings,
            run_dir,
            progress,
            budget or Budget(),
            clock,
            started,
            loss_tolerance,
            job_steps,
        )
        self.ledger.final_needs = final_needs  # what the search holds back for the check
        if ctx is not None:  # (a check of the run alone is given none)
            # the loaders that feed the timed steps: an evaluation loader's workers run
            # between them, never beside a step (all of them where none was seen timed)
            loaders = [lf for lf in ctx.facts.loaders if lf.batches_timed] or ctx.facts.loaders
            self.ledger.script_workers = max((lf.num_workers for lf in loaders), default=0)
        self._ctx = ctx
        self._only = only
        self._calibrate = calibrate
        self._fidelity = None
        if fidelity_limit:
            self._fidelity = fidelity_check.Fidelity(limit_pct=fidelity_limit)
        self._note = note or (lambda line: None)
        self._result = TuneResult()

    # --- the whole search ------------------------------------------------------------
    def run(self, files_before: FilesTouched | None = None) -> TuneResult:
        """The phases in order; any stop (a limit, Ctrl-C, the fidelity check) ends them
        through the one stop path. ``files_before``: what the doctor's run touched (it goes
        first in the result's files)."""
        result, ledger = self._result, self.ledger
        if files_before is not None:
            ledger.files.merge(files_before)
        try:
            given = cold_run(ledger, self._calibrate, self._note)
            # the first finding first, fidelity check or not: its repeats stay the script as
            # it is (baseline.noise_runs)
            kept = screen_suspect(ledger, self._ctx, self._only)
            noise_runs(ledger, given, self._fidelity, self._note, kept)
            ladder = Ladder(ledger, self._ctx)
            combined = ladder.climb(ordered_knobs(self._ctx, self._only))
            # the batch before torch.compile: compiled for the batch the job will run
            combined, result.batch_check = find_batch_size(ledger, self._ctx, combined)
            combined = ladder.climb_once()
            combined = processes_per_node(ledger, self._ctx, combined)
        except Stop as stop:
            self._stopped(stop.why)
            if stop.why not in LIMITS or len(ledger.ladder) < 2:
                return self._settle()
            combined = dict(ledger.ladder[-1].config)  # a limit: the ladder's top is checked
        except KeyboardInterrupt:  # between trials: what was measured stays
            self._stopped("interrupted")
            return self._settle()
        ledger.holding_for_final = False  # what the search held back is the check's now
        try:
            final = final_check(ledger, combined)
            result.best, result.final_speedup = final.best, final.speedup
            result.final_gains_pct, result.final_switched_runs = (
                final.gains_pct,
                final.switched_runs,
            )
            if final.failed:
                result.stopped = "final-check-failed"
        except Stop as stop:
            self._stopped(stop.why)
        except KeyboardInterrupt:
            self._stopped("interrupted")
        return self._settle()

    def _stopped(self, why: str) -> None:
        """The one stop path: the limit in the user's words, the knobs the stop left
        undecided or never reached closed, and the ladder's top as the result."""
        result = self._result
        result.stopped = why
        result.stopped_by = self._limit(why)
        if why == "fidelity":  # it stops before the ladder: no knob to close
            self._void_kept_before_fidelity()
        else:
            self._close_undecided(why)
            self._close_untried(why)
        # the last rung of the ladder: every knob kept so far, each decided on top of the
        # ones before it
        if len(self.ledger.ladder) > 1:
            result.best = dict(self.ledger.ladder[-1].config)

    def _settle(self) -> TuneResult:
        """The result from the ledger's evidence, with every figure computed once."""
        result, ledger = self._result, self.ledger
        result.noise = ledger.noise
        result.trials, result.verdicts = ledger.trials, ledger.verdicts
        result.knobs, result.ladder = ledger.knobs, ledger.ladder
        result.steps = ledger.settings.steps
        result.files = ledger.files
        if self._fidelity is not None:  # filled in pair by pair: a stop keeps it
            result.fidelity = self._fidelity.to_dict()
        settle_figures(result, ledger)
        result.wall_s = round(ledger.elapsed_s(), 1)
        return result

    # --- the public surface beside run() --------------------------------------------------
    def time_short_for(self, runs: int, config: dict) -> str | None:
        """Why what the time budget leaves would not hold ``runs`` more runs of ``config``
        (their expected time from this tune's trials), in words; None when it would, or
        without a time budget."""
        left = self.ledger.seconds_left()
        needed = runs * self.ledger.expected_s(config)
        if left is None or left >= needed:
            return None
        limit = self.ledger.budget.says("time-budget")
        return f"{limit} leaves {max(left, 0):.0f} s, under its {runs} runs' ~{needed:.0f} s"

    def fidelity_failure(self) -> str:
        """The fidelity check's words, when it stopped the tune."""
        return self._fidelity.failure() if self._fidelity is not None else ""

    # --- closing the knobs a stop left ---------------------------------------------------
    def _limit(self, why: str) -> str:
        if why in ("budget", "time-budget"):
            return self.ledger.budget.says(why)
        return {"interrupted": interrupt_name(), "fidelity": "the fidelity check",
                "files": "a file's original could not be saved"}.get(why, why)  # fmt: skip

    def _void_kept_before_fidelity(self) -> None:
        """The fidelity check found that the trials time another workload than the
        script's: a first finding kept before it (suspect.py) was judged on that workload
        too. It leaves the ladder, undecided, and the result is the script as it is."""
        del self.ledger.ladder[1:]
        for outcome in self.ledger.knobs:
            if outcome.status == KnobStatus.KEPT:
                outcome.status = KnobStatus.UNDECIDED
                outcome.reason = (
                    f"undecided: the fidelity check then found that the trials time another "
                    f"workload than the script's (it had read: {outcome.reason})"
                )

    def _close_undecided(self, why: str) -> None:
        """A knob whose trials ran and that was not decided when the tune stopped (the one
        being decided, and those screened and waiting): it is not "not tried"."""
        limit = self._limit(why)
        for outcome in self.ledger.knobs:
            if outcome.status != KnobStatus.NOT_TRIED:
                continue
            ran = self._trials_of(outcome.knob)
            if ran:
                outcome.status = KnobStatus.UNDECIDED
                outcome.reason = _stopped_during(limit, ran)

    def _trials_of(self, name: str) -> list[int]:
        """The trials that ran ``name`` (an arm of a shared process among them)."""
        return [i for i, r in enumerate(self.ledger.trials) if name in r.config]

    def _close_untried(self, why: str) -> None:
        seen = {k.knob for k in self.ledger.knobs}
        limit = self._limit(why)
        for outcome in self.ledger.knobs:
            if outcome.status == KnobStatus.NOT_TRIED and not outcome.reason:
                outcome.reason = f"not tried: {limit}"
        for name in registry.NAMES:
            if name not in seen and (self._only is None or name in self._only):
                knob = registry.get(name)
                ran = self._trials_of(name)  # screened in a row's process, not yet its turn
                status, reason = (
                    (KnobStatus.UNDECIDED, _stopped_during(limit, ran))
                    if ran
                    else self._untried(knob, limit)
                )
                self.ledger.knobs.append(
                    KnobOutcome(
                        name,
                        status,
                        reason,
                        changes_numerics=knob.changes_numerics,
                        answers=list(knob.answers),
                    )
                )

    def _untried(self, knob: Knob, limit: str) -> tuple[str, str]:
        """A knob the tune never reached: planned all the same (a plan reads the doctor's
        facts, it runs nothing), so that one that could not apply here says why instead of
        "not tried" (DDP's knobs on a single-process script, the batch size without its
        flag): "not tried" is kept for what the limit really cost."""
        if knob.opt_in == "--allow-batch-size" and not self._ctx.allow_batch_size:
            return KnobStatus.NOT_TRIED, "changes training: tried only with --allow-batch-size"
        try:
            plan = knob.plan(self._ctx)
        except Exception:  # a plan that fails here is the trial's to report, not the stop's
            return KnobStatus.NOT_TRIED, f"not tried: {limit}"
        if not plan.applicable:
            return KnobStatus.NOT_APPLICABLE, plan.reason
        return KnobStatus.NOT_TRIED, f"not tried: {limit}"


def _stopped_during(limit: str, ran: list[int]) -> str:
    shown = ", ".join(str(i) for i in ran)
    return f"undecided: {limit} stopped the tune during its trials ({shown})"
