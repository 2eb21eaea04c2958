"""One trial: the user's unmodified script in a fresh process, a configuration of knobs
applied, timed without the profiler (the profiler distorts step times).

A trial is a capture in TIMING mode (capture/runner.py: the same child as the doctor's):
W warm-up steps, then K measured steps, each step's loss read after the timing. Whatever
happens (a crash, out of memory, a hang, a failed compilation) comes back as a TrialResult
with its status and error text; tune goes on.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path

from torchpace import run_files
from torchpace.capture.job import capture_job
from torchpace.capture.spec import CaptureSpec, Mode, StepOn
from torchpace.capture.switching import arm_gains
from torchpace.facts.run import RunFacts, Status, StepPhase, StepRecord
from torchpace.knobs.nproc_per_node import from_config as processes_in
from torchpace.stats import trimmed_mean
from torchpace.tune import load

# In each trial's folder: the script's stdout and stderr in that trial.
OUTPUT_NAME = run_files.SCRIPT_OUTPUT


class Outcome(str, Enum):
    OK = "ok"
    CRASHED = "crashed"  # the script raised or exited before K steps
    OUT_OF_MEMORY = "out-of-memory"
    COMPILE_FAILED = "compile-failed"
    TIMEOUT = "timeout"
    KILLED = "killed"  # by a signal (SIGSEGV, SIGKILL...): its error names which
    INTERRUPTED = "interrupted"  # Ctrl-C

    def __str__(self) -> str:
        return self.value


def run_ms_per_step(step_ms: list[float]) -> float | None:
    """One run's time per step: the mean of its timed steps less the fastest and the slowest
    tenth (one each from 5 steps). The mean, not the median: the job's time is the sum of its
    steps, and loader workers deliver in bursts (a 2-worker run's steps read 35.8, 1.5, 49.8,
    6.0, 55.5, 1.4 ms: median 20.9, mean 25.0), where the median of a few steps lands
    anywhere between the two modes. Trimmed: one step disturbed by another process does not
    move it."""
    if not step_ms:
        return None
    cut = max(1, len(step_ms) // 10) if len(step_ms) >= 5 else 0
    return trimmed_mean(step_ms, cut)


@dataclass(frozen=True)
class TrialSettings:
    """How every trial of one tune runs the script (same for all, so they compare)."""

    target: str
    args: list[str]
    is_module: bool = False
    warmup: int = 3
    steps: int = 10
    step_on: StepOn = StepOn.OPTIMIZER
    seed: int | None = 0
    timeout_s: float | None = None
    nproc_per_node: int = 1  # >1: each trial is the whole job on N ranks (capture/job.py)
    # the tune's run folder: every trial's writes outside it are put back after the trial
    # (capture/file_guard.py); "" leaves the user's files unguarded
    run_root: str = ""
    # a knob of the trial's configuration switched on and off in blocks of its timed steps,
    # against the script's own setting in the same process (capture/switching.py); "": none
    switch: str = ""
    switch_seed: int = 0  # which side leads its block pairs: drawn per trial by the search
    # several arms in the process, a (knob, value) pair each (capture/switching.py): the
    # configuration holds each knob's first value; (): the switched knob's one value
    arms: tuple = ()
    # after the timed steps, the script runs on for at most this many seconds to show where
    # it ends by itself (the cold run's: tune/baseline.py); 0: stopped at the timed steps
    run_on_s: float = 0.0


@dataclass
class TrialResult:
    label: str  # "baseline", "num-workers=2", "combined: ..."
    config: dict  # knob name -> value
    outcome: Outcome
    step_ms: list[float] = field(default_factory=list)  # the measured steps' wall times
    warmup_ms: list[float] = field(default_factory=list)
    # the loss of each step that recorded one, warm-up included: step index -> loss
    losses: dict[int, float] = field(default_factory=dict)
    measured_from: int = 0  # the step index of the first measured step
    samples_per_step: float | None = None
    # CUDA peak allocated, or the main process's peak resident memory (VmHWM; the most RSS
    # at a step's end for captures without it)
    peak_bytes: int | None = None
    peak_kind: str = ""  # "cuda" or "rss"
    error: str | None = None
    wall_s: float = 0.0  # the whole trial, process start to end
    out_dir: str = ""
    knob_details: list[str] = field(default_factory=list)  # what each knob did
    # other processes' CPU use while it ran, in cores (tune/load.py); None: unknown
    others_cores: float | None = None
    cores: int | None = None  # the CPUs it could run on, of which others_cores were used
    files: dict = field(default_factory=dict)  # FilesTouched.to_dict(): what it wrote, undone
    stop_asked: bool = False  # Ctrl-C or SIGTERM came during it (it may have completed first)
    # knob name -> why its setting was not in force at the timed steps (Knob.check): such a
    # trial measured something else, and its knob "could not apply"
    not_held: dict[str, str] = field(default_factory=dict)
    # knob name -> the script's lines that tried to change the setting the knob held
    overridden_at: dict[str, list[str]] = field(default_factory=dict)
    # a switched trial (capture/switching.py): step_ms holds the steps with the knob on,
    # reference_ms those with the script's own setting, block_gains each block pair's gain
    # (%); empty for an ordinary trial, or one whose knob could not be switched (switch_note)
    switch: str = ""
    reference_ms: list[float] = field(default_factory=list)
    block_gains: list[float] = field(default_factory=list)
    switch_note: str | None = None
    # another value's arm of a trial that screened several in one process: that trial's
    # index in the ledger (its wall_s holds the process's time; this one's is 0)
    arm_of: int | None = None
    # the other values' results of a trial with several arms (run_trial), taken by the
    # ledger as trials of their own: never saved
    other_arms: list[TrialResult] = field(default_factory=list, repr=False)
    # the time each timed step spent waiting for the loader's batch (the steps of step_ms):
    # the step's data row, the rest its compute (tune/rows.py); empty where not recorded
    data_wait_ms: list[float] = field(default_factory=list)
    # the loader workers' pace over the timed steps: ms a batch (capture/loader_period.py);
    # None where no worker made a batch; a switched trial's: the knob's blocks'
    loader_period_ms: float | None = None
    # a run that went on after its timed steps (TrialSettings.run_on_s): the steps the script
    # ran in all, and whether it ended by itself there (else it runs at least that many)
    script_steps: int | None = None
    script_ended: bool = False
    ran_on_s: float = 0.0  # the run-on's seconds (not in wall_s)

    @property
    def switched(self) -> bool:
        """Measured against the script's setting within this process, block after block."""
        return bool(self.block_gains)

    @property
    def measured_steps(self) -> range:
        return range(self.measured_from, self.measured_from + len(self.step_ms))

    def losses_at(self, steps: range) -> list[float]:
        """The losses of these step indices: the same data and weights in every trial."""
        return [self.losses[i] for i in steps if i in self.losses]

    @property
    def ok(self) -> bool:
        return self.outcome == Outcome.OK and bool(self.step_ms)

    @property
    def median_ms(self) -> float | None:
        """The middle timed step: what the JSON shows beside ``ms_per_step``."""
        return statistics.median(self.step_ms) if self.step_ms else None

    @property
    def ms_per_step(self) -> float | None:
        """The run's time per step, what every comparison and figure uses (run_ms_per_step)."""
        return run_ms_per_step(self.step_ms)

    @property
    def spread_pct(self) -> float | None:
        """Half the inter-quartile range over the median, in %: this trial's own jitter."""
        if len(self.step_ms) < 4:
            return None
        q = statistics.quantiles(self.step_ms, n=4)
        return round(100 * (q[2] - q[0]) / 2 / statistics.median(self.step_ms), 1)

    @property
    def samples_per_s(self) -> float | None:
        if not self.samples_per_step or not self.ms_per_step:
            return None
        return self.samples_per_step / (self.ms_per_step / 1000)

    @property
    def warmup_excess_s(self) -> float | None:
        """What the warm-up steps cost beyond steady steps (compilation, autotuning)."""
        if not self.warmup_ms or not self.ms_per_step:
            return None
        return max(0.0, (sum(self.warmup_ms) - len(self.warmup_ms) * self.ms_per_step) / 1000)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["other_arms"]  # each is a trial of the ledger's own
        d.update(
            outcome=str(self.outcome),
            median_ms=_round(self.median_ms),
            ms_per_step=_round(self.ms_per_step),
            spread_pct=self.spread_pct,
            samples_per_s=_round(self.samples_per_s, 1),
            warmup_excess_s=_round(self.warmup_excess_s),
        )
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TrialResult:
        names = {f for f in cls.__dataclass_fields__}
        d = {k: v for k, v in d.items() if k in names}
        d["outcome"] = Outcome(d["outcome"])
        d["losses"] = {int(k): v for k, v in d.get("losses", {}).items()}  # JSON keys are text
        return cls(**d)


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def capture_spec(settings: TrialSettings, out_dir: Path, mode: Mode, **extra) -> CaptureSpec:
    """The capture of the script as every run of one tune makes it (a trial, the fidelity
    check's plain reference): the same target, steps and timeout, the user's files guarded;
    ``extra``: what this kind of run adds (knobs, seed, losses)."""
    return CaptureSpec(
        target=settings.target,
        args=list(settings.args),
        out_dir=out_dir,
        is_module=settings.is_module,
        mode=mode,
        warmup=settings.warmup,
        steps=settings.steps,
        step_on=settings.step_on,
        timeout_s=settings.timeout_s,
        run_on_s=settings.run_on_s,
        probes=False,
        file_guard="restore" if settings.run_root else "off",
        guard_root=settings.run_root,
        **extra,
    )


