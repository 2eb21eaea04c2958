"""The tune's evidence, in one place: every trial in order, what each decided, each run's gain
over its paired reference, the runs set aside as disturbed, the baseline's runs, the
decisions' pairs (their spread sets the clear margin), and the budget's clock. Every part of
the search (baseline.py, compare.py, ladder.py, payback.py, batch_finder.py, processes.py,
final.py, figures.py) reads and adds to the ledger it is given; none keeps evidence of its
own.

It also runs the trials (`Ledger.trial`: the one place a trial starts, where the budget is
checked and a stop is raised) and holds what was decided so far: the ladder's rungs and each
knob's outcome, which the later parts build on.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from torchpace import knobs as registry
from torchpace.capture.file_restore import FilesTouched
from torchpace.capture.outcome import exception_line
from torchpace.capture.signals import interrupt_name
from torchpace.capture.switching import BLOCK_PAIRS, SETTLE_STEPS
from torchpace.tune import noise as stats
from torchpace.tune.loss_check import check_loss
from torchpace.tune.noise import Noise
from torchpace.tune.options import DEFAULT_TRIALS
from torchpace.tune.result import KnobOutcome, Rung
from torchpace.tune.switched import block_steps_that_fit
from torchpace.tune.trial import (
    Outcome,
    TrialResult,
    TrialSettings,
    applied_config,
    run_trial,
)

BASELINE = "baseline"
# The final check's fewest pairs (final.py), held back from the budget during the search.
FINAL_PAIRS = 2
# A trial is not started when the time budget would not hold it: its expected time (the
# median of its configuration's trials, else of all trials) times this.
TRIAL_TIME_MARGIN = 1.1
# beyond its expected time and the job's steps, what a trial of a knob that pays once is
# given before it is stopped as not repayable: a slow start is not a compilation
REPAY_CAP_SLACK_S = 5.0


@dataclass(frozen=True)
class Budget:
    trials: int = DEFAULT_TRIALS
    seconds: float | None = None
    default_seconds: bool = False  # the time is the default end, not a --time-budget given
    default_trials: bool = False  # the trials are the default's, not a --budget given

    def says(self, why: str) -> str:
        """The limit that stopped a tune, as the user gave it."""
        if why == "time-budget" and self.default_seconds:
            return f"the default {self.seconds:.0f} s time budget (--time-budget S to change it)"
        if why == "time-budget":
            return f"--time-budget {self.seconds:g} s"
        if self.default_trials:
            return f"the default {self.trials} trials (--budget N to change it)"
        return f"--budget {self.trials} trials"


class Progress(Protocol):
    def trial_started(self, index: int, label: str) -> None: ...
    def trial_done(self, result: TrialResult, verdict: str, best_speedup: float) -> None: ...


class Stop(Exception):
    """A limit or the user ended the search: search.Tuner.run's one stop path takes it."""

    def __init__(self, why: str):
        super().__init__(why)
        self.why = why


def cost_ms(result: TrialResult) -> float:
    """What is compared: time per sample when the batch size is known (so a bigger batch
    compares fairly), else time per step."""
    if result.samples_per_step:
        return result.ms_per_step / result.samples_per_step
    return result.ms_per_step


def loader_workers(config: dict, script_workers: int = 0) -> int:
    """The most workers a DataLoader runs with under ``config``: its num-workers (a value,
    or one per loader's line), else the script's own (``script_workers``)."""
    workers = config.get("num-workers", script_workers)
    if isinstance(workers, dict):
        return max(workers.values(), default=0)
    return int(workers)


def drained(settings: TrialSettings, config: dict) -> TrialSettings:
    """Loader workers fill a buffer (workers x prefetch batches) during the warm-up; timed
    steps that drain it are faster than the steady state a training run lives in. Warm up
    long enough to empty it, so that a data-bound loop is measured at its real speed."""
    workers = loader_workers(config)  # a value per loader: the largest buffer to drain
    if not workers:
        return settings
    buffered = workers * config.get("prefetch-factor", 2)
    return dataclasses.replace(settings, warmup=settings.warmup + buffered)


def two_pairs(ledger: Ledger, config: dict) -> tuple[int, float]:
    """The final check's fewest runs as processes in pairs: FINAL_PAIRS of ``config`` and
    of the script as it is, in trials and expected seconds."""
    seconds = FINAL_PAIRS * (ledger.expected_s({}) + ledger.expected_s(config))
    return 2 * FINAL_PAIRS, seconds


