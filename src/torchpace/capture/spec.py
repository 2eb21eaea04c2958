"""What the parent asks of the capture child: one typed spec, written as JSON by the parent
and read back by the child. A missing or mistyped field is torchpace's error, raised when
the child starts, never a KeyError inside the user's ``optimizer.step()``."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from torchpace.atomic import write_text_atomic


class Mode(str, Enum):
    PROFILE = "profile"  # the doctor: warm-up, a profiled window, probes, measured steps
    TIMING = "timing"  # tune's trials: warm-up, then unprofiled measured steps, no profiler
    RUN = "run"  # `torchpace run`: the knobs applied, no measurement, the script runs to its end
    # tune's fidelity reference: the script as it is, timed by one step hook and nothing
    # else (no seed, no loss, no loader timing; the spec's knobs only for tune's check of
    # `run`, tune/run_check.py, none for the fidelity check); capture/plain.py
    PLAIN = "plain"

    def __str__(self) -> str:
        return self.value


class StepOn(str, Enum):
    OPTIMIZER = "optimizer"
    DATALOADER = "dataloader"
    MANUAL = "manual"
    # never asked for: a loop that builds no optimizer has its steps ended by backward()
    # (capture/boundaries.py, StepBoundaries.backward_called)
    BACKWARD = "backward"

    def __str__(self) -> str:
        return self.value


class SpecError(ValueError):
    """The spec file is not what this torchpace writes (a version mix, a hand edit)."""


@dataclass
class CaptureSpec:
    target: str  # path to the script, or module name when is_module
    args: list[str]  # the user's own arguments
    out_dir: Path  # new and empty, created by the caller; trace and run_facts.json go here
    is_module: bool = False
    mode: Mode = Mode.PROFILE
    warmup: int = 3  # steps skipped before measuring (compilation, autotuning, workers)
    steps: int = 5  # steps profiled (PROFILE) or timed (TIMING)
    step_on: StepOn = StepOn.OPTIMIZER
    continue_after: bool = False  # let the script run on after the measured steps
    # TIMING: after the measured steps, let the script run on for at most this many seconds,
    # its steps counted, not timed: where it ends by itself is the job's length (tune's
    # cold run); 0: stop at the measured steps
    run_on_s: float = 0.0
    timeout_s: float | None = None  # no step / measurement incomplete within this: stop, say why
    with_stack: bool = False
    max_trace_mb: float = 200.0
    probes: bool = True
    # PROFILE: seconds of unprofiled steps timed after the window and probes for the
    # headline samples/s (floor and cap on the steps in capture/throughput.py); 0: the floor
    measure_s: float = 5.0
    # tune knobs applied before the script runs: registry name -> value (knobs/)
    knobs: dict[str, Any] = field(default_factory=dict)
    # TIMING: one of `knobs` switched on and off in blocks during the timed steps, against
    # the script's own setting in the same process (capture/switching.py); "" for none
    switch: str = ""
    # which side of each block pair leads (capture/switching.py): drawn by the parent for
    # each trial, unlike `seed`, which is the same in every trial of a tune
    switch_seed: int = 0
    # several arms in the process (Knob.switch_arms): arm i runs the [knob, value] pair
    # arms[i - 1], every other arm's knob at the script's own setting; each knob's first
    # pair is its value in `knobs`, and arms[0]'s knob is `switch`. Empty: `switch` alone
    arms: list[Any] = field(default_factory=list)
    # seeds python's, numpy's and torch's generators before the script runs, so that every
    # trial of a tune sees the same data order and initial weights (a script's own seeding
    # still wins: it runs after)
    seed: int | None = None
    # read each step's loss (the scalar backward() was called on); TIMING mode only, read
    # after the step's time is taken
    record_loss: bool = False
    # what is done about the files the script writes (capture/file_guard.py): "off", "report"
    # (the doctor: listed) or "restore" (tune: put back after the run); guard_root: the run
    # folder that is not the user's (a tune's, around every trial's folder; default out_dir)
    file_guard: str = "off"
    guard_root: str = ""
    # where the manifest and the copies go (default out_dir): one folder for every rank of a
    # job (capture/job.py), whose own out_dir is rank<R>/
    guard_dir: str = ""
    # the write end of the parent's progress pipe (capture/progress.py), passed to the child;
    # None: no one is watching
    progress_fd: int | None = None

    @property
    def command(self) -> list[str]:
        return python_command(self.target, self.is_module, self.args)

    def to_json(self) -> str:
        d = dataclasses.asdict(self)
        d["out_dir"] = str(Path(self.out_dir).resolve())
        return json.dumps(d, indent=2, default=str)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.to_json())

    @classmethod
    def from_dict(cls, d: dict) -> CaptureSpec:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        missing = sorted(
            f.name
            for f in dataclasses.fields(cls)
            if f.name not in d
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )
        if unknown or missing:
            raise SpecError(f"capture spec: unknown fields {unknown}, missing fields {missing}")
        d = dict(d)
        try:
            d["out_dir"] = Path(d["out_dir"])
            d["mode"] = Mode(d.get("mode", Mode.PROFILE))
            d["step_on"] = StepOn(d.get("step_on", StepOn.OPTIMIZER))
        except ValueError as e:
            raise SpecError(f"capture spec: {e}") from e
        spec = cls(**d)
        if not isinstance(spec.args, list) or not isinstance(spec.knobs, dict):
            raise SpecError("capture spec: args must be a list and knobs a mapping")
        if spec.file_guard not in ("off", "report", "restore"):
            raise SpecError(f"capture spec: file_guard {spec.file_guard!r} is not a guard mode")
        if spec.measure_s < 0:
            raise SpecError(f"capture spec: measure_s {spec.measure_s} is negative")
        if spec.switch and (spec.switch not in spec.knobs or spec.mode != Mode.TIMING):
            raise SpecError(f"capture spec: switch {spec.switch!r} is not a knob of a timing run")
        if spec.arms and not _arms_fit(spec):
            raise SpecError(
                "capture spec: arms must be [knob, value] pairs of knobs, the first the "
                "switched knob's, each knob's first pair its value in knobs"
            )
        if spec.warmup < 0 or spec.steps < 1:
            raise SpecError(f"capture spec: warmup {spec.warmup} / steps {spec.steps} out of range")
        return spec

    @classmethod
    def load(cls, path: Path) -> CaptureSpec:
        try:
            d = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            raise SpecError(f"capture spec {path} could not be read: {e}") from e
        if not isinstance(d, dict):
            raise SpecError(f"capture spec {path} is not a JSON object")
        return cls.from_dict(d)


def python_command(target: str, is_module: bool, args: list[str]) -> list[str]:
    """How the user would run the script themselves: ``python [-m] target args``."""
    return ["python", *(["-m"] if is_module else []), target, *args]


def _arms_fit(spec: CaptureSpec) -> bool:
    """The arms name knobs of the spec, the switched one first, each knob's first value the
    one applied (its check at the last timed step reads it)."""
    if not all(isinstance(arm, list | tuple) and len(arm) == 2 for arm in spec.arms):
        return False
    first: dict[str, Any] = {}
    for name, value in spec.arms:
        first.setdefault(name, value)
    applied = all(name in spec.knobs and spec.knobs[name] == v for name, v in first.items())
    return applied and spec.arms[0][0] == spec.switch
