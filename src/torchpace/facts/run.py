"""What a capture run records besides the profiler trace: the contract between `capture/`
(which writes it from inside the user's process) and `doctor/` (which reads it).

Written as ``run_facts.json`` next to the trace. Times are milliseconds, sizes bytes.
Anything that could not be read is None, never a guess.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from torchpace import run_files
from torchpace.atomic import write_text_atomic
from torchpace.facts.cpu_use import CpuUse
from torchpace.facts.flops import FlopFacts
from torchpace.facts.knob_record import KnobRecord
from torchpace.facts.memory import MemoryFacts

# The run folder's record of what the child saw, written by the child, read by the parent.
FACTS_NAME = run_files.FACTS


class Status(str, Enum):
    """How a capture ended. A str so that it reads and writes as plain JSON text."""

    RUNNING = "running"  # only ever seen in a file the child could not finish
    COMPLETE = "complete"  # every step asked for was measured
    SCRIPT_EXITED = "script-exited"  # the script ended (or sys.exit / os._exit) first
    SCRIPT_RAISED = "script-raised"  # the script raised; its traceback is in `error`
    TIMEOUT = "timeout"  # no step (or no more steps) within --timeout
    INTERRUPTED = "interrupted"  # Ctrl-C

    def __str__(self) -> str:
        return self.value


class StepPhase(str, Enum):
    """What a recorded step was for."""

    WARMUP = "warmup"  # skipped before measuring (compilation, autotuning, workers starting)
    WINDOW = "window"  # under torch.profiler
    PROBE = "probe"  # an A/B probe's step, a setting switched
    SETTLE = "settle"  # untimed, after the window and probes: the loader's queue drains
    # unprofiled, after the settling steps, as many as the throughput budget takes: the
    # headline samples/s and the step without the profiler (capture/throughput.py)
    REFERENCE = "reference"
    MEASURED = "measured"  # a timing-only run's measured step (tune's trials)
    # the step after the warm-up, its floating-point work counted (capture/flops.py): slower
    # than the others, timed by no figure
    COUNTED = "counted"

    def __str__(self) -> str:
        return self.value


@dataclass
class StepRecord:
    index: int  # 0-based, counted from the first step of the user's run
    wall_ms: float
    data_wait_ms: float  # time the main process spent inside DataLoader __next__
    in_window: bool  # inside the profiler capture window
    rss_bytes: int | None = None
    cuda_allocated_bytes: int | None = None  # at the end of the step
    cuda_peak_bytes: int | None = None  # max allocated during the step (reset each step)
    phase: StepPhase = StepPhase.WARMUP
    # samples fetched from DataLoaders during the step (first dimension of the batch's first
    # tensor); None when no loader batch was seen
    samples: int | None = None
    # the loss of the step (the scalar that backward() was called on, last one of the step),
    # warm-up and measured steps of a timing run; read after the measurement so that
    # recording it adds no sync to the step
    loss: float | None = None
    # a DataLoader iterator of the script's began in this step (an epoch's start): its
    # time holds the workers' start and what the script did between two epochs (dcgan:
    # ~900 ms of images and checkpoints saved beside 500 ms steps)
    loader_started: bool = False
    # a switched trial's timed step (capture/switching.py): the arm it ran with, 0 the
    # script's own setting, 1 the knob's value (2.. its further values); None in other runs
    arm: int | None = None


@dataclass
class LoaderFacts:
    location: str | None  # "train.py:42", where the user built the DataLoader
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    batch_size: int | None
    drop_last: bool
    dataset_len: int | None
    dataset_type: str
    batches_seen: int = 0
    # batches fetched during the timed steps (the profiled window, the measured and
    # reference steps): the loaders that feed training, told apart from an evaluation loader
    # run between them
    batches_timed: int = 0
    # the dataset's transform pipeline, class names in order (["Resize", "ToTensor",
    # "Normalize"]), or None when the dataset has no `transform` attribute
    transform: list[str] | None = None
    # why its float batches are known to come from 8-bit data (capture/batch_origin.py):
    # "transform ToTensor", "/255 in D.__getitem__", "first batch: ... levels"; None: no
    # such evidence (the floats may be data that is float by nature)
    uint8_evidence: str | None = None


@dataclass
class SyncSite:
    kind: str  # "item", "cpu", "numpy", "tolist", "nonzero", "print", "synchronize"
    location: str | None  # the user's source line that caused it
    count: int  # in the capture window
    per_step: float
    # device type of the tensor ("cpu", "cuda"): a call on a CPU tensor makes no GPU wait
    device: str | None = None


@dataclass
class WrapperFacts:
    kind: str  # "DataParallel", "DistributedDataParallel", "FullyShardedDataParallel"
    location: str | None
    find_unused_parameters: bool | None = None
    # DDP's settings as the script built it (None: not DDP, or a run facts file from before)
    bucket_cap_mb: float | None = None
    gradient_as_bucket_view: bool | None = None
    static_graph: bool | None = None
    broadcast_buffers: bool | None = None
    has_buffers: bool | None = None  # the wrapped module holds buffers (BatchNorm's stats)
    world_size: int | None = None  # the process group's size when it was built


@dataclass
class ProbeResult:
    """An A/B measurement taken inside the window: a setting switched for a few steps.

    Used where the cost of a problem can only be known by measuring it (anomaly detection,
    thread count), so that the doctor's estimated saving is measured, not assumed.
    """

    name: str  # e.g. "anomaly-detection-off", "threads-to-cores"
    baseline_ms: float  # median step time with the user's setting
    probe_ms: float  # median step time with the setting switched
    steps: int  # steps measured on each side
    detail: str = ""


@dataclass
class ProcessState:
    device: str  # "cuda" or "cpu": where the model's parameters live
    cuda_available: bool
    cuda_total_memory_bytes: int | None
    anomaly_detection: bool
    grad_enabled: bool
    cudnn_benchmark: bool | None
    cudnn_deterministic: bool | None
    deterministic_algorithms: bool
    tf32_matmul: bool | None
    tf32_cudnn: bool | None
    intra_op_threads: int
    inter_op_threads: int
    usable_cpus: int | None
    physical_cores: int | None
    thread_env: dict[str, str] = field(default_factory=dict)
    allocator: str = "default"
    cuda_devices: int | None = None  # CUDA devices visible to the process (None: no CUDA)
    # the CPU computes bf16 natively (AVX512-BF16, AMX, ARM BF16); None: flags unread
    bf16_native: bool | None = None


@dataclass
class ModelFacts:
    """The model the optimizer trains: the first module called whose parameters it holds."""

    class_name: str
    location: str | None  # the user's line that first called it
    parameters: int
    conv_layers: int  # Conv1d/2d/3d (and transposed) modules: channels_last and cuDNN apply
    norm_layers: int  # BatchNorm/LayerNorm/GroupNorm modules
    device: str
    dtype: str  # of its first floating-point parameter, e.g. "float32"


@dataclass
class OptimizerFacts:
    class_name: str
    location: str | None  # where the user built it
    parameters: int
    fused: bool | None  # as the user asked; None: left to torch
    foreach: bool | None


@dataclass
class CallFacts:
    """Calls the script makes that decide whether a tune knob applies, counted by the hooks."""

    grad_clipping: int = 0  # clip_grad_norm_ / clip_grad_value_ calls
    zero_grad_keep: int = 0  # zero_grad(set_to_none=False) calls
    grad_scaler: bool = False  # the script built a GradScaler itself
    autocast: bool = False  # the script entered torch.autocast itself
    compiled: bool = False  # the script called torch.compile itself


@dataclass
class PhaseLoad:
    """How busy the machine was during a phase of the capture (capture/machine_load.py)."""

    wall_s: float
    other_cpu_s: float  # CPU time of every other process on the machine, all cores
    own_cpu_s: float  # this process and its children (DataLoader workers)
    cores: int | None  # the cores this process may use
    load_1m: float | None  # /proc/loadavg at the phase's end

    def other_cores(self) -> float | None:
        """How many cores the other processes kept busy on average: their CPU time over
        the phase's wall time (None for a phase of no time)."""
        if self.wall_s <= 0:
            return None
        return round(self.other_cpu_s / self.wall_s, 2)