def run_trial(settings: TrialSettings, config: dict, label: str, out_dir: Path) -> TrialResult:
    out_dir.mkdir(parents=True, exist_ok=True)
    switch = settings.switch if settings.switch in config else ""
    spec = capture_spec(
        settings, out_dir, Mode.TIMING, knobs=dict(config), seed=settings.seed,
        record_loss=True, switch=switch, switch_seed=settings.switch_seed,
        arms=[list(arm) for arm in settings.arms] if switch else [],
    )  # fmt: skip
    # the nproc-per-node knob is the process count itself: the job runs with it, through the
    # launcher whenever the tune runs a job (its script needs torchrun's variables), and the
    # launcher gives each rank cores // count threads
    nproc = processes_in(config) or settings.nproc_per_node
    if nproc > 1:  # a rank that stopped on its own clock would leave the others in a collective
        spec.run_on_s = 0.0
    before = load.snapshot()
    launched = True if settings.nproc_per_node > 1 else None  # None: launched for nproc > 1
    captured = capture_job(spec, nproc, output=out_dir / OUTPUT_NAME, launched=launched)
    after = load.snapshot()
    result = from_facts(captured.facts, label, config)
    # the trial's own time: a run-on's seconds are in no other trial's, nor in its estimate
    ran_on = captured.facts.run_on.seconds if captured.facts.run_on is not None else 0.0
    result.wall_s = round(after.wall_s - before.wall_s - ran_on, 2)
    result.ran_on_s = ran_on
    result.files = captured.files.to_dict()
    result.stop_asked = captured.interrupted
    if switch and len(settings.arms) > 1:  # each arm's own configuration; named by the caller
        configs = arm_configs(config, settings.arms)
        result.config = configs[0]
        for arm, arm_config in enumerate(configs[1:], start=2):
            result.other_arms.append(from_facts(captured.facts, label, arm_config, arm))
    for each in (result, *result.other_arms):
        each.switch = switch
        each.others_cores = load.others_cores(before, after)
        each.cores = load.cores()
        each.out_dir = str(out_dir)
    return result


