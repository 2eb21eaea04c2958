"""The profile the checks read: per-step numbers aggregated (median, min, max) plus the
facts of the run, the device and memory growth, from a trace model and/or RunFacts.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter
from dataclasses import dataclass, field

from torchpace.doctor.comms import read_communication
from torchpace.doctor.memory import timeline
from torchpace.doctor.steps import StepMetrics, step_metrics
from torchpace.doctor.throughput import Throughput, measure
from torchpace.facts.run import RunFacts
from torchpace.report.comms_model import CommunicationReport
from torchpace.report.memory_model import Growth, Timeline
from torchpace.trace.model import DATALOADER_PREFIX, TraceModel

OPTIMIZER_STEP_PREFIX = "Optimizer.step#"

MATMUL_CONV_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::matmul",
    "aten::linear",
    "aten::convolution",
    "aten::_convolution",
    "aten::cudnn_convolution",
    "aten::baddbmm",
    "aten::conv2d",
    "aten::conv1d",
    "aten::conv3d",
)
# A line through fewer points says nothing about a trend.
MIN_FIT_STEPS = 3
CONV_OPS = ("aten::cudnn_convolution", "aten::convolution", "aten::_convolution")


@dataclass
class Stat:
    median: float
    min: float
    max: float

    @classmethod
    def of(cls, values: list[float]) -> Stat:
        return cls(statistics.median(values), min(values), max(values))


@dataclass
class Profile:
    synthetic_steps: bool  # True: the trace had no step markers, the whole trace is one step
    per_step: list[StepMetrics]
    facts: RunFacts | None = None
    has_gpu: bool = False
    device: int | None = None
    device_name: str | None = None
    capability: tuple[int, int] | None = None
    memory_capacity: int | None = None
    growth: list[Growth] = field(default_factory=list)
    matmul_dtypes: dict[str, int] = field(default_factory=dict)
    loader_iter: str | None = None  # the DataLoader iterator class seen in the trace
    # optimizer classes whose step the trace shows ("Optimizer.step#Adam.step" -> "Adam")
    optimizer_classes: tuple[str, ...] = ()
    has_convs: bool = False
    # the main device's allocated bytes over the window (doctor/memory.timeline)
    memory_timeline: Timeline | None = None
    # the collectives per kind and size, exposed and overlapped (doctor/comms.py)
    communication: CommunicationReport | None = None
    # the job's step timed without the profiler, given for a trace timed apart (the capture's
    # own unprofiled steps are in ``throughput``): the findings are priced on it
    # (doctor/pricing.py)
    unprofiled_step_ms: float | None = None
    # Derived from per_step: what the checks read is ``median`` (the median step, each number
    # by name); the report shows ``metrics`` (median, min and max of each measured number).
    median: StepMetrics = field(init=False)
    metrics: dict[str, Stat] = field(init=False)
    # samples/s over the run's unprofiled steps (doctor/throughput.py); None for a trace alone
    throughput: Throughput | None = field(init=False)

    def __post_init__(self) -> None:
        self.metrics = {
            name: Stat.of([getattr(m, name) for m in self.per_step if name in m.measured()])
            for name in sorted({n for m in self.per_step for n in m.measured()})
        }
        medians = {name: stat.median for name, stat in self.metrics.items()}
        traced = all(m.traced for m in self.per_step)
        self.median = StepMetrics(**{"wall_ms": 0.0, **medians}, traced=traced)
        self.throughput = measure(self.facts)

    @property
    def steps(self) -> int:
        return len(self.per_step)

    @property
    def step_ms(self) -> float:
        return self.median.wall_ms

    def device_peaks(self) -> dict[str, float]:
        """Device key ("cpu", "cuda:0") -> the most bytes allocated in any step, from the
        trace's [memory] samples."""
        peaks: dict[str, float] = {}
        for m in self.per_step:
            for key, memory in m.memory.items():
                if memory.peak is not None:
                    peaks[key] = max(peaks.get(key, memory.peak), memory.peak)
        return dict(sorted(peaks.items()))

    @property
    def process(self):
        return self.facts.process if self.facts else None


def build_profile(
    model: TraceModel | None, facts: RunFacts | None, rank_wait_ms: list[float] | None = None
) -> Profile:
    per_step = step_metrics(model, rank_wait_ms) if model is not None and model.steps else []
    if not per_step and facts is not None:
        per_step = [StepMetrics.from_record(s) for s in facts.window]
    profile = Profile(
        synthetic_steps=bool(model and model.steps and model.steps[0].synthetic),
        per_step=per_step,
        facts=facts,
    )
    if model is not None:
        _add_trace_facts(profile, model)
    _add_growth(profile, model, facts)
    return profile


def _add_trace_facts(profile: Profile, model: TraceModel) -> None:
    profile.has_gpu = model.has_gpu
    profile.device = model.main_device()
    profile.capability = model.device_capability(profile.device)
    profile.memory_capacity = model.device_memory_capacity(profile.device)
    for d in model.devices:
        if d.get("id") == profile.device:
            profile.device_name = d.get("name")
    dtypes: Counter = Counter()
    for op in model.cpu_ops:
        if op.name in MATMUL_CONV_OPS:
            types = op.args.get("Input type") or []
            if types and types[0]:
                dtypes[str(types[0])] += 1
        if op.name in CONV_OPS:
            profile.has_convs = True
    profile.matmul_dtypes = dict(dtypes)
    profile.memory_timeline = timeline(model)
    profile.communication = read_communication(model)
    for s in model.annotations:
        if s.name.startswith(DATALOADER_PREFIX):
            profile.loader_iter = s.name[len(DATALOADER_PREFIX) :].split(".")[0]
            break
    steps = {s.name for s in model.annotations if s.name.startswith(OPTIMIZER_STEP_PREFIX)}
    profile.optimizer_classes = tuple(
        sorted({name[len(OPTIMIZER_STEP_PREFIX) :].split(".")[0] for name in steps})
    )


def _add_growth(profile: Profile, model: TraceModel | None, facts: RunFacts | None) -> None:
    """Fit the bytes in use at each profiled step's end: the allocator's exact totals from
    the trace's [memory] samples, else the run facts' CUDA allocated bytes. Host RSS is not
    fitted: inside the window the profiler's own event buffers make it grow every step."""
    for key in ("cpu", *(f"cuda:{i}" for i in range(16))):
        ends = [m.memory[key].allocated_end for m in profile.per_step if key in m.memory]
        values = [v for v in ends if v is not None]
        if len(values) >= MIN_FIT_STEPS:
            profile.growth.append(_fit(f"trace {key}", values))
    window = facts.window if facts is not None else []
    cuda = [float(s.cuda_allocated_bytes) for s in window if s.cuda_allocated_bytes]
    traced = any(g.source.startswith("trace cuda") for g in profile.growth)
    if len(cuda) >= MIN_FIT_STEPS and not traced:
        profile.growth.append(_fit("run facts cuda", cuda))


def _fit(source: str, values: list[float]) -> Growth:
    n = len(values)
    xs = list(range(n))
    mean_x, mean_y = sum(xs) / n, sum(values) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    sxy = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, values, strict=True))
    syy = sum((y - mean_y) ** 2 for y in values)
    slope = sxy / sxx
    r2 = (sxy * sxy) / (sxx * syy) if syy > 0 else 0.0
    rising = sum(1 for a, b in itertools.pairwise(values) if b > a) / (n - 1)
    return Growth(source, slope, r2, rising, values[0], values[-1], n)