class Ledger:
    def __init__(
        self,
        settings: TrialSettings,
        run_dir: Path,
        progress: Progress,
        budget: Budget,
        clock: Callable[[], float],
        started: float,
        loss_tolerance: float,
        job_steps: int | None,
    ):
        # how every trial runs; its steps change once, when the baseline calibrates them
        # (`use_settings`)
        self.settings = settings
        self.run_dir = run_dir
        self.progress = progress
        self.budget = budget
        self.loss_tolerance = loss_tolerance
        self.job_steps = job_steps  # --job-steps: the real job's length, None: unknown
        # the most workers a DataLoader of the script runs with (the doctor's facts): what a
        # configuration without num-workers runs (Knob.switches_beside_workers)
        self.script_workers = 0
        self._clock = clock
        self._started = started
        # the order of each pair: drawn, but the same for the same seed (a tune reproduces)
        self.order = random.Random(settings.seed if settings.seed is not None else 0)
        self.trials: list[TrialResult] = []
        self.verdicts: dict[int, str] = {}  # trial index -> what it decided
        self.files = FilesTouched()  # what the runs wrote outside the run folder (undone)
        self.noise: Noise | None = None  # the back-to-back baselines', then the pairs' spread
        self.loss_reference: TrialResult | None = None  # the first baseline run
        self.baseline_runs: list[TrialResult] = []  # every baseline run that was a reference
        self.gains: dict[int, float] = {}  # id(trial) -> its gain over its paired reference
        # id(trial) -> the gains of earlier pairs of the same screening (a second look)
        self.prior_gains: dict[int, list[float]] = {}
        self.disturbed: set[int] = set()  # id(trial) of runs left out as disturbed
        # every decision: (reference, candidate, its gains); the pairs' spread, and the final
        # check's earlier evidence
        self.decisions: list[tuple[dict, dict, list[float]]] = []
        # the same for switched comparisons: block pairs within processes, whose spread is
        # not the pairs' of processes (kept apart from it)
        # (reference, candidate, block pairs' gains, processes)
        self.switched_decisions: list[tuple[dict, dict, list[float], int]] = []
        self.not_switched: dict[str, str] = {}  # knob -> why its trials could not switch it
        # the script's own length in steps, once a trial ended before its timed steps: a
        # switched trial's blocks are made to fit it (`block_steps_that_fit`)
        self.script_steps: int | None = None
        # the steps the script ran past its cold run's run-on (it runs at least this many):
        # said where the job's length is unknown
        self.script_runs_past: int | None = None
        # the first finding's screens of its knob's values on the script as it is, before the
        # noise runs (suspect.py): the ladder's screens of that knob when it was not kept
        self.first_finding_screens: list[TrialResult] = []
        # id(trial) -> why it was stopped early: a one-time cost past what the job repays
        self.not_repayable: dict[int, str] = {}
        # what was decided so far: the ladder (the baseline, then each kept knob) and each
        # knob's outcome
        self.ladder: list[Rung] = []
        self.knobs: list[KnobOutcome] = []
        # while the search runs, what the final check of the ladder's top needs is held
        # back from the budget (`final_hold`): a limit ends the search, not the check. With
        # the default end the search met it in 3 of 5 tune_noise runs (session 13), and tune
        # returned the ladder's top unchecked against the script as it is. What the check
        # needs is final.py's to say (`final_needs`, set by the Tuner); until then, two
        # pairs of processes
        self.holding_for_final = True
        self.final_needs: Callable[[Ledger, dict], tuple[int, float]] = two_pairs

    # --- running a trial, within the budget ----------------------------------------------
    def trial(
        self, config: dict, label: str, switch: str = "", run_on_s: float = 0.0,
        arms: tuple = (),
    ) -> TrialResult:  # fmt: skip
        """Runs one trial and records it; Stop when a limit is reached before or during it,
        or the user interrupted it. ``run_on_s``: after its timed steps the script runs on
        for at most this long, to show where it ends by itself (the job's length).
        ``arms``: (knob, value) pairs, when several share the process (``config`` holds
        each knob's first value): ``trial_arms``."""
        index = len(self.trials)
        if self.trials_left() <= 0:
            raise Stop("budget")
        self.check_time(config, switch, arms_in(arms))
        self.progress.trial_started(index, label)
        out = self.run_dir / "trials" / f"{index:02d}"
        settings = drained(self.settings, config)
        if run_on_s:
            settings = dataclasses.replace(settings, run_on_s=run_on_s)
        if switch:
            steps = BLOCK_PAIRS * self.block_steps_that_fit(settings, arms_in(arms))
            order = self.order.randrange(2**31)  # each process its own order of sides
            settings = dataclasses.replace(
                settings, switch=switch, steps=steps, switch_seed=order, arms=tuple(arms)
            )
        # a trial far slower than its expected time (a neighbour took the machine: 1 s
        # steps where 15 ms were expected, 119 s for one trial) is stopped where the time
        # budget ends, not after it
        left = self.seconds_left()
        cut = left is not None and (settings.timeout_s is None or left < settings.timeout_s)
        if cut:
            settings = dataclasses.replace(settings, timeout_s=max(1.0, left))
        # a one-time cost longer than the whole job's steps can never be repaid: stopped there
        repay_cap = self.repay_cap_s(config, switch, arms_in(arms))
        capped = repay_cap is not None and (
            settings.timeout_s is None or repay_cap < settings.timeout_s
        )
        if capped:
            settings = dataclasses.replace(settings, timeout_s=repay_cap)
        result = run_trial(settings, config, label, out)
        self.trials.append(result)
        if capped and result.outcome == Outcome.TIMEOUT:
            self.not_repayable[id(result)] = (
                f"not repaid within the job: stopped after {repay_cap:.0f} s, its one-time "
                f"cost already more than every step of the job takes "
                f"({self._job_step_s():.1f} s: {self.job_length()[1]})"
            )
        if result.ok and not switch and len(result.step_ms) < settings.steps:
            ended = result.measured_from + len(result.step_ms)  # the script's last step
            self.script_steps = min(ended, self.script_steps or ended)
        elif result.ok and result.script_steps is not None:  # it ran on past its timed steps
            if result.script_ended:
                steps = result.script_steps
                self.script_steps = min(steps, self.script_steps or steps)
            else:
                self.script_runs_past = max(result.script_steps, self.script_runs_past or 0)
        self.files.merge(FilesTouched.from_dict(result.files))
        if result.files.get("refused"):  # a file whose original could not be saved first
            self.verdict(result, "stopped: a write was refused (your files, below)")
            raise Stop("files")
        if cut and not capped and result.outcome == Outcome.TIMEOUT:
            self.verdict(result, "stopped: the time budget ran out during it")
            raise Stop("time-budget")
        if result.outcome == Outcome.INTERRUPTED:
            self.verdict(result, f"interrupted ({interrupt_name()})")
            raise Stop("interrupted")
        if result.stop_asked:  # it completed before the interrupt: kept, and tune stops
            self.verdict(result, f"completed; then interrupted ({interrupt_name()})")
            raise Stop("interrupted")
        return result

    def trial_arms(
        self, reference: dict, arms: list[tuple[str, object]], labels: list[str]
    ) -> list[TrialResult]:
        """Several (knob, value) pairs screened in one process on top of ``reference``, an
        arm each (capture/switching.py): a result per pair, in order, each of its own
        configuration (``reference`` and the pair). The first is the trial; the others are
        recorded after it as results of their own (``arm_of``: its index), with no time of
        their own. A process that failed, or could not switch, gives the first alone."""
        config = applied_config(reference, arms)
        first = self.trial(config, labels[0], arms[0][0], arms=tuple(arms))
        index = self.index(first)
        results = [first]
        for other, name in zip(first.other_arms, labels[1:], strict=False):
            other.label, other.arm_of, other.wall_s = name, index, 0.0
            self.trials.append(other)
            results.append(other)
        first.other_arms = []
        return results

    def process_of(self, run: TrialResult) -> list[TrialResult]:
        """The results of the process ``run`` ran in: itself, or every arm of that process
        (trial_arms), the first first."""
        first = run if run.arm_of is None else self.trials[run.arm_of]
        at = next((i for i, t in enumerate(self.trials) if t is first), None)
        if at is None:  # not a trial of this ledger's
            return [run]
        return [first, *(t for t in self.trials if t.arm_of == at)]

    def use_settings(self, settings: TrialSettings) -> None:
        """The trials' settings from here on (the baseline's calibrated steps)."""
        self.settings = settings

    def block_steps_that_fit(self, settings: TrialSettings, arms: int = 2) -> int:
        """Timed steps per block of a switched trial of ``arms`` arms, fitted to the job
        (--job-steps) and to the script's own length (a trial that ended first):
        switched.block_steps_that_fit."""
        lengths = [n for n in (self.job_steps, self.script_steps) if n is not None]
        return block_steps_that_fit(settings.steps, settings.warmup, lengths, arms)

    def repay_cap_s(self, config: dict, switch: str = "", arms: int = 2) -> float | None:
        """The longest a trial of a knob that pays once (``Knob.pays_once``: compilation)
        may take: its expected time plus every step of the job (were the knob to make a
        step free, it could save no more). None: no such knob, or the job's length or
        step time unknown."""
        if not any(registry.get(name).pays_once for name in config if name in registry.NAMES):
            return None
        job_s = self._job_step_s()
        expected = self.expected_s(config, switch, arms)
        if job_s is None or not expected:
            return None
        return TRIAL_TIME_MARGIN * expected + job_s + REPAY_CAP_SLACK_S

    def _job_step_s(self) -> float | None:
        """Every step of the job at the baseline's speed, in seconds."""
        job = self.job_length()
        ms = [r.ms_per_step for r in self.baseline_runs if r.ok and r.ms_per_step]
        if job is None or not ms:
            return None
        return job[0] * statistics.median(ms) / 1000

    def job_length(self) -> tuple[int, str] | None:
        """The job's length in steps and, in words, where it comes from: --job-steps, else
        the script's own end once a trial saw it (the script as given is the job: the
        quick-start's example ends after 32 steps, and 35 s of compilation can never be
        repaid within them). None: unknown (the script runs past every trial)."""
        if self.job_steps is not None:
            return self.job_steps, f"the job runs {self.job_steps:,} (--job-steps)"
        if self.script_steps is not None:
            return self.script_steps, (
                f"the script ends by itself after {self.script_steps:,} steps (--job-steps "
                "N for a longer job)"
            )
        return None

    def seconds_left(self) -> float | None:
        """What the time budget leaves now, less what the final check is held (during the
        search); None without one."""
        if self.budget.seconds is None:
            return None
        return self.budget.seconds - (self._clock() - self._started) - self.final_hold()[1]

    def trials_left(self) -> int:
        """The trials the budget leaves now, less the final check's (during the search)."""
        return self.budget.trials - len(self.trials) - self.final_hold()[0]

    def final_hold(self) -> tuple[int, float]:
        """What the final check of the ladder's top needs at the fewest (`final_needs`), in
        trials and expected seconds, while the search holds it back; nothing before a rung
        is kept or once the check runs."""
        if not self.holding_for_final or len(self.ladder) < 2:
            return 0, 0.0
        trials, seconds = self.final_needs(self, self.ladder[-1].config)
        return trials, TRIAL_TIME_MARGIN * seconds

    def elapsed_s(self) -> float:
        return self._clock() - self._started

    def check_time(self, config: dict, switch: str = "", arms: int = 2) -> None:
        """Stop("time-budget") where a run of this configuration would not end within it."""
        left = self.seconds_left()
        if left is not None and TRIAL_TIME_MARGIN * self.expected_s(config, switch, arms) > left:
            raise Stop("time-budget")

    def expected_s(self, config: dict, switch: str = "", arms: int = 2) -> float:
        """How long the next trial of this configuration should take: the median of its
        earlier trials (switched or not, as this one), else of every trial since the steps
        were calibrated, scaled to a switched trial's steps (of ``arms`` arms) where this
        one is."""
        timed = [r for r in self.trials[1:] if r.wall_s]
        same = [r.wall_s for r in timed if r.config == config and bool(r.switch) == bool(switch)]
        if same and arms == 2:
            return statistics.median(same)
        if not timed:
            return 0.0
        ordinary = [r.wall_s for r in timed if not r.switch] or [r.wall_s for r in timed]
        expected = statistics.median(ordinary)
        if switch:  # as many seconds a step as an ordinary trial, for its longer plan
            per_block = self.block_steps_that_fit(drained(self.settings, config), arms)
            steps = self.settings.warmup + self.settings.steps
            switched = arms * BLOCK_PAIRS * (SETTLE_STEPS + per_block)
            expected *= (self.settings.warmup + switched) / steps
        return expected

    # --- what each trial decided ----------------------------------------------------------
    def index(self, result: TrialResult) -> int:
        """By identity: two failed runs with the same error are equal dataclasses."""
        return next(i for i, t in enumerate(self.trials) if t is result)

    def verdict(self, result: TrialResult, verdict: str) -> None:
        self.verdicts[self.index(result)] = verdict
        best = self.ladder[-1].speedup if self.ladder else 1.0
        self.progress.trial_done(result, verdict, best)

    def reject_reason(self, result: TrialResult) -> str | None:
        """Why a run is no candidate: stopped as not repayable, its losses left the
        baseline's, or it failed."""
        if id(result) in self.not_repayable:
            return self.not_repayable[id(result)]
        if result.ok:
            steps = self.loss_reference.measured_steps  # the same steps, whatever the warm-up
            baseline = self.loss_reference.losses_at(steps)
            loss = check_loss(result.losses_at(steps), baseline, self.loss_tolerance)
            return None if loss.ok else loss.reason
        named = exception_line(result.error or "")
        return f"{result.outcome}" + (f" ({named})" if named else "")

    def usable(self, result: TrialResult) -> bool:
        return result.ok and result is not self.loss_reference and id(result) not in self.disturbed

    def latest_ms(self, config: dict) -> float:
        """The cost of this configuration's most recent successful run: the fairest reference
        for the next trial, being the nearest to it in time."""
        for result in reversed(self.trials):
            if result is self.loss_reference or id(result) in self.disturbed:
                continue  # the cold first run, and disturbed runs, are no one's reference
            if result.ok and result.config == config and self.reject_reason(result) is None:
                return cost_ms(result)
        raise LookupError(f"no successful run of {config}")

    def note_baseline(self, result: TrialResult) -> None:
        if result.ok:
            self.baseline_runs.append(result)

    def record_decision(self, reference: dict, config: dict, gains: list[float]) -> None:
        """A decision's pairs, kept for the spread and the final check; once they measure
        the pairs' spread (PAIRS_FOR_SPREAD pairs in decisions of two or more), the clear
        margin follows it (noise.Noise.clear_pct)."""
        self.decisions.append((reference, config, gains))
        noise = self.noise
        decided = [g for _, _, g in self.decisions if len(g) >= 2]
        if noise is None or sum(len(g) for g in decided) < stats.PAIRS_FOR_SPREAD:
            return
        sd = stats.spread_of_pairs(decided)
        if sd is not None:
            self.noise = dataclasses.replace(noise, pair_sd_pct=sd)

    @property
    def clear_pct(self) -> float:
        """The margin a single pair's gain must pass to be clear."""
        return self.noise.clear_pct if self.noise else 2 * stats.MIN_GAIN_PCT

    # --- what was decided so far ----------------------------------------------------------
    def outcome(self, name: str) -> KnobOutcome | None:
        return next((k for k in self.knobs if k.knob == name), None)

    @property
    def kept(self) -> dict:
        """The configuration of every knob kept so far: the ladder's top rung."""
        return dict(self.ladder[-1].config) if len(self.ladder) > 1 else {}

    @property
    def baseline_ms(self) -> float:
        return statistics.median(cost_ms(r) for r in self.baseline_runs)

    def rung(self, label: str, config: dict, runs: list[TrialResult]) -> Rung:
        runs = [r for r in runs if r.ok]
        median_ms = statistics.median(r.ms_per_step for r in runs)
        per_sample = [r.samples_per_s for r in runs if r.samples_per_s]
        own = statistics.median(cost_ms(r) for r in runs)
        base = self.baseline_ms if self.baseline_runs else own
        peaks = [r.peak_bytes for r in runs if r.peak_bytes]
        return Rung(
            label=label,
            config=dict(config),
            median_ms=round(median_ms, 3),
            samples_per_s=round(statistics.median(per_sample), 1) if per_sample else None,
            speedup=round(base / own, 3),
            peak_bytes=max(peaks) if peaks else None,
            changes_numerics=any(registry.get(k).changes_numerics for k in config),
        )


def arms_in(values: tuple) -> int:
    """A switched trial's arms: the script's own setting and each value (one by default)."""
    return 1 + max(1, len(values))


def label(config: dict) -> str:
    """A configuration in words: "baseline", or each knob's value joined by " + "."""
    if not config:
        return BASELINE
    return " + ".join(registry.get(name).describe(value) for name, value in config.items())