def applied_config(reference: dict, arms) -> dict:
    """What a trial of several arms applies: ``reference`` and each arm's knob at its first
    value (the value its last check reads); ``arm_configs`` splits it back."""
    config = dict(reference)
    for name, value in arms:
        config.setdefault(name, value)
    return config


def arm_configs(config: dict, arms: tuple) -> list[dict]:
    """Each arm's configuration in a trial of several: what ``config`` holds besides the
    arms' knobs (the reference they share), and the arm's one pair."""
    knobs = {name for name, _ in arms}
    reference = {name: value for name, value in config.items() if name not in knobs}
    return [{**reference, name: value} for name, value in arms]


def from_facts(facts: RunFacts, label: str, config: dict, arm: int = 1) -> TrialResult:
    """A trial's result from its facts; of a switched trial, arm ``arm``'s (1: the
    configuration's value; 2..: a further value's, capture/switching.py)."""
    measured = facts.in_phase(StepPhase.MEASURED)
    warmup = facts.in_phase(StepPhase.WARMUP)
    outcome = trial_outcome(facts, len(measured))
    samples = [s.samples for s in measured if s.samples]
    cuda_peaks = [s.cuda_peak_bytes for s in facts.steps if s.cuda_peak_bytes is not None]
    rss = [s.rss_bytes for s in facts.steps if s.rss_bytes is not None]
    # a switched trial's plan: (arm, ms), None for each block's untimed first steps
    switched = [s for s in facts.steps if s.arm is not None]
    plan = [(s.arm, s.wall_ms if s.phase == StepPhase.MEASURED else None) for s in switched]
    if plan and outcome == Outcome.OK:  # a switched trial: this arm's steps, the script's
        step_ms = [ms for a, ms in plan if a == arm and ms is not None]
        reference_ms = [ms for a, ms in plan if a == 0 and ms is not None]
        left_out = _not_the_step(switched)  # positions in the plan
        gains = arm_gains(plan, 1 + max(a for a, _ in plan), left_out).get(arm, [])
        timed = [s for s in measured if s.arm == arm]
    else:
        step_ms = [s.wall_ms for s in measured] if outcome == Outcome.OK else []
        reference_ms, gains = [], []
        timed = measured if outcome == Outcome.OK else []
    return TrialResult(
        label=label,
        config=dict(config),
        outcome=outcome,
        step_ms=step_ms,
        reference_ms=reference_ms,
        block_gains=gains,
        switch_note=facts.switch_note,
        data_wait_ms=[s.data_wait_ms for s in timed],
        warmup_ms=[s.wall_ms for s in warmup],
        losses={s.index: s.loss for s in facts.steps if s.loss is not None},
        measured_from=measured[0].index if measured else 0,
        samples_per_step=statistics.median(samples) if samples else None,
        peak_bytes=max(cuda_peaks)
        if cuda_peaks
        else (facts.rss_peak_bytes or max(rss, default=None)),
        peak_kind="cuda" if cuda_peaks else ("rss" if rss or facts.rss_peak_bytes else ""),
        error=None if outcome == Outcome.OK else _short_error(facts.error),
        knob_details=[k.detail for k in facts.knobs if k.detail],
        not_held={k.name: k.not_held for k in facts.knobs if k.holds is False},
        overridden_at={k.name: list(k.overridden_at) for k in facts.knobs if k.overridden_at},
        loader_period_ms=_pace_of(facts, arm),
        script_steps=facts.run_on.steps if facts.run_on is not None else None,
        script_ended=facts.run_on is not None and facts.run_on.ended,
    )


