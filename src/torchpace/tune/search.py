"""The search: which knobs make this script faster, alone and together.

1. The baseline: one run that warms the caches, then three back to back: this machine's
   run-to-run noise for this script (noise.py) and the reference losses (loss_check.py).
2. Each applicable knob alone on top of the baseline: every candidate value screened once
   against the reference's most recent run (machines drift: the nearest run in time is the
   fair one); values within the clear margin of the best are ranked in one more block (a
   fresh reference and each once, random order); the best one with the loss intact is then
   decided by the sequential paired test (noise.judge): reference and knob alternate, pair
   after pair, until the gain is clear, refuted, or MAX_PAIRS could not separate it from
   the noise (a single lucky run proves nothing; a real gain smaller than the noise needs
   more pairs).
   Every knob is screened before any is decided (those answering the doctor's findings
   first), and the knobs are decided in the order of their best screened gain: a budget's
   pairs go where this machine showed a gain.
   Knobs that build on another (persistent workers on workers) are tried on top of it,
   after it was decided.
3. Each knob's pairs run **on top of every knob kept before it** (the screens ran on the
   baseline): the decisions climb a ladder, each kept knob a rung, as a careful person's
   ladder does. Interactions are real (fused AdamW 1.00x beside 4 loader workers on 2
   cores, 1.14x on top of num_workers=0; AMP with a bigger batch), and a knob kept is
   kept in the company it will run in.
4. With --allow-batch-size, batch sizes on top of the combination, doubling until out of
   memory or no gain (each trial is a fresh process: a failed attempt frees its memory);
   after an out-of-memory failure, halfway back towards the last size that ran (twice).
   The sizes that ran and the one that did not bracket the memory limit: the doctor's
   batch headroom estimate is reported against them (batch_check.py).
   Then, for a CPU job of N local ranks (--nproc-per-node N), other process counts on top
   (`_processes_per_node`): each screened, the promising ones paired, on the whole job's
   samples per second; the fastest confirmed is kept.
5. The final configuration against the baseline, alternated, at least two pairs, by the
   same test. If it is not faster, the knob of its top rung is dropped and the rung below
   is checked, down the ladder (`_final`); none faster: the result is the baseline. tune
   never returns a slower config.

Each pair runs its reference and its candidate in an order drawn at random (RMIT: a
neighbour's periodic load or the machine's drift favours neither), and its gain is the
candidate over the reference of the same pair. A run that was disturbed by something else on
the machine (far slower than its configuration's other runs, its own steps scattered far
more than theirs, or other processes using the CPUs much more than during the other runs:
noise.disturbance) is recorded, left out of every decision and of the references, and its
pair run again (at most MAX_RERUNS times per decision).

The timed steps per trial are calibrated on the first baseline run (`calibrated_steps`): as
many as make a run's median stable to about 1%, within a few seconds.

A budget in trials and seconds bounds it (the time budget counts from the command's start
and a trial that would not end within it is not started); Ctrl-C stops it. Either way what
was measured is kept and the best configuration confirmed so far is the result. Every
figure the user sees (the ladder, the final check, torchpace.toml, the JSON, the HTML) comes
from `TuneResult.figures`, computed once at the end.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from torchpace.capture.file_restore import FilesTouched
from torchpace.capture.outcome import exception_line
from torchpace.capture.switching import BLOCK_PAIRS, MIN_BLOCK_STEPS, SETTLE_STEPS
from torchpace.knobs import NAMES, get
from torchpace.knobs.base import Knob, TuneContext
from torchpace.knobs.batch_size import halfway, loader_batch
from torchpace.knobs.nproc_per_node import from_config as processes_in
from torchpace.tune import batch_check
from torchpace.tune import fidelity as fidelity_check
from torchpace.tune import noise as stats
from torchpace.tune.loss_check import DEFAULT_TOLERANCE, check_loss
from torchpace.tune.noise import Decision, Judgement, Noise, gain_pct, judge, measure_noise
from torchpace.tune.options import DEFAULT_TRIALS
from torchpace.tune.switched import (
    MAX_SWITCHED_PAIRS,
    MAX_SWITCHED_RUNS,
    MIN_SWITCHED_RUNS,
    block_estimate,
    block_steps_that_fit,
    switched_judgement,
    switched_noise,
)
from torchpace.tune.trial import Outcome, TrialResult, TrialSettings, run_trial

BASELINE = "baseline"
ONE_TIME_REPORTED_S = 1.0  # warm-up time beyond the baseline's worth a line
NOISE_RUNS = 3  # back-to-back baseline runs after the first (cold) one: the noise
# A run this much slower than its own configuration's earlier runs (in %, or three times the
# machine's noise when that is larger) was disturbed: something else took the machine for
# part of it (seen on a shared 2-core VM: a baseline at 478 ms between runs of 44-52 ms,
# which made the next two knobs look 140% and 1,000% faster). Its pair is run again.
DISTURBED_PCT = 50.0
# A run beside a busy neighbour (noise.disturbance) is disturbed only when it is also this
# much (or the noise) slower than its configuration's other runs.
MIN_SLOWED_PCT = 3.0
# Re-runs of disturbed pairs per decision (one run in 15 was disturbed on the shared 2-core VM;
# a decision may run 16 pairs): a machine that stays disturbed is measured as it is.
MAX_RERUNS = 4
# Step calibration: a run's median should move by about this much (in %) from one run to the
# next from its own steps' jitter alone (the standard error of a median: 1.25 sd / sqrt(K)),
# within these bounds on the timed steps and the timed seconds.
STABLE_MEDIAN_PCT = 1.0
MAX_CALIBRATED_STEPS = 200
MAX_TIMED_S = 4.0
# A trial is not started when the time budget would not hold it: its expected time (the
# median of its configuration's trials, else of all trials) times this.
TRIAL_TIME_MARGIN = 1.1
# After a batch size runs out of memory, the finder tries halfway between the largest that
# ran and the smallest that did not, this many times: the limit bracketed to an eighth of
# the last doubling, the doctor's estimate checked against it.
BACKOFF_STEPS = 2


class KnobStatus:
    KEPT = "kept"
    REJECTED = "rejected"
    NOT_APPLICABLE = "not-applicable"
    NOT_TRIED = "not-tried"  # opt-in not given, the budget ran out, Ctrl-C
    # its trials ran, and a limit (--time-budget, --budget, Ctrl-C) stopped the tune before
    # they decided: measured, neither kept nor refused
    UNDECIDED = "undecided"
    # its setting was not in force at the timed steps (the script undid it): not judged
    COULD_NOT_APPLY = "could-not-apply"


@dataclass
class KnobOutcome:
    knob: str
    status: str
    reason: str
    value: object = None  # the best value tried (the kept one when kept)
    gain_pct: float | None = None  # on top of the knobs kept before it
    changes_numerics: bool = False
    answers: list[str] = field(default_factory=list)  # finding codes it tests
    reported: bool = False  # the doctor reported one of those findings on this script
    one_time_s: float | None = None  # warm-up time beyond the reference's (compilation)
    payback_steps: int | None = None  # steps until the per-step saving repays one_time_s
    # the gain payback_steps is counted at, where it is under gain_pct: the least the pairs
    # show beyond the noise (Tuner._assured_gain_pct)
    assured_gain_pct: float | None = None


@dataclass
class Rung:
    """One step of the ladder: the configuration so far and what it measured."""

    label: str
    config: dict
    median_ms: float
    samples_per_s: float | None
    speedup: float  # against the baseline, per sample where samples are known
    peak_bytes: int | None
    changes_numerics: bool
    # the rung's gain over the rung below, in %, where its knob was switched within each
    # process (its runs' own ms/step sit in their processes' speed): settle_figures chains it
    switched_gain_pct: float | None = None


@dataclass
class TuneResult:
    noise: Noise | None = None
    trials: list[TrialResult] = field(default_factory=list)
    verdicts: dict[int, str] = field(default_factory=dict)  # trial index -> what it decided
    knobs: list[KnobOutcome] = field(default_factory=list)
    ladder: list[Rung] = field(default_factory=list)
    best: dict = field(default_factory=dict)
    final_speedup: float | None = None  # measured alternately against the baseline
    final_gains_pct: list[float] = field(default_factory=list)  # the final check's pairs
    # a final check whose one knob was switched within each process: its processes (the
    # gains above are then block pairs); 0: processes in pairs
    final_switched_runs: int = 0
    # "budget" (--budget: trials), "time-budget" (--time-budget), "interrupted",
    # "baseline-failed", "final-check-failed" or ""
    stopped: str = ""
    stopped_by: str = ""  # the limit as the user gave it: "--time-budget 450 s", "Ctrl-C"
    wall_s: float = 0.0
    # the batch-size finder's result beside the doctor's headroom estimate (batch_check.py);
    # None when the finder did not run
    batch_check: dict | None = None
    # every figure shown anywhere (ladder, final check, toml, JSON, HTML), computed once by
    # Tuner.settle_figures: baseline_ms_per_step, tuned_ms_per_step, speedup, ...
    figures: dict = field(default_factory=dict)
    steps: int | None = None  # the timed steps per trial (calibrated, or --steps)
    pair_sd_pct: float | None = None  # pair-to-pair spread of the gains, pooled
    detectable_pct: float | None = None  # the smallest gain MAX_PAIRS pairs could show
    # what the script did to files outside the run folder, over every run (each undone)
    files: FilesTouched = field(default_factory=FilesTouched)
    # a trial's ms/step against the plain script's (tune/fidelity.py); None: not checked
    fidelity: dict | None = None
    # the kept configuration as `torchpace run` runs it (tune/run_check.py); None: not run
    run_check: dict | None = None


@dataclass(frozen=True)
class Budget:
    trials: int = DEFAULT_TRIALS
    seconds: float | None = None

    def says(self, why: str) -> str:
        """The limit that stopped a tune, as the user gave it."""
        if why == "time-budget":
            return f"--time-budget {self.seconds:g} s"
        return f"--budget {self.trials} trials"


class Progress(Protocol):
    def trial_started(self, index: int, label: str) -> None: ...
    def trial_done(self, result: TrialResult, verdict: str, best_speedup: float) -> None: ...


class Stop(Exception):
    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


@dataclass
class _Candidate:
    knob: Knob
    config: dict  # the rung: every knob kept before it, and this one
    value: object
    runs: list[TrialResult]  # its confirmation's runs, on top of the knobs kept before
    switched_gain_pct: float | None = None  # decided within processes: the block pairs' gain


@dataclass
class _Screened:
    """A knob whose screens left values worth deciding (tune's step 2, between its screens
    and its paired test)."""

    knob: Knob
    outcome: KnobOutcome
    base_config: dict
    promising: list[TrialResult]
    # a value refused by its pairs before this decision, in words ("num_workers=2: not
    # confirmed: ..."): the runner-up values get their own decision, after the other knobs
    earlier: str = ""
    refused_by_pairs: bool = False  # set by the decision: the pairs said no (not a failure)

    def best_gain(self, gain_of: Callable[[TrialResult], float]) -> float:
        return max(gain_of(r) for r in self.promising)


def _held_against(name: str, runs: list[TrialResult]) -> str:
    """The script's own lines that the knob held its setting against (its later
    set_num_threads(32)): said in the verdict; the source edit changes them too."""
    lines = list(dict.fromkeys(line for r in runs for line in r.overridden_at.get(name, ())))
    return f"; held against the script's {', '.join(lines)}" if lines else ""


def cost_ms(result: TrialResult) -> float:
    """What is compared: time per sample when the batch size is known (so a bigger batch
    compares fairly), else time per step."""
    if result.samples_per_step:
        return result.ms_per_step / result.samples_per_step
    return result.ms_per_step


class Tuner:
    def __init__(
        self,
        settings: TrialSettings,
        ctx: TuneContext,
        run_dir: Path,
        progress: Progress,
        budget: Budget = Budget(),
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
        self.job_steps = job_steps
        self.fidelity = None
        if fidelity_limit:
            self.fidelity = fidelity_check.Fidelity(limit_pct=fidelity_limit)
        self._note = note or (lambda line: None)
        self.settings = settings
        self.ctx = ctx
        self.run_dir = run_dir
        self.progress = progress
        self.budget = budget
        self.loss_tolerance = loss_tolerance
        self.only = only
        self.result = TuneResult(steps=settings.steps)
        self._clock = clock
        self._started = clock() if started is None else started
        self._calibrate = calibrate
        # the order of each pair: drawn, but the same for the same seed (a tune reproduces)
        self._order = random.Random(settings.seed if settings.seed is not None else 0)
        # every decision: (reference, candidate, its gains); the pairs' spread, and the final
        # check's earlier evidence
        self._decisions: list[tuple[dict, dict, list[float]]] = []
        # the same for switched comparisons: block pairs within processes, whose spread is
        # not the pairs' of processes (kept apart from it)
        # (reference, candidate, block pairs' gains, processes)
        self._switched_decisions: list[tuple[dict, dict, list[float], int]] = []
        self._not_switched: dict[str, str] = {}  # knob -> why its trials could not switch it
        # the script's own length in steps, once a trial ended before its timed steps: a
        # switched trial's blocks are made to fit it (_block_steps_that_fit)
        self._script_steps: int | None = None
        self._baseline_runs: list[TrialResult] = []
        # knob name -> its kept rung (decided on top of the knobs kept before it): what a
        # knob that builds on it is screened on
        self._winners: dict[str, _Candidate] = {}
        self._loss_reference: TrialResult | None = None  # the first baseline run
        self._gains: dict[int, float] = {}  # id(trial) -> its gain over its paired reference
        # id(trial) -> the gains of earlier pairs of the same screening (a second look)
        self._prior_gains: dict[int, list[float]] = {}
        self._disturbed: set[int] = set()  # id(trial) of runs left out as disturbed

    # --- the whole search ------------------------------------------------------------
    def run(self) -> TuneResult:
        knobs = self._ordered_knobs()
        try:
            self._baseline()
            combined = self._ladder(knobs)
            combined = self._batch_size(combined)
            combined = self._processes_per_node(combined)
            self._final(combined)
        except Stop as stop:
            self.result.stopped = stop.why
            self.result.stopped_by = self._limit(stop.why)
            if stop.why != "fidelity":  # that one stops before any knob: none to close
                self._close_undecided(stop.why)
                self._close_untried(stop.why)
            self._best_so_far()
        self.settle_figures()
        self.result.wall_s = round(self._clock() - self._started, 1)
        return self.result

    def _best_so_far(self) -> None:
        """After a stop: the last rung of the ladder (every knob kept so far, each decided
        on top of the ones before it)."""
        if len(self.result.ladder) > 1:
            self.result.best = dict(self.result.ladder[-1].config)

    def _ordered_knobs(self) -> list[Knob]:
        names = [n for n in NAMES if self.only is None or n in self.only]
        knobs = [get(n) for n in names]
        # The doctor's findings first (a tight budget tries what was seen to cost), then
        # the registry's order; dependents stay after what they build on.
        return sorted(
            knobs,
            key=lambda k: (
                bool(k.depends_on),
                not (set(k.answers) & self.ctx.finding_codes),
                names.index(k.name),
            ),
        )

    # --- 1. the baseline -----------------------------------------------------------
    def _baseline(self) -> None:
        first = self._trial({}, BASELINE)
        if not first.ok:
            self._verdict(first, f"the unmodified script failed: {first.outcome}")
            raise Stop("baseline-failed")
        self._loss_reference = first
        self._verdict(first, "reference losses; warms the caches (not timed against)")
        given = self.settings
        if self._calibrate:
            self.settings = dataclasses.replace(given, steps=calibrated_steps(first, given.steps))
            self.result.steps = self.settings.steps
        runs = self._repeats(given)
        if not runs:  # the script ran once and then failed: nothing steady to compare with
            raise Stop("baseline-failed")
        runs = self._without_disturbed_noise_runs(runs)
        for run in runs:
            self._note_baseline(run)
        # Only back-to-back runs measure the noise: later baselines are separated by other
        # trials, and the machine's drift between them is cancelled by alternation instead.
        self.result.noise = measure_noise([cost_ms(r) for r in runs])
        self.result.ladder.append(self._rung(BASELINE, {}, runs))

    def _repeats(self, given: TrialSettings) -> list[TrialResult]:
        """NOISE_RUNS back-to-back baseline runs, the noise's measure; with the fidelity
        check on, each beside a plain run of the script (alternated), and more pairs while
        the check needs them: the check's trials are these runs, not runs of their own."""
        runs: list[TrialResult] = []
        attempts = 0

        def repeat(_where: Path | None = None) -> TrialResult:
            nonlocal attempts
            attempts += 1
            again = self._trial({}, f"{BASELINE} (repeat)")
            if not again.ok and self.settings is not given and not runs:
                # the script ends before the calibrated steps: back to the steps asked for
                self._verdict(again, f"{again.outcome} with {self.settings.steps} timed steps: "
                              f"back to {given.steps}")  # fmt: skip
                self.settings, self.result.steps = given, given.steps
                again = self._trial({}, f"{BASELINE} (repeat)")
            if self._noise_run(again):
                runs.append(again)
            return again

        if self.fidelity is not None:
            self._check_fidelity(repeat)
        while attempts < NOISE_RUNS:
            repeat()
        return runs

    def _check_fidelity(self, repeat: Callable[[Path], TrialResult]) -> None:
        """The baseline's repeats against plain runs (tune/fidelity.py); Stop("fidelity")
        when a trial is confirmed to time another workload than the script's."""
        self._note("[bold]fidelity[/]: the script as it is vs the baseline's repeats, alternated")

        def plain(where: Path) -> float | str:
            self._check_time({})  # a plain run takes a baseline trial's time
            return fidelity_check.plain_run(self.settings, where)

        def told(side: str, ms: float | None) -> None:
            if side == "plain":  # a trial has its own line (the progress display's)
                timing = "failed" if ms is None else f"{ms:8.2f} ms/step"
                self._note(f"  {'plain script (one step hook)':<42} {timing}")

        fidelity_check.check_fidelity(
            self.settings, self.run_dir / "fidelity", self.fidelity.limit_pct, told,
            run_baseline=repeat, run_plain=plain, min_pairs=NOISE_RUNS, fidelity=self.fidelity,
        )  # fmt: skip
        self._note(f"  {self.fidelity.line()}")
        if not self.fidelity.ok:
            raise Stop("fidelity")

    def _without_disturbed_noise_runs(self, runs: list[TrialResult]) -> list[TrialResult]:
        """One disturbed run among the back-to-back baselines would make the noise, and with
        it every threshold, as large as the disturbance: it is replaced by another run."""
        for _ in range(MAX_RERUNS):
            if len(runs) < 2:
                return runs
            why, worst = None, None
            for run in sorted(runs, key=cost_ms, reverse=True):
                others = [r for r in runs if r is not run]
                why = self._disturbance_among(run, others)
                if why is not None:
                    worst = run
                    break
            if worst is None:
                return runs
            self._disturbed.add(id(worst))
            self.result.verdicts[self._index(worst)] = f"disturbed: {why}; run again"
            runs = [r for r in runs if r is not worst]
            again = self._trial({}, f"{BASELINE} (repeat)")
            if self._noise_run(again):
                runs.append(again)
        return runs

    def _noise_run(self, run: TrialResult) -> bool:
        """Its verdict, whether it succeeded or not (a failed repeat gets its line too)."""
        if run.ok:
            self._verdict(run, "reference: measures this machine's noise")
            return True
        named = exception_line(run.error or "")
        why = f"{run.outcome}" + (f" ({named})" if named else "")
        self._verdict(run, f"baseline repeat failed: {why}; left out of the noise")
        return False

    def _note_baseline(self, result: TrialResult) -> None:
        if result.ok:
            self._baseline_runs.append(result)

    def _latest_ms(self, config: dict) -> float:
        """The cost of this configuration's most recent successful run: the fairest reference
        for the next trial, being the nearest to it in time."""
        for result in reversed(self.result.trials):
            if result is self._loss_reference or id(result) in self._disturbed:
                continue  # the cold first run, and disturbed runs, are no one's reference
            if result.ok and result.config == config and self._reject_reason(result) is None:
                return cost_ms(result)
        raise LookupError(f"no successful run of {config}")

    def _set_aside_if_disturbed(self, result: TrialResult) -> bool:
        """Marks a disturbed run (left out of decisions and references), with its verdict."""
        why = self._disturbance(result)
        if why is None:
            return False
        self._disturbed.add(id(result))
        self._verdict(result, f"disturbed: {why}; pair run again")
        return True

    def _usable(self, result: TrialResult) -> bool:
        return (
            result.ok and result is not self._loss_reference and id(result) not in self._disturbed
        )

    def _disturbance(self, result: TrialResult) -> str | None:
        """Why this run was disturbed, or None; against its configuration's earlier runs."""
        if not result.ok:
            return None
        earlier = [
            r for r in self.result.trials
            if r is not result and self._usable(r) and r.config == result.config
            and self._reject_reason(r) is None
        ]  # fmt: skip
        return self._disturbance_among(result, earlier)

    def _disturbance_among(self, result: TrialResult, earlier: list[TrialResult]) -> str | None:
        """Far slower than the same configuration's other runs (a first run of a
        configuration is never: a knob may really be that slow, bf16 autocast on a CPU
        without bf16 instructions is 40x slower); its steps scattered far more than theirs;
        or other processes on the CPUs much more than during the tune's other runs, and the
        run slower than its siblings beyond the noise."""
        if not result.ok:
            return None
        noise_pct = (self.result.noise.pct if self.result.noise else None) or 0.0
        usual = statistics.median(cost_ms(r) for r in earlier) if earlier else None
        if usual is not None:
            limit = max(DISTURBED_PCT, 3 * noise_pct)
            slower = 100 * (cost_ms(result) / usual - 1)
            if slower > limit:
                return (
                    f"{result.ms_per_step:.1f} ms/step, {slower:.0f}% slower than this "
                    f"configuration's other runs (limit {limit:.0f}%)"
                )
        siblings = [r for r in self.result.trials if r is not result and self._usable(r)]
        siblings_spreads = [r.spread_pct for r in siblings if r.spread_pct is not None]
        spreads = [r.spread_pct for r in earlier if r.spread_pct is not None]
        if len(spreads) < 2:
            # one earlier run of this configuration is no measure of its usual scatter (its
            # steps may have happened to be tight): the tune's other runs are
            spreads = siblings_spreads
        why = stats.disturbance(result.spread_pct, spreads, None, [])
        # a busy neighbour counts only where it visibly slowed the run: on a machine whose
        # load comes and goes all the time, re-running every run beside it would measure
        # nothing else
        threshold = self.result.noise.threshold_pct if self.result.noise else MIN_SLOWED_PCT
        slowed = usual is not None and cost_ms(result) > usual * (1 + threshold / 100)
        if why is not None or not (slowed or usual is None):
            return why
        others = [r.others_cores for r in siblings if r.others_cores is not None]
        busy = stats.disturbance(None, [], result.others_cores, others)
        if busy is None or slowed:
            return busy
        # a configuration's first run has no siblings to be slower than: a busy neighbour
        # and steps scattered far more than the tune's other runs' both have to say so (a
        # knob may scatter its steps by itself: loader workers deliver in bursts)
        scattered = stats.disturbance(result.spread_pct, siblings_spreads, None, [])
        return f"{busy}, and {scattered}" if scattered else None

    @property
    def _baseline_ms(self) -> float:
        return statistics.median(cost_ms(r) for r in self._baseline_runs)

    @property
    def _baseline_steps(self) -> range:
        return self._loss_reference.measured_steps

    # --- paired decisions --------------------------------------------------------------
    def _screen(self, reference: dict, config: dict, label: str) -> tuple[TrialResult, str | None]:
        """One run of `config` against the reference's latest run: (the run, why it is out).
        Out only when slower beyond the clear margin: one pair cannot refuse a small gain
        (a 5% gain under 5% pair noise screens below +3% a third of the time)."""
        reference_ms = self._latest_ms(reference)
        switch = self._switch_for(reference, config)
        result = self._trial(config, label, switch)
        why = self._reject_reason(result)
        if why is None and switch:
            if result.switched:
                return self._screened_switched(result)
            self._cannot_switch(switch, result)  # an ordinary trial: screened as one
        if why is None and self._set_aside_if_disturbed(result):
            result = self._trial(config, label)  # once: then it is measured as it is
            why = self._reject_reason(result)
        if why is None:
            gain = gain_pct(cost_ms(result), reference_ms)
            self._gains[id(result)] = gain
            if gain < -self._clear_pct:
                return self._second_look(reference, config, label, result, gain)
        self._verdict(result, why or f"{self._gains[id(result)]:+.1f}%: to be confirmed")
        return result, why

    def _screened_switched(self, result: TrialResult) -> tuple[TrialResult, str | None]:
        """A switched screen: its block pairs against the script's setting in the same
        process. Out only when slower beyond their own clear margin."""
        gains = result.block_gains
        gain = self._gains[id(result)] = block_estimate(result)
        said = f"{gain:+.1f}% over {len(gains)} block pairs, switched within the process"
        if gain < -switched_noise(gains).clear_pct:
            why = f"slower ({said})"
            self._verdict(result, why)
            return result, why
        self._verdict(result, f"{said}: to be confirmed")
        return result, None

    def _switch_for(self, reference: dict, config: dict) -> str:
        """The knob a comparison can switch within each process (capture/switching.py):
        ``config`` is ``reference`` plus one switchable knob, on a one-process job, and no
        trial of that knob failed to switch it. "" otherwise: processes in pairs."""
        added = [name for name in config if name not in reference]
        same = all(config.get(name) == value for name, value in reference.items())
        if len(added) != 1 or not same or self.settings.nproc_per_node > 1:
            return ""
        if processes_in(config) or added[0] in self._not_switched:
            return ""
        fits = self._block_steps_that_fit(drained(self.settings, config)) >= MIN_BLOCK_STEPS
        return added[0] if get(added[0]).switchable and fits else ""

    def _block_steps_that_fit(self, settings: TrialSettings) -> int:
        """Timed steps per block of a switched trial, fitted to the job (--job-steps) and to
        the script's own length (a trial that ended first): switched.block_steps_that_fit."""
        lengths = [n for n in (self.job_steps, self._script_steps) if n is not None]
        return block_steps_that_fit(settings.steps, settings.warmup, lengths)

    def _cannot_switch(self, switch: str, result: TrialResult) -> None:
        """A trial whose knob could not be switched is an ordinary trial; the knob's later
        comparisons are processes in pairs."""
        self._not_switched[switch] = result.switch_note or "not switched"
        result.knob_details.append(f"{switch} not switched: {self._not_switched[switch]}")

    def _second_look(
        self, reference: dict, config: dict, label: str, first: TrialResult, first_gain: float
    ) -> tuple[TrialResult, str | None]:
        """A candidate slower beyond the clear margin in its first run gets one more pair
        (its order drawn at random) before it is refused: one run can fall in a slow phase
        of a shared machine that the back-to-back baselines did not show (seen on the 2-core
        VM: steps switching between 27 and 40 ms/step for seconds at a time; fused AdamW,
        1.27x faster on gpt.py over whole runs, screened at -10.0% and was refused). Refused
        when both pairs are slower beyond the margin; otherwise the second run is the
        screened one, and the first pair's gain stays in its evidence (no pair is dropped
        for having been unlucky)."""
        self._verdict(first, f"{first_gain:+.1f}%: slower in its first run, one more pair")
        ref = result = None
        for is_reference in (True, False) if self._order.random() < 0.5 else (False, True):
            if is_reference:
                ref = self._trial(reference, f"reference {self._label(reference)} (second look)")
            else:
                result = self._trial(config, f"{label} (second look)")
        why = self._reject_reason(result)
        if why is not None:
            self._verdict(result, why)
            return result, why
        reference_ms = cost_ms(ref) if ref.ok else self._latest_ms(reference)
        self._verdict(ref, f"reference: second look at {label}")
        gain = gain_pct(cost_ms(result), reference_ms)
        self._gains[id(result)] = gain
        if gain < -self._clear_pct:
            why = f"slower ({first_gain:+.1f}% and {gain:+.1f}% in its first two runs)"
            self._verdict(result, why)
            return result, why
        self._prior_gains[id(result)] = [first_gain]
        self._verdict(result, f"{gain:+.1f}%: to be confirmed (first run {first_gain:+.1f}%)")
        return result, None

    @property
    def _clear_pct(self) -> float:
        return self.result.noise.clear_pct if self.result.noise else 2 * stats.MIN_GAIN_PCT

    def _paired(
        self,
        reference: dict,
        config: dict,
        label: str,
        screened: TrialResult | None = None,
        min_pairs: int = 1,
        prior: list[float] | None = None,
    ) -> tuple[Judgement, list[TrialResult], list[TrialResult], str | None]:
        """Reference and candidate in pairs, each pair's order drawn at random, until the
        sequential test decides. `screened` is a candidate run already measured against the
        reference's latest run: its pair counts. Returns the judgement, the candidate's runs,
        the reference's runs, and why the candidate is out when one of its runs failed or
        broke the loss. `prior`: gains of earlier pairs of the very same comparison, which
        count; `min_pairs` new pairs are run whatever they say. A knob that can be switched
        within a process is compared there instead (`_paired_switched`)."""
        switch = self._switch_for(reference, config)
        if switch and (screened is None or screened.switched):
            return self._paired_switched(reference, config, label, switch, screened)
        runs = [screened] if screened is not None else []
        gains = list(prior or [])
        n_prior = len(gains)  # already in self._decisions: not counted twice in the spread
        gains += [self._gains[id(screened)]] if screened is not None else []
        first_new = len(gains)
        references: list[TrialResult] = []
        judgement = judge(gains, self.result.noise)
        reruns = 0
        while judgement.decision == Decision.UNDECIDED or len(gains) - first_new < min_pairs:
            pair = len(gains) + 1
            ref_label = f"reference {self._label(reference)} (pair {pair})"
            first_is_reference = self._order.random() < 0.5
            ref = result = None
            for is_reference in (first_is_reference, not first_is_reference):
                if is_reference:
                    ref = self._trial(reference, ref_label)
                else:
                    result = self._trial(config, f"{label} (pair {pair})")
                    why = self._reject_reason(result)
                    if why is not None:
                        self._verdict(result, why)
                        self._record_decision(reference, config, gains[n_prior:])
                        return judgement, runs, references, why
            if not ref.ok:  # the reference itself failed (rare): measured as it is next pair
                self._verdict(ref, f"reference failed: {ref.outcome}")
                reruns += 1
                if reruns > MAX_RERUNS:
                    return judgement, runs, references, f"its reference failed: {ref.outcome}"
                continue
            if reruns < MAX_RERUNS and (
                self._set_aside_if_disturbed(ref) or self._set_aside_if_disturbed(result)
            ):
                reruns += 1
                for other in (ref, result):
                    if id(other) not in self._disturbed:
                        self._disturbed.add(id(other))  # a half pair is no evidence
                        self._verdict(other, "its pair was disturbed: run again")
                continue
            self._verdict(ref, f"reference: paired with {label}")
            if reference == {}:
                self._note_baseline(ref)
            references.append(ref)
            gains.append(gain_pct(cost_ms(result), cost_ms(ref)))
            self._gains[id(result)] = gains[-1]
            runs.append(result)
            judgement = judge(gains, self.result.noise)
            if judgement.decision == Decision.NOT_FASTER and len(gains) - first_new < min_pairs:
                judgement = Judgement(Decision.UNDECIDED, judgement.gains_pct, judgement.reason)
            self._verdict(result, f"pair {pair}: {gains[-1]:+.1f}%; {judgement.reason}")
        self._record_decision(reference, config, gains[n_prior:])
        return judgement, runs, references, None

    def _paired_switched(
        self,
        reference: dict,
        config: dict,
        label: str,
        switch: str,
        screened: TrialResult | None,
    ) -> tuple[Judgement, list[TrialResult], list[TrialResult], str | None]:
        """The sequential test on block pairs: each process switches the knob on and off in
        BLOCK_PAIRS block pairs (capture/switching.py), and every block pair of every
        process counts, at least MIN_SWITCHED_RUNS processes (a new one whatever the screen
        said), at most MAX_SWITCHED_RUNS. The clear margin is the block pairs' own spread.
        A process that could not switch the knob ends it: processes in pairs from there on.
        Returns as `_paired` does; the references are inside the runs."""
        runs = [screened] if screened is not None else []
        earlier = [(gains, n) for ref, cand, gains, n in self._switched_decisions
                   if ref == reference and cand == config]  # fmt: skip
        prior = [g for gains, _ in earlier for g in gains]
        processes = sum(n for _, n in earlier)  # theirs and this decision's, in the words
        gains = prior + [g for run in runs for g in run.block_gains]
        new = 0
        most = MAX_SWITCHED_PAIRS
        judgement = switched_judgement(gains, processes + len(runs), most)
        while judgement.decision == Decision.UNDECIDED or len(runs) < MIN_SWITCHED_RUNS or not new:
            if len(runs) >= MAX_SWITCHED_RUNS:  # a short script's few pairs: decided as they are
                judgement = switched_judgement(gains, processes + len(runs), len(gains))
                break
            result = self._trial(config, f"{label} (switched {len(runs) + 1})", switch)
            new += 1
            why = self._reject_reason(result)
            if why is not None:
                self._verdict(result, why)
                return judgement, runs, [], why
            if not result.switched:
                self._cannot_switch(switch, result)
                self._verdict(result, f"not switched ({self._not_switched[switch]}): "
                                      "decided by processes in pairs")  # fmt: skip
                return self._paired(reference, config, label)
            runs.append(result)
            gains += result.block_gains
            self._gains[id(result)] = block_estimate(result)
            judgement = switched_judgement(gains, processes + len(runs), most)
            if len(runs) < MIN_SWITCHED_RUNS:
                judgement = Judgement(Decision.UNDECIDED, judgement.gains_pct, judgement.reason)
            self._verdict(
                result,
                f"{self._gains[id(result)]:+.1f}% over its "
                f"{len(result.block_gains)} block pairs; {judgement.reason}",
            )
        self._switched_decisions.append((reference, config, gains[len(prior) :], len(runs)))
        return judgement, runs, [], None

    def _record_decision(self, reference: dict, config: dict, gains: list[float]) -> None:
        """A decision's pairs, kept for the spread and the final check; once they measure
        the pairs' spread (PAIRS_FOR_SPREAD pairs in decisions of two or more), the clear
        margin follows it (noise.Noise.clear_pct)."""
        self._decisions.append((reference, config, gains))
        noise = self.result.noise
        decided = [g for _, _, g in self._decisions if len(g) >= 2]
        if noise is None or sum(len(g) for g in decided) < stats.PAIRS_FOR_SPREAD:
            return
        sd = stats.spread_of_pairs(decided)
        if sd is not None:
            self.result.noise = dataclasses.replace(noise, pair_sd_pct=sd)

    def _label(self, config: dict) -> str:
        if not config:
            return BASELINE
        return " + ".join(get(name).describe(value) for name, value in config.items())

    # --- 2. each knob alone ----------------------------------------------------------
    def _ladder(self, knobs: list[Knob]) -> dict:
        """Every knob's values screened first (against the baseline), then the knobs decided
        in the order of their best screened gain, each **on top of the knobs kept before
        it**, as a careful person climbs a ladder: the pairs a knob needs go first to the
        knobs this machine showed a gain for, and a knob that only pays once another is in
        is seen (makemore: fused AdamW 1.00x beside 4 loader workers on 2 cores, 1.14x on
        top of num_workers=0). Decided in the registry's order, a knob with no effect took
        24 of gpt.py's 38 trials under --time-budget 300 before fused AdamW was screened.
        Knobs that build on another are screened and decided after it was. Returns the
        configuration kept; each kept knob is a rung."""
        winners = self._winners
        screens: list[_Screened] = []
        dependents: list[tuple[Knob, KnobOutcome, tuple]] = []
        for knob in knobs:
            outcome = KnobOutcome(
                knob.name, KnobStatus.NOT_TRIED, "", changes_numerics=knob.changes_numerics,
                answers=list(knob.answers),
                reported=bool(set(knob.answers) & self.ctx.finding_codes),
            )  # fmt: skip
            self.result.knobs.append(outcome)
            if knob.opt_in == "--allow-batch-size":
                if not self.ctx.allow_batch_size:
                    outcome.reason = "changes training: tried only with --allow-batch-size"
                continue  # tried on top of the combination, step 4
            plan = knob.plan(self.ctx)
            if not plan.applicable:
                outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, plan.reason
                continue
            if knob.depends_on:
                dependents.append((knob, outcome, plan.values))
                continue
            screen = self._screen_values(knob, plan.values, {}, outcome)
            if screen is None:
                continue
            if screen.best_gain(self._screen_gain) > self._clear_pct:
                # clear at the screen already: decided now, while the other knobs wait to be
                # screened. One more clear pair keeps it, and a budget that ends during the
                # screens keeps it too: on the H100 a 240 s tune screened loader workers at
                # +135% and device transforms at +189% (clear margin 35%) and ended with the
                # script as it is, both "to be confirmed"
                self._decide_screened(screen, screens, winners)
            else:
                screens.append(screen)
        screens.sort(key=lambda screen: -screen.best_gain(self._screen_gain))
        for screen in screens:  # grows while it runs: a refused value's runners-up, last
            self._decide_screened(screen, screens, winners)
        for knob, outcome, values in dependents:
            base_config: dict = {}
            for dependency in knob.depends_on:
                if dependency not in winners:
                    outcome.status = KnobStatus.NOT_APPLICABLE
                    outcome.reason = f"builds on {dependency}, which was not kept"
                    break
                base_config.update(winners[dependency].config)
            else:
                if (idle := knob.on_top_of(base_config)) is not None:
                    outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, idle
                    continue
                screen = self._screen_values(knob, values, base_config, outcome)
                candidate = self._decide(screen) if screen is not None else None
                if candidate is not None:
                    winners[knob.name] = candidate
                    self._climb(candidate)
        return self._kept

    def _decide_screened(self, screen: _Screened, screens: list[_Screened], winners) -> None:
        """A screened knob decided: kept (the ladder's next rung), or its runners-up queued
        at the end of ``screens``."""
        candidate = self._decide(screen)
        if candidate is not None:
            winners[screen.knob.name] = candidate
            self._climb(candidate)
        elif (runner_up := self._runners_up(screen)) is not None:
            screens.append(runner_up)

    @property
    def _kept(self) -> dict:
        """The configuration of every knob kept so far: the ladder's top rung."""
        return dict(self.result.ladder[-1].config) if len(self.result.ladder) > 1 else {}

    def _climb(self, candidate: _Candidate) -> None:
        """A kept knob is the ladder's next rung: its runs were decided on top of the one
        before."""
        label = f"+ {candidate.knob.describe(candidate.value)}"
        rung = self._rung(label, candidate.config, candidate.runs)
        rung.switched_gain_pct = candidate.switched_gain_pct
        self.result.ladder.append(rung)

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
        for value in values:
            config = {**base_config, knob.name: value}
            result, why = self._screen(base_config, config, knob.describe(value))
            if knob.name in result.not_held:  # measured something else: no judgement
                not_applied.append(f"{knob.describe(value)}: {result.not_held[knob.name]}")
                self._verdict(result, f"could not apply: {result.not_held[knob.name]}")
                continue
            screened.append(result)
            if why:
                reasons.append(f"{knob.describe(value)}: {why}")
            else:
                promising.append(result)
        if not promising and not_applied and not screened:
            outcome.status = KnobStatus.COULD_NOT_APPLY
            outcome.reason = "could not apply: " + "; ".join(not_applied)
            return None
        if not promising:
            outcome.status = KnobStatus.REJECTED
            no_gain = Judgement(Decision.NOT_FASTER, (), "")
            outcome.reason = "; ".join(reasons) + self._one_time_cost(
                outcome, screened, [], no_gain
            )
            return None
        return _Screened(knob, outcome, base_config, promising)

    def _decide(self, screen: _Screened) -> _Candidate | None:
        """The best of a knob's promising values (ranked when several are close), then the
        sequential paired test against its reference: kept or refused."""
        knob, outcome, base_config, promising = (
            screen.knob, screen.outcome, screen.base_config, screen.promising,
        )  # fmt: skip
        too_dear = self._not_repaid_at_screen(screen)
        if too_dear is not None:  # no pair could change it: they are left to other knobs
            outcome.status, outcome.reason = KnobStatus.REJECTED, too_dear
            return None
        best = self._rank(knob, promising, base_config)
        value = best.config[knob.name]
        outcome.value = value
        # decided on top of every knob kept so far (the screens ran on the baseline)
        reference = {**self._kept, **base_config}
        config = {**reference, **best.config}
        # The screening pair counts as evidence only when it did not also select the value
        # (the best of several noisy screens is biased toward a lucky run) and its
        # reference is this decision's.
        counted = best if len(promising) == 1 and reference == base_config else None
        prior = self._prior_gains.get(id(best)) if counted is not None else None
        judgement, runs, references, why = self._paired(
            reference, config, knob.describe(value), counted, prior=prior
        )
        if why is None and judgement.gains_pct:
            outcome.gain_pct = judgement.mean_gain_pct
        if why is None and judgement.decision != Decision.FASTER:
            why = judgement.reason
            screen.refused_by_pairs = True
        measured = [best, *runs] if reference == base_config else runs  # one configuration
        held = _held_against(knob.name, [best, *runs])
        cost = self._one_time_cost(outcome, measured, references, judgement) + held
        earlier = f"; before it, {screen.earlier}" if screen.earlier else ""
        on_top = f" on top of {self._label(reference)}" if reference else ""
        if why is not None:
            outcome.status = KnobStatus.REJECTED
            outcome.reason = f"not confirmed{on_top}: {why}{cost}{earlier}"
            return None
        not_repaid = self._not_repaid(outcome)  # faster, and still the job's loss
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
            if r.config[knob.name] != tried and self._screen_gain(r) > 0
        ]  # fmt: skip
        if not rest:
            return None
        earlier = f"{knob.describe(tried)}: {screen.outcome.reason}"
        # not decided yet: a limit that stops the tune before the runner-up's decision
        # leaves the knob undecided, not refused
        screen.outcome.status, screen.outcome.reason = KnobStatus.NOT_TRIED, ""
        return _Screened(knob, screen.outcome, screen.base_config, rest, earlier=earlier)

    def _screen_gain(self, run: TrialResult) -> float:
        """A screened value's gain over every pair it had: a second look's first pair counts
        (a +17.7% second run after a -23.9% first is not a +17.7% value)."""
        gains = [*self._prior_gains.get(id(run), []), self._gains.get(id(run), 0.0)]
        return sum(gains) / len(gains)

    def _rank(self, knob: Knob, promising: list[TrialResult], base_config: dict) -> TrialResult:
        """The value to confirm, of several that screened well. One run each cannot rank
        values whose screens lie within the clear margin of the best: on the 2-core VM,
        makemore's num_workers=0 (1.62x faster over whole runs) screened at 15.3 ms/step
        beside workers=2's 13.5 and was never paired. Those values run once more with one
        fresh reference run, all in random order (a block: one phase of the machine for
        all of them), and the best mean gain over both rounds is confirmed."""
        first = {id(r): self._screen_gain(r) for r in promising}
        if all(r.switched for r in promising):  # each measured in its own process: precise
            return max(promising, key=lambda r: first[id(r)])
        top = max(first.values())
        close = [r for r in promising if top - first[id(r)] < self._clear_pct]
        # the block and the fewest pairs that can confirm a value (stats.CLEAR_PAIRS) must fit
        # in the trials left: a --budget that the ranking would use up leaves the knob
        # undecided, worse than confirming the best screen (two ranks' bucket sizes, +282% and
        # +279%: the block took 3 of --budget 12's last 6 trials)
        left = self.budget.trials - len(self.result.trials)
        if len(close) < 2 or left < len(close) + 1 + 2 * stats.CLEAR_PAIRS:
            return max(promising, key=lambda r: first[id(r)])
        block: list[TrialResult | None] = [None, *close]
        self._order.shuffle(block)
        ref, again = None, {}
        for item in block:
            if item is None:
                ref = self._trial(base_config, f"reference {self._label(base_config)} (ranking)")
            else:
                label = f"{knob.describe(item.config[knob.name])} (ranking)"
                again[id(item)] = self._trial(item.config, label)
        if not ref.ok:
            self._verdict(ref, f"reference failed: {ref.outcome}; ranked on the first runs")
            for run in again.values():
                self._verdict(run, "ranking: its reference failed")
            return max(close, key=lambda r: first[id(r)])
        self._verdict(ref, f"reference: ranking the values of {knob.name}")
        gains = {}
        for r in close:
            run, why = again[id(r)], self._reject_reason(again[id(r)])
            if why is not None:
                self._verdict(run, why)  # confirmed or refused by its own pairs later
                gains[id(r)] = first[id(r)]
                continue
            second = gain_pct(cost_ms(run), cost_ms(ref))
            gains[id(r)] = (first[id(r)] + second) / 2
            self._verdict(run, f"{second:+.1f}%: ranking (first run {first[id(r)]:+.1f}%, "
                               f"mean {gains[id(r)]:+.1f}%)")  # fmt: skip
        return max(close, key=lambda r: gains[id(r)])

    def _one_time_s(self, runs: list[TrialResult], references: list[TrialResult]) -> float | None:
        """What a knob costs once, in warm-up (torch.compile's compilation, autotuning),
        beyond what its references paid in the same warm-up steps (a script's first
        evaluation, its first epoch's set-up, are paid by both). None when it is within the
        references' own run-to-run spread, or under ONE_TIME_REPORTED_S."""
        refs = [r for r in references if r.ok] or self._baseline_runs
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

    def _one_time_cost(self, outcome: KnobOutcome, runs, references, judgement) -> str:
        """The one-time cost's words in a verdict, and how many steps the knob's saving per
        step takes to repay it: at the least gain its pairs show beyond the noise
        (`_assured_gain_pct`), not at their estimate."""
        one_time = self._one_time_s(runs, references)
        if one_time is None:
            return ""
        outcome.one_time_s = round(one_time, 1)
        text = f"; one-time cost {one_time:.1f} s in warm-up"
        if not judgement.gains_pct or judgement.mean_gain_pct <= 0:
            return text
        gain = self._assured_gain_pct(judgement)
        if gain <= 0:
            outcome.payback_steps = None
            return text + ", its repayment not assured by its pairs"
        ms = statistics.median(r.ms_per_step for r in runs if r.ok)
        outcome.payback_steps = _payback_steps(one_time, ms, gain)
        outcome.assured_gain_pct = round(gain, 1)
        return text + f", repaid after {outcome.payback_steps:,} steps{_at_assured(outcome)}"

    def _assured_gain_pct(self, judgement: Judgement) -> float:
        """The least gain a decision's pairs show beyond the noise: the 90% interval's low
        bound once it has one, else what the best pair shows beyond the clear margin (each
        pair is within it of the truth). Under load makemore's torch.compile won two pairs
        at +114% and +85% (margin 64%) and was kept as repaid after 236 of the job's 300
        steps; whole runs read 1.18x a step and the job ran 0.89x end to end."""
        gains = judgement.gains_pct
        ci = stats.interval(gains)
        if ci.low_pct is not None:
            return min(ci.low_pct, judgement.mean_gain_pct)
        return min(max(gains) - self._clear_pct, judgement.mean_gain_pct)

    def _not_repaid(self, outcome: KnobOutcome) -> str | None:
        """Why a faster knob still makes the job slower end to end: its one-time cost is
        repaid after more steps than the job runs (--job-steps). makemore under --max-steps
        300 kept torch.compile at +30.9% a step: 25 s of compilation, repaid after 9,783
        steps, made the whole job slower."""
        payback = outcome.payback_steps
        if self.job_steps is None or outcome.one_time_s is None:
            return None
        if payback is None:  # its pairs do not show a gain beyond the noise to repay it with
            return (
                f"not repaid within the job: faster by {outcome.gain_pct:+.1f}% a step, but "
                f"its pairs assure no gain beyond the noise to repay its one-time cost of "
                f"{outcome.one_time_s:.1f} s (--job-steps {self.job_steps:,})"
            )
        if payback <= self.job_steps:
            return None
        return (
            f"not repaid within the job: faster by {outcome.gain_pct:+.1f}% a step, but its "
            f"one-time cost of {outcome.one_time_s:.1f} s is repaid after {payback:,} steps"
            f"{_at_assured(outcome)} and the job runs {self.job_steps:,} (--job-steps)"
        )

    def _not_repaid_at_screen(self, screen: _Screened) -> str | None:
        """A knob that its screens already show cannot repay its one-time cost within the
        job (--job-steps), even at its screened gain plus the clear margin (the most one
        noisy pair allows): refused without pairs. On makemore (300 steps) torch.compile,
        3.4 s of compilation repaid after 1,711 steps, took a dozen trials to confirm and
        refuse, and fused AdamW, 1.11x on top of the kept knob by hand, was left undecided
        when the 300 s ended."""
        if self.job_steps is None:
            return None
        paybacks = []
        for run in screen.promising:
            one_time = self._one_time_s([run], [])
            # the most one pair allows, and never under what a change must be worth
            gain = max(self._screen_gain(run) + self._clear_pct, stats.MIN_GAIN_PCT)
            if one_time is None or not run.ms_per_step:
                return None  # this value costs nothing once that can be told: decide it
            payback = _payback_steps(one_time, run.ms_per_step, gain)
            if payback <= self.job_steps:
                return None
            paybacks.append((payback, one_time, gain, self._screen_gain(run)))
        payback, one_time, best_case, screened = min(paybacks)
        screen.outcome.one_time_s = round(one_time, 1)
        return (
            f"not repaid within the job: its one-time cost of {one_time:.1f} s would be "
            f"repaid after {payback:,} steps even at {best_case:+.1f}% a step (its first run "
            f"{screened:+.1f}%, plus the {self._clear_pct:.1f}% margin of one pair), and the "
            f"job runs {self.job_steps:,} (--job-steps)"
        )

    # --- 4. batch size, opt-in -------------------------------------------------------
    def _batch_size(self, config: dict) -> dict:
        """Doubling on top of the combination while each size is faster; after one runs
        out of memory, backing off halfway between the largest that ran and it (at most
        BACKOFF_STEPS times). What ran and what ran out of memory checks the doctor's
        batch headroom estimate (tune/batch_check.py)."""
        outcome = self._outcome("batch-size")
        if outcome is None or not self.ctx.allow_batch_size:
            return config
        knob = get("batch-size")
        plan = knob.plan(self.ctx)
        if not plan.applicable:
            outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, plan.reason
            return config
        base = loader_batch(self.ctx.facts)
        best_value = None
        reasons = []
        ran, failed = base or 0, None  # the largest batch that ran, the smallest that did not
        pending, backoffs, tries = list(plan.values), 0, []
        while pending:
            value = pending.pop(0)
            trial_config = {**config, knob.name: value}
            label = f"+ {knob.describe(value)}"
            screened, why = self._screen(config, trial_config, label)
            if why is None:
                judgement, runs, _, why = self._paired(config, trial_config, label, screened)
                if why is None and judgement.decision != Decision.FASTER:
                    why = judgement.reason
            tried = self._batch_try(knob.name, value)
            tries.append(tried)
            if tried.outcome == "ok":
                ran = max(ran, value)
            elif self._out_of_memory(knob.name, value):
                failed = value if failed is None else min(failed, value)
            if why is None:
                best_value, config = value, trial_config
                self.result.ladder.append(self._rung(label, config, runs))
                if failed is None:
                    continue  # doubling: the plan's next value
            else:
                reasons.append(f"{knob.describe(value)}: {why}")
                if not self._out_of_memory(knob.name, value):
                    break  # ran but not faster (or crashed): a larger batch is not tried
            between = halfway(ran, failed) if ran else None
            if between is None or backoffs >= BACKOFF_STEPS:
                break
            pending, backoffs = [between], backoffs + 1
        if best_value is None:
            outcome.status, outcome.reason = KnobStatus.REJECTED, "; ".join(reasons)
        else:
            outcome.status, outcome.value = KnobStatus.KEPT, best_value
            outcome.reason = f"batch {best_value}; the learning rate may need scaling"
            if reasons:
                outcome.reason += f" (larger: {reasons[-1]})"
        if base:
            peaks = [r.peak_bytes for r in self._baseline_runs if r.peak_bytes]
            self.result.batch_check = batch_check.check(
                base, max(peaks) if peaks else None, tries, self.ctx.batch_headroom
            )
        return config

    def _out_of_memory(self, knob: str, value: int) -> bool:
        """A run of this batch size ran out of memory, or was killed by SIGKILL (the OOM
        killer's signal: a larger batch is the likeliest reason here)."""
        return any(
            r.outcome == Outcome.OUT_OF_MEMORY
            or (r.outcome == Outcome.KILLED and "SIGKILL" in (r.error or ""))
            for r in self.result.trials
            if r.config.get(knob) == value and not r.ok
        )

    def _batch_try(self, knob: str, value: int) -> batch_check.BatchTry:
        """What the runs of this batch size showed: ok when all ran, else the first
        failure's outcome; the most any of them held."""
        runs = [r for r in self.result.trials if r.config.get(knob) == value]
        failures = [r for r in runs if not r.ok]
        peaks = [r.peak_bytes for r in runs if r.ok and r.peak_bytes]
        return batch_check.BatchTry(
            batch=value,
            outcome=str(failures[0].outcome) if failures else "ok",
            peak_bytes=max(peaks) if peaks else None,
            trials=len(runs),
        )

    # --- 4b. processes per node, opt-in ----------------------------------------------
    def _processes_per_node(self, config: dict) -> dict:
        """A CPU job's process count (--nproc-per-node N, --allow-batch-size), on top of
        everything kept: each other count screened, the promising ones paired, the fastest
        confirmed kept. Compared on the whole job's samples per second (cost_ms: every
        rank's samples per step, tune/ranks.combine): the global batch changes with the
        count. A count's trials leave the threads knob out: its value was a thread count
        for each of N ranks, and the launcher gives each rank cores // count threads."""
        name = "nproc-per-node"
        outcome = self._outcome(name)
        if outcome is None:
            return config
        knob = get(name)
        plan = knob.plan(self.ctx)
        if not plan.applicable:
            opted_in = knob.plan(dataclasses.replace(self.ctx, allow_batch_size=True))
            if opted_in.applicable:  # it would apply: not tried without the flag
                outcome.reason = plan.reason
            else:
                outcome.status, outcome.reason = KnobStatus.NOT_APPLICABLE, opted_in.reason
            return config
        base = {k: v for k, v in config.items() if k != "threads"}
        left_out = "; threads per rank from the launcher" if base != config else ""
        reasons, promising = [], []
        for value in plan.values:
            result, why = self._screen(config, {**base, name: value}, f"+ {knob.describe(value)}")
            if why is None and not result.samples_per_step:
                why = "the job's samples per step were not counted: no comparable figure"
                self._verdict(result, why)
            if why is None:
                promising.append(result)
            else:
                reasons.append(f"{value} processes: {why}")
        confirmed = []
        for screened in sorted(promising, key=lambda r: -self._gains[id(r)]):
            value = screened.config[name]
            label = f"+ {knob.describe(value)}"
            judgement, runs, _, why = self._paired(config, screened.config, label, screened)
            if why is None and judgement.decision != Decision.FASTER:
                why = judgement.reason
            if why is None:
                confirmed.append((judgement, value, label, runs, screened.config))
            else:
                reasons.append(f"{value} processes: {why}")
        if not confirmed:
            outcome.status, outcome.reason = KnobStatus.REJECTED, "; ".join(reasons)
            return config
        judgement, value, label, runs, kept = max(confirmed, key=lambda c: c[0].estimate_pct)
        outcome.status, outcome.value = KnobStatus.KEPT, value
        outcome.gain_pct = judgement.mean_gain_pct
        outcome.reason = (
            f"{value} processes per node, in the job's samples/s: {judgement.reason}"
            f"{left_out}; the global batch changes with it"
        )
        self.result.ladder.append(self._rung(label, kept, runs))
        return kept

    # --- 5. the final check ----------------------------------------------------------
    def _final(self, config: dict) -> None:
        """The ladder's top against the script as it is, in pairs. Not faster: its last
        rung's knob is dropped and the rung below is checked, down the ladder (gpt.py: fused
        AdamW kept in two clear pairs, bf16 on top of it in two pairs just past the margin,
        and the pair fused + bf16 refused by the final check took fused AdamW with it)."""
        if not config:
            self.result.best = {}
            self.result.final_speedup = 1.0
            return
        first: Judgement | None = None
        while True:
            judgement, why, switched_runs = self._final_pairs(config)
            if why is not None:
                self.result.best = {}
                self.result.final_speedup = None
                self.result.stopped = "final-check-failed"
                return
            first = first or judgement
            if judgement.decision == Decision.FASTER:
                # the speedup, once: the paired estimate (Hodges-Lehmann over the final
                # pairs); every figure that shows it derives from this one (settle_figures)
                self.result.best = dict(config)
                self.result.final_speedup = round(1 + judgement.estimate_pct / 100, 3)
                self.result.final_gains_pct = list(judgement.gains_pct)
                self.result.final_switched_runs = switched_runs
                return
            config = self._drop_top_rung(config, judgement)
            if not config:  # never a configuration slower than (or no better than) the script
                self.result.best = {}
                self.result.final_speedup = round(1 + first.estimate_pct / 100, 3)
                self.result.final_gains_pct = list(first.gains_pct)
                return

    def _final_pairs(self, config: dict) -> tuple[Judgement, str | None, int]:
        """The final check of one configuration: at least two new pairs; pairs already run
        of this very comparison (a single kept knob: its own decision's) count. A single
        switchable knob is checked within processes (`_paired` hands it on, with its own
        decision's block pairs): the count of those processes is returned, else 0."""
        prior = [g for ref, cand, gains in self._decisions if ref == {} and cand == config
                 for g in gains]  # fmt: skip
        judgement, finals, bases, why = self._paired(
            {}, config, "final configuration", min_pairs=2, prior=prior
        )
        switched = bool(finals) and all(r.switched for r in finals)
        if why is None and (not finals or not (bases or switched)):
            why = "no run of the final check succeeded"
        return judgement, why, len(finals) if switched else 0

    def _drop_top_rung(self, config: dict, judgement: Judgement) -> dict:
        """The final check refused ``config``, the ladder's top: the knob its rung added
        leaves the configuration (refused, saying why); the rung below is next. A stop from
        here on keeps that rung (_best_so_far), never the refused one."""
        ladder = self.result.ladder
        if len(ladder) < 2 or ladder[-1].config != config:
            return {}  # not a rung of the ladder: nothing below it to fall back to
        top = ladder.pop()
        below = dict(ladder[-1].config) if len(ladder) > 1 else {}
        gains = ", ".join(f"{g:+.1f}%" for g in judgement.gains_pct)
        for name in [n for n in top.config if below.get(n, None) != top.config[n]]:
            outcome = self._outcome(name)
            if outcome is None:
                continue
            outcome.status = KnobStatus.REJECTED
            outcome.reason = (
                f"dropped by the final check: {top.label.removeprefix('+ ')} with every knob "
                f"below it was not faster than the script as it is ({gains}); on the ladder "
                f"it had read: {outcome.reason}"
            )
        return below

    # --- the figures, once ---------------------------------------------------------------
    def settle_figures(self) -> None:
        """Every figure the user reads, from one computation: the baseline's ms/step over all
        its runs; each rung's speedup against it; the last rung, when the final check ran,
        is the final check's paired speedup, and its ms/step (samples/s) is the baseline's
        divided (multiplied) by it, so that torchpace.toml's two numbers give its speedup."""
        result = self.result
        if self.fidelity is not None:  # filled in pair by pair: a stop or Ctrl-C keeps it
            result.fidelity = self.fidelity.to_dict()
        decided = [gains for _, _, gains in self._decisions]
        sd = stats.spread_of_pairs(decided) or self._spread_from_noise_runs()
        result.pair_sd_pct = sd
        result.detectable_pct = None if sd is None else stats.detectable_pct(sd)
        if not result.ladder:
            return
        base = result.ladder[0]
        if self._baseline_runs:  # every baseline run that was a reference, not only the first
            base.median_ms = round(statistics.median(r.ms_per_step for r in self._baseline_runs), 3)
            rates = [r.samples_per_s for r in self._baseline_runs if r.samples_per_s]
            base.samples_per_s = round(statistics.median(rates), 1) if rates else None
        base_cost = _rung_cost_ms(base)
        for below, rung in zip(result.ladder, result.ladder[1:], strict=False):
            if rung.switched_gain_pct is None:
                rung.speedup = round(base_cost / _rung_cost_ms(rung), 3)
                continue
            # measured against the rung below within each process: its figures are the
            # rung below's, times that gain (the processes' own speeds cancel in it)
            factor = 1 + rung.switched_gain_pct / 100
            rung.speedup = round(below.speedup * factor, 3)
            rung.median_ms = round(below.median_ms / factor, 3)
            if below.samples_per_s:
                rung.samples_per_s = round(below.samples_per_s * factor, 1)
        last = result.ladder[-1]
        final = result.final_speedup
        if final and len(result.ladder) > 1 and last.config == result.best and result.best:
            last.speedup = final
            same_batch = not {"batch-size", "nproc-per-node"} & set(last.config)
            if same_batch or not base.samples_per_s:
                last.median_ms = round(base.median_ms / final, 3)
            if base.samples_per_s:
                last.samples_per_s = round(base.samples_per_s * final, 1)
        figures = {"baseline_ms_per_step": base.median_ms}
        if base.samples_per_s:
            figures["baseline_samples_per_s"] = base.samples_per_s
        if result.best and last.config == result.best:
            figures["tuned_ms_per_step"] = last.median_ms
            if last.samples_per_s:
                figures["tuned_samples_per_s"] = last.samples_per_s
            figures["speedup"] = last.speedup
        if result.noise is not None and result.noise.pct is not None:
            figures["noise_pct"] = result.noise.pct
        if result.detectable_pct is not None:
            figures["detectable_pct"] = result.detectable_pct
        result.figures = figures

    def _spread_from_noise_runs(self) -> float | None:
        """Before any pair: the back-to-back baselines' spread, as a pair's (sqrt 2 runs)."""
        medians = self.result.noise.medians_ms if self.result.noise else ()
        if len(medians) < 2:
            return None
        logs = [math.log(m) for m in medians]
        return round(100 * math.sqrt(2) * statistics.stdev(logs), 2)

    # --- helpers ---------------------------------------------------------------------
    def _trial(self, config: dict, label: str, switch: str = "") -> TrialResult:
        index = len(self.result.trials)
        if index >= self.budget.trials:
            raise Stop("budget")
        self._check_time(config, switch)
        self.progress.trial_started(index, label)
        out = self.run_dir / "trials" / f"{index:02d}"
        settings = drained(self.settings, config)
        if switch:
            steps = BLOCK_PAIRS * self._block_steps_that_fit(settings)
            order = self._order.randrange(2**31)  # each process its own order of sides
            settings = dataclasses.replace(settings, switch=switch, steps=steps, switch_seed=order)
        # a trial far slower than its expected time (a neighbour took the machine: 1 s
        # steps where 15 ms were expected, 119 s for one trial) is stopped where the time
        # budget ends, not after it
        left = self.seconds_left()
        cut = left is not None and (settings.timeout_s is None or left < settings.timeout_s)
        if cut:
            settings = dataclasses.replace(settings, timeout_s=max(1.0, left))
        result = run_trial(settings, config, label, out)
        self.result.trials.append(result)
        if result.ok and not switch and len(result.step_ms) < settings.steps:
            ended = result.measured_from + len(result.step_ms)  # the script's last step
            self._script_steps = min(ended, self._script_steps or ended)
        self.result.files.merge(FilesTouched.from_dict(result.files))
        if result.files.get("refused"):  # a file whose original could not be saved first
            self._verdict(result, "stopped: a write was refused (your files, below)")
            raise Stop("files")
        if cut and result.outcome == Outcome.TIMEOUT:
            self._verdict(result, "stopped: the time budget ran out during it")
            raise Stop("time-budget")
        if result.outcome == Outcome.INTERRUPTED:
            self._verdict(result, "interrupted (Ctrl-C)")
            raise Stop("interrupted")
        if result.stop_asked:  # it completed before the interrupt: kept, and tune stops
            self._verdict(result, "completed; then interrupted (Ctrl-C or SIGTERM)")
            raise Stop("interrupted")
        return result

    def seconds_left(self) -> float | None:
        """What the time budget leaves now; None without one."""
        if self.budget.seconds is None:
            return None
        return self.budget.seconds - (self._clock() - self._started)

    def _check_time(self, config: dict, switch: str = "") -> None:
        """Stop("time-budget") where a run of this configuration would not end within it."""
        if self.budget.seconds is not None:
            elapsed = self._clock() - self._started
            expected = self.expected_s(config, switch)
            if elapsed + TRIAL_TIME_MARGIN * expected > self.budget.seconds:
                raise Stop("time-budget")

    def expected_s(self, config: dict, switch: str = "") -> float:
        """How long the next trial of this configuration should take: the median of its
        earlier trials (switched or not, as this one), else of every trial since the steps
        were calibrated, scaled to a switched trial's steps where this one is."""
        timed = [r for r in self.result.trials[1:] if r.wall_s]
        same = [r.wall_s for r in timed if r.config == config and bool(r.switch) == bool(switch)]
        if same:
            return statistics.median(same)
        if not timed:
            return 0.0
        ordinary = [r.wall_s for r in timed if not r.switch] or [r.wall_s for r in timed]
        expected = statistics.median(ordinary)
        if switch:  # as many seconds a step as an ordinary trial, for its longer plan
            per_block = self._block_steps_that_fit(drained(self.settings, config))
            steps = self.settings.warmup + self.settings.steps
            switched = 2 * BLOCK_PAIRS * (SETTLE_STEPS + per_block)
            expected *= (self.settings.warmup + switched) / steps
        return expected

    def _index(self, result: TrialResult) -> int:
        """By identity: two failed runs with the same error are equal dataclasses."""
        return next(i for i, t in enumerate(self.result.trials) if t is result)

    def _verdict(self, result: TrialResult, verdict: str) -> None:
        index = self._index(result)
        self.result.verdicts[index] = verdict
        best = self.result.ladder[-1].speedup if self.result.ladder else 1.0
        self.progress.trial_done(result, verdict, best)

    def _reject_reason(self, result: TrialResult) -> str | None:
        if not result.ok:
            named = exception_line(result.error or "")
            return f"{result.outcome}" + (f" ({named})" if named else "")
        steps = self._baseline_steps  # the same steps, whatever each trial's warm-up
        baseline = self._loss_reference.losses_at(steps)
        loss = check_loss(result.losses_at(steps), baseline, self.loss_tolerance)
        return None if loss.ok else loss.reason

    def _outcome(self, name: str) -> KnobOutcome | None:
        return next((k for k in self.result.knobs if k.knob == name), None)

    def _rung(self, label: str, config: dict, runs: list[TrialResult]) -> Rung:
        runs = [r for r in runs if r.ok]
        median_ms = statistics.median(r.ms_per_step for r in runs)
        per_sample = [r.samples_per_s for r in runs if r.samples_per_s]
        own = statistics.median(cost_ms(r) for r in runs)
        base = self._baseline_ms if self._baseline_runs else own
        peaks = [r.peak_bytes for r in runs if r.peak_bytes]
        return Rung(
            label=label,
            config=dict(config),
            median_ms=round(median_ms, 3),
            samples_per_s=round(statistics.median(per_sample), 1) if per_sample else None,
            speedup=round(base / own, 3),
            peak_bytes=max(peaks) if peaks else None,
            changes_numerics=any(get(k).changes_numerics for k in config),
        )

    def _limit(self, why: str) -> str:
        if why in ("budget", "time-budget"):
            return self.budget.says(why)
        return {"interrupted": "Ctrl-C", "fidelity": "the fidelity check",
                "files": "a file's original could not be saved"}.get(why, why)  # fmt: skip

    def _close_undecided(self, why: str) -> None:
        """A knob whose trials ran and that was not decided when the tune stopped (the one
        being decided, and those screened and waiting): it is not "not tried"."""
        limit = self._limit(why)
        for outcome in self.result.knobs:
            if outcome.status != KnobStatus.NOT_TRIED:
                continue
            ran = [i for i, r in enumerate(self.result.trials) if outcome.knob in r.config]
            if not ran:
                continue
            outcome.status = KnobStatus.UNDECIDED
            shown = ", ".join(str(i) for i in ran)
            outcome.reason = f"undecided: {limit} stopped the tune during its trials ({shown})"

    def _close_untried(self, why: str) -> None:
        seen = {k.knob for k in self.result.knobs}
        limit = self._limit(why)
        for outcome in self.result.knobs:
            if outcome.status == KnobStatus.NOT_TRIED and not outcome.reason:
                outcome.reason = f"not tried: {limit}"
        for name in NAMES:
            if name not in seen and (self.only is None or name in self.only):
                knob = get(name)
                status, reason = self._untried(knob, limit)
                self.result.knobs.append(
                    KnobOutcome(
                        name,
                        status,
                        reason,
                        changes_numerics=knob.changes_numerics,
                        answers=list(knob.answers),
                    )
                )

    def _untried(self, knob: Knob, limit: str) -> tuple[KnobStatus, str]:
        """A knob the tune never reached: planned all the same (a plan reads the doctor's
        facts, it runs nothing), so that one that could not apply here says why instead of
        "not tried" (DDP's knobs on a single-process script, the batch size without its
        flag): "not tried" is kept for what the limit really cost."""
        if knob.opt_in == "--allow-batch-size" and not self.ctx.allow_batch_size:
            return KnobStatus.NOT_TRIED, "changes training: tried only with --allow-batch-size"
        try:
            plan = knob.plan(self.ctx)
        except Exception:  # a plan that fails here is the trial's to report, not the stop's
            return KnobStatus.NOT_TRIED, f"not tried: {limit}"
        if not plan.applicable:
            return KnobStatus.NOT_APPLICABLE, plan.reason
        return KnobStatus.NOT_TRIED, f"not tried: {limit}"