@dataclass
class RunOn:
    """A run that went on after its measured steps (CaptureSpec.run_on_s): how many steps
    the script ran in all, and whether it ended by itself then (else it ran past the limit:
    at least that many)."""

    steps: int
    ended: bool
    seconds: float  # how long it ran on after the measured steps


@dataclass
class RunFacts:
    command: list[str]
    step_source: str  # "optimizer", "dataloader", "manual" or "backward" (no optimizer built)
    optimizers: list[str]  # class names of the optimizers that stepped
    optimizer_steps_per_step: float  # 2.0 for a GAN's G and D
    warmup: int
    steps_requested: int
    status: Status
    error: str | None = None  # the user's traceback, or why no step came
    trace_path: str | None = None
    trace_truncated: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    loaders: list[LoaderFacts] = field(default_factory=list)
    syncs: list[SyncSite] = field(default_factory=list)
    wrappers: list[WrapperFacts] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    # a switched trial whose knob could not be switched in this process: why (it was timed
    # with the knob on throughout); None otherwise
    switch_note: str | None = None
    process: ProcessState | None = None
    model: ModelFacts | None = None
    # the other models the first training iteration trained (a GAN's second network), each
    # with its own optimizer-held parameters (capture/runtime.py)
    other_models: list[ModelFacts] = field(default_factory=list)
    optimizer_details: list[OptimizerFacts] = field(default_factory=list)
    calls: CallFacts = field(default_factory=CallFacts)
    knobs: list[KnobRecord] = field(default_factory=list)
    # seconds from the child's start to the first step's start (imports, data set building)
    startup_s: float | None = None
    # what holds memory (capture/memory.py): profiled steps, and the failure of an OOM run
    memory: MemoryFacts = field(default_factory=MemoryFacts)
    # the framework that steps the optimizer ("lightning", "accelerate", "hf-trainer"),
    # None for a plain loop (capture/frameworks.py)
    framework: str | None = None
    # the process's peak resident memory so far (VmHWM, and never below a step's RSS) when
    # the facts were last saved: a tune trial's peak on a CPU run, the batch-size finder's
    # measure of a batch
    rss_peak_bytes: int | None = None
    # how busy the machine was during the profiled window and during the unprofiled steps
    # after it (None off Linux, or when the phase did not run)
    window_load: PhaseLoad | None = None
    reference_load: PhaseLoad | None = None
    # the CPU time of each process of the job (the main one, each loader worker, other
    # children) in the same two phases (capture/process_cpu.py)
    window_cpu: CpuUse | None = None
    reference_cpu: CpuUse | None = None
    # why the steps are not what step_source was asked for (the optimizer stepped twice on
    # one batch: the batches were counted, capture/boundaries.py); None: as asked
    step_note: str | None = None
    # the floating-point work and bytes of one step, counted after the warm-up
    # (capture/flops.py); ``counted`` False with a reason where no step could be counted
    flops: FlopFacts = field(default_factory=FlopFacts)
    # a trial's loader workers' pace over its timed steps: a batch's fetch time in a worker
    # over the workers that fetched (capture/loader_period.py); None: no worker fetched, or
    # not measured (a switched trial, a profiled run)
    loader_period_ms: float | None = None
    loader_workers: int = 0
    # a switched trial's pace under each arm's blocks (0: the script's own setting; 1: the
    # knob's first value, which loader_period_ms holds); empty for any other run
    loader_period_by_arm: list[float | None] = field(default_factory=list)
    run_on: RunOn | None = None  # CaptureSpec.run_on_s: where the script ended by itself

    @property
    def models(self) -> list[ModelFacts]:
        """Every trained model, the first (``model``) first."""
        return [self.model, *self.other_models] if self.model is not None else []

    @property
    def window(self) -> list[StepRecord]:
        return [s for s in self.steps if s.in_window]

    def in_phase(self, phase: StepPhase) -> list[StepRecord]:
        return [s for s in self.steps if s.phase == phase]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, default=str)

    def save(self, path: Path) -> None:
        write_text_atomic(path, self.to_json())

    @classmethod
    def from_dict(cls, d: dict) -> RunFacts:
        d = dict(d)
        d["status"] = Status(d["status"])
        d["steps"] = [_step(s) for s in d.get("steps", [])]
        d["loaders"] = [LoaderFacts(**x) for x in d.get("loaders", [])]
        d["syncs"] = [SyncSite(**x) for x in d.get("syncs", [])]
        d["wrappers"] = [WrapperFacts(**x) for x in d.get("wrappers", [])]
        d["probes"] = [ProbeResult(**x) for x in d.get("probes", [])]
        if d.get("process") is not None:
            d["process"] = ProcessState(**d["process"])
        if d.get("model") is not None:
            d["model"] = ModelFacts(**d["model"])
        d["other_models"] = [ModelFacts(**x) for x in d.get("other_models", [])]
        d["optimizer_details"] = [OptimizerFacts(**x) for x in d.get("optimizer_details", [])]
        d["calls"] = CallFacts(**d.get("calls", {}))
        d["knobs"] = [KnobRecord(**x) for x in d.get("knobs", [])]
        d["memory"] = MemoryFacts.from_dict(d.get("memory") or {})
        for key in ("window_load", "reference_load"):
            if d.get(key) is not None:
                d[key] = PhaseLoad(**d[key])
        for key in ("window_cpu", "reference_cpu"):
            if d.get(key) is not None:
                d[key] = CpuUse.from_dict(d[key])
        d["flops"] = FlopFacts.from_dict(d.get("flops") or {})
        if d.get("run_on") is not None:
            d["run_on"] = RunOn(**d["run_on"])
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> RunFacts:
        return cls.from_dict(json.loads(Path(path).read_text()))


def _step(d: dict) -> StepRecord:
    d = dict(d)
    d["phase"] = StepPhase(d.get("phase") or StepPhase.WARMUP)
    if "switched_on" in d:  # written before several arms: True/False for the knob's arm
        on = d.pop("switched_on")
        d.setdefault("arm", None if on is None else int(on))
    return StepRecord(**d)