def _pace_of(facts: RunFacts, arm: int) -> float | None:
    """The loader workers' pace under this arm's blocks (a switched trial's), or over the
    timed steps (an ordinary one's: arm 1)."""
    if arm < len(facts.loader_period_by_arm):
        return facts.loader_period_by_arm[arm]
    return facts.loader_period_ms if arm == 1 else None


# A short batch is left out of a switched trial's blocks only where the batch size it differs
# from is this much of the timed steps: a loop whose batches all vary keeps every step.
USUAL_BATCH_SHARE = 0.75


def _not_the_step(plan: list[StepRecord]) -> frozenset[int]:
    """Positions in a switched trial's plan of timed steps whose time is not the loop's step:
    one in which a DataLoader iterator began (an epoch's start: the workers' start and what
    the script did between epochs), and one of another batch size than the usual (an
    epoch's short last batch). A block has 2-3 timed steps where steps are slow, so one
    such step sets its time: on dcgan (16 steps an epoch, images and checkpoints saved at
    each end) the epoch's first step took ~1,450 ms and its 40-sample last one ~370 beside
    500-550 ms steps, and channels_last's block pairs read -47% to +137% for a +13% knob.
    Both arms meet them, wherever the plan's blocks fall: left out of either, not timed."""
    timed = [s for s in plan if s.phase == StepPhase.MEASURED]
    counts = Counter(s.samples for s in timed if s.samples)
    usual, seen = counts.most_common(1)[0] if counts else (None, 0)
    if seen < USUAL_BATCH_SHARE * sum(counts.values()):
        usual = None
    return frozenset(
        i for i, s in enumerate(plan)
        if s.phase == StepPhase.MEASURED
        and (s.loader_started or (usual is not None and s.samples and s.samples != usual))
    )  # fmt: skip


# CUDA's caching allocator, cuBLAS, the CPU allocator under a memory cap (RLIMIT_AS,
# RLIMIT_DATA: "DefaultCPUAllocator: can't allocate memory"), Python's own MemoryError
_OOM_MARKERS = ("out of memory", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED",
                "can't allocate memory", "Cannot allocate memory", "MemoryError")  # fmt: skip
_COMPILE_MARKERS = ("torch._dynamo", "torch._inductor", "BackendCompilerFailed", "InductorError")


# A script that ends (normally) before the trial's steps still compares, from this many
# measured steps: a short job (one epoch of 16 steps) is measured as it is, whatever the
# calibration asked for.
MIN_MEASURED = 3
ENDED_EARLY = "the script ended after"  # the child's words for a script that simply ended


def trial_outcome(facts: RunFacts, measured: int) -> Outcome:
    """A run's outcome from its facts and its measured steps (a trial's, a plain run's)."""
    if facts.status == Status.COMPLETE and measured:
        return Outcome.OK
    ended = not facts.error or facts.error.startswith(ENDED_EARLY)  # not os._exit, not a kill
    if facts.status == Status.SCRIPT_EXITED and ended and measured >= MIN_MEASURED:
        return Outcome.OK
    if facts.status == Status.INTERRUPTED:
        return Outcome.INTERRUPTED
    if facts.status == Status.TIMEOUT:
        return Outcome.TIMEOUT
    error = facts.error or ""
    if "process was killed by" in error:  # capture/runner.py: named, never guessed as OOM
        return Outcome.KILLED
    if any(m in error for m in _OOM_MARKERS):
        return Outcome.OUT_OF_MEMORY
    if any(m in error for m in _COMPILE_MARKERS):
        return Outcome.COMPILE_FAILED
    return Outcome.CRASHED


def _short_error(error: str | None, limit: int = 2000) -> str | None:
    """The end of a traceback is what says what went wrong."""
    if error is None:
        return None
    error = error.strip()
    return error if len(error) <= limit else "..." + error[-limit:]