def drained(settings: TrialSettings, config: dict) -> TrialSettings:
    """Loader workers fill a buffer (workers x prefetch batches) during the warm-up; timed
    steps that drain it are faster than the steady state a training run lives in. Warm up
    long enough to empty it, so that a data-bound loop is measured at its real speed."""
    workers = config.get("num-workers", 0)
    if isinstance(workers, dict):  # a value per loader: the largest buffer to drain
        workers = max(workers.values(), default=0)
    if not workers:
        return settings
    buffered = workers * config.get("prefetch-factor", 2)
    return dataclasses.replace(settings, warmup=settings.warmup + buffered)


def calibrated_steps(first: TrialResult, asked: int) -> int:
    """Timed steps that make a run's median stable to about STABLE_MEDIAN_PCT (pyperf
    calibrates its loops the same way): from the first run's own step jitter (the IQR as a
    standard deviation, 1.35 of them), the standard error of a median being 1.25 sd /
    sqrt(K); at least what was asked, at most MAX_CALIBRATED_STEPS or MAX_TIMED_S of steps."""
    steps = sorted(first.step_ms)
    if len(steps) < 4 or not first.ms_per_step:
        return asked
    q = statistics.quantiles(steps, n=4)
    sd_pct = 100 * (q[2] - q[0]) / 1.35 / first.ms_per_step
    wanted = math.ceil((1.25 * sd_pct / STABLE_MEDIAN_PCT) ** 2)
    by_time = int(MAX_TIMED_S * 1000 / first.ms_per_step)
    return max(asked, min(wanted, MAX_CALIBRATED_STEPS, by_time))


def _at_assured(outcome: KnobOutcome) -> str:
    """The payback's gain in words, where it is not the estimate."""
    assured = outcome.assured_gain_pct
    if assured is None or outcome.gain_pct is None or assured >= outcome.gain_pct:
        return ""
    return f" at {assured:+.1f}% a step, the least its pairs assure"


def _payback_steps(one_time_s: float, ms_per_step: float, gain_pct: float) -> int:
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


def _rung_cost_ms(rung: Rung) -> float:
    if rung.samples_per_s:
        return 1000 / rung.samples_per_s
    return rung.median_ms
