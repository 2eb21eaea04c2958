"""One model of a torch.profiler trace: steps, CPU ops, annotations, GPU work, runtime calls
and memory samples, whatever job wrote it.

Times stay in the trace's own unit, microseconds, as floats. GPU work is attributed to the
step in which the CPU *launched* it (through the runtime call's correlation id), because a
kernel queued at the end of step 3 may run during step 4 and still belongs to step 3's work.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from torchpace.trace.index import TimeIndex
from torchpace.trace.loader import TraceError, read_trace_file

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
MEMCPY_NAME = re.compile(r"^Memcpy (\w+) \((\w+) -> (\w+)\)")
DATALOADER_PREFIX = "enumerate(DataLoader)#"
OPTIMIZER_PREFIXES = ("Optimizer.step#", "Optimizer.zero_grad#")
BACKWARD_PREFIX = "autograd::engine::evaluate_function:"
# The span torchpace's capture puts around a closure that optimizer.step(closure) calls
# (Lightning's automatic optimization, LBFGS): the forward and backward run inside the
# optimizer's own span, and this is how the doctor tells them apart from the update.
CLOSURE_SPAN = "torchpace#optimizer_closure"
# Runtime calls that block the host until the GPU has caught up: the CPU<->GPU syncs.
SYNC_RUNTIME_CALLS = frozenset(
    {
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "cudaMemcpy",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
        "hipEventSynchronize",
        "hipMemcpy",
    }
)
# The shapes and dtypes a CPU op records (record_shapes=True): lists, one entry per input.
SHAPE_ARGS = ("Input Dims", "Input type")
CPU_DEVICE_TYPE = 0  # the [memory] events' "Device Type" for host memory
# CPU spans of collectives: the backends' own record_function names ("gloo:all_reduce",
# "nccl:all_reduce"), c10d's ops ("c10d::allreduce_") and PyTorch's record_param_comms.
COLLECTIVE_SPAN_PREFIXES = ("gloo:", "nccl:", "c10d::", "record_param_comms")
# Communication kernels on the device: NCCL's (ncclKernel_*, ncclDevKernel_*), as
# HolisticTraceAnalysis classifies them.
COLLECTIVE_KERNEL_WORD = "nccl"


def is_collective_span(name: str) -> bool:
    return name.startswith(COLLECTIVE_SPAN_PREFIXES)


def is_collective_kernel(name: str) -> bool:
    return COLLECTIVE_KERNEL_WORD in name.lower()


@dataclass(frozen=True)
class Span:
    """A complete ('X') event on a CPU thread: an op, an annotation or a runtime call."""

    name: str
    cat: str
    ts: float
    dur: float
    tid: int | str
    args: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class GpuOp:
    """Work on the device: a kernel, a memcpy or a memset."""

    kind: str  # "kernel", "memcpy", "memset"
    name: str
    ts: float
    dur: float
    device: int | None
    stream: int | None
    correlation: int | None
    bytes: int = 0
    direction: str | None = None  # memcpy: "HtoD", "DtoH", "DtoD", "HtoH", "PtoP"
    host_memory: str | None = None  # memcpy to/from the host: "Pageable" or "Pinned"

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(frozen=True)
class MemorySample:
    """One [memory] event: the allocator's totals just after an allocation or a free."""

    ts: float
    device_type: int  # 0 host, 1 CUDA (c10::DeviceType)
    device_id: int
    total_allocated: int
    total_reserved: int

    @property
    def device_key(self) -> str:
        return "cpu" if self.device_type == CPU_DEVICE_TYPE else f"cuda:{self.device_id}"


@dataclass(frozen=True)
class Step:
    name: str
    number: int | None
    ts: float
    dur: float
    synthetic: bool = False  # True when the trace has no ProfilerStep spans

    @property
    def end(self) -> float:
        return self.ts + self.dur

    def contains(self, ts: float) -> bool:
        return self.ts <= ts < self.end


@dataclass(frozen=True)
class DistributedInfo:
    """What Kineto records of the job a rank belongs to (the trace's top-level
    ``distributedInfo``: ``rank``, ``world_size``, ``backend``, and in newer versions
    ``pg_config``, one entry per process group with its ``pg_name`` and ``pg_size``)."""

    rank: int | None
    world_size: int | None
    backend: str | None
    group_sizes: tuple[tuple[str, int], ...] = ()  # (pg_name, pg_size) per process group

    def group_size(self, group: str | None) -> int | None:
        """The ranks in process group ``group`` (by its name); with no group known, the
        world size where the trace lists one group at most (several: which one is unknown)."""
        sizes = dict(self.group_sizes)
        if group is not None and group in sizes:
            return sizes[group]
        if group is None and len(sizes) <= 1:
            return self.world_size
        return None


@dataclass(frozen=True)
class TraceModel:
    """The whole trace, immutable: analyses read it, and one that finds other step
    boundaries makes a new model with ``with_steps`` instead of changing this one."""

    path: Path | None
    steps: tuple[Step, ...]
    cpu_ops: tuple[Span, ...]
    annotations: tuple[Span, ...]  # user_annotation and python_function spans
    runtime: tuple[Span, ...]  # cuda_runtime / cuda_driver calls
    gpu_ops: tuple[GpuOp, ...]
    memory: tuple[MemorySample, ...]
    devices: tuple[dict, ...]  # the trace's deviceProperties (empty for CPU-only traces)
    main_tid: int | str | None
    # the trace's top-level distributedInfo (a rank of a torch.distributed job), else None
    distributed: DistributedInfo | None = None

    def with_steps(self, steps: Iterable[Step]) -> TraceModel:
        """The same trace cut into other steps."""
        return dataclasses.replace(self, steps=tuple(steps))

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_ops)

    @cached_property
    def runtime_index(self) -> TimeIndex[Span]:
        """The runtime calls indexed by time, built on first use (trace/index.py): a step's
        calls in O(log n) instead of a pass over the whole trace per step."""
        return TimeIndex(self.runtime)

    def step_of(self, t: float) -> int | None:
        """The index of the step that contains time ``t`` (the first one, where steps nest),
        by bisection over the steps' starts."""
        i = bisect.bisect_right(self._step_starts, t) - 1
        found = None
        for j in (i, i - 1):  # i - 1: the step that i is nested in, which comes first
            if j >= 0 and self.steps[j].contains(t):
                found = j
        return found

    @cached_property
    def _step_starts(self) -> list[float]:
        return [s.ts for s in self.steps]

    def launch_ts(self) -> dict[int, float]:
        """correlation id -> the ts of the runtime call that queued the GPU work."""
        return {c: s.ts for s in self.runtime if (c := s.args.get("correlation")) is not None}

    def gpu_ops_by_step(self) -> dict[int, list[GpuOp]]:
        """Step index -> GPU work launched during that step (by correlation, else by ts)."""
        launches = self.launch_ts()
        out: dict[int, list[GpuOp]] = {i: [] for i in range(len(self.steps))}
        for op in self.gpu_ops:
            t = launches.get(op.correlation, op.ts) if op.correlation is not None else op.ts
            i = self.step_of(t)
            if i is not None:
                out[i].append(op)
        return out

    def device_memory_capacity(self, device: int | None) -> int | None:
        for d in self.devices:
            if d.get("id") == device and d.get("totalGlobalMem"):
                return int(d["totalGlobalMem"])
        return None

    def device_capability(self, device: int | None) -> tuple[int, int] | None:
        for d in self.devices:
            if d.get("id") == device and "computeMajor" in d:
                return int(d["computeMajor"]), int(d.get("computeMinor", 0))
        return None

    def main_device(self) -> int | None:
        """The device doing most of this process's kernel time (one rank, one device)."""
        time_by_device: dict[int, float] = {}
        for op in self.gpu_ops:
            if op.kind == "kernel" and op.device is not None:
                time_by_device[op.device] = time_by_device.get(op.device, 0.0) + op.dur
        if not time_by_device:
            return None
        return max(time_by_device, key=time_by_device.__getitem__)


def load_trace(path: Path) -> TraceModel:
    """Read and model a trace file; ``TraceError`` for anything that is not a usable trace."""
    data = read_trace_file(Path(path))
    model = build_model(
        data["traceEvents"],
        data.get("deviceProperties") or [],
        Path(path),
        distributed=data.get("distributedInfo"),
    )
    if not (model.cpu_ops or model.annotations or model.gpu_ops or model.runtime):
        raise TraceError(
            f"trace file {path} holds no profiled events (no ops, kernels or runtime calls); "
            "the profiler window probably closed before any work ran: profile at least one "
            "training step"
        )
    return model


class _BadField(Exception):
    """A field of one event that is not what torch.profiler writes (trace/model.py turns it
    into a TraceError that names the file, the event and the field)."""

    def __init__(self, name: str, value, expected: str):
        super().__init__(name)
        self.name, self.value, self.expected = name, value, expected


def _time(value, name: str) -> float:
    """A time or duration in us: a finite number (JSON's NaN and Infinity are not)."""
    if type(value) in (float, int) and math.isfinite(value):
        return float(value)
    raise _BadField(name, value, "a finite number of microseconds")


def _duration(value) -> float:
    d = _time(value, "dur")
    if d < 0:
        raise _BadField("dur", value, "a duration >= 0")
    return d


def _whole(value, name: str, default: int | None = None) -> int | None:
    """An integer field (a count, an id); ``default`` where it is absent or null."""
    if value is None:
        return default
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    raise _BadField(name, value, "an integer")


def _thread(value) -> int | str:
    if type(value) in (int, str):
        return value
    raise _BadField("tid", value, "an integer or a string")


def _args(value) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    raise _BadField("args", value, "an object")


def _bad_event(path: Path | None, index: int, event: dict, bad: _BadField) -> TraceError:
    shown = repr(bad.value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    name = str(event.get("name", ""))[:60]
    return TraceError(
        f"trace file {path}: event {index} ({name!r}) has {bad.name} = {shown}, not "
        f"{bad.expected}; the file was damaged or not written by torch.profiler: fix or "
        "re-export it"
    )


def build_model(
    events: list[dict],
    devices: list[dict],
    path: Path | None = None,
    distributed: dict | None = None,
) -> TraceModel:
    """The model of a trace's events; a ``TraceError`` naming the event and the field for
    a field the analyses would read that is not what torch.profiler writes.
    ``distributed``: the trace's top-level ``distributedInfo``, where it has one."""
    cpu_ops, annotations, runtime, gpu_ops, memory, steps = [], [], [], [], [], []
    for index, e in enumerate(events):
        if not isinstance(e, dict):
            continue
        try:
            _add_event(e, cpu_ops, annotations, runtime, gpu_ops, memory, steps)
        except _BadField as bad:
            raise _bad_event(path, index, e, bad) from None
    main_tid = _main_thread(events, cpu_ops)
    steps.sort(key=lambda s: s.ts)
    if not steps:
        steps = _whole_trace_step(cpu_ops + annotations + runtime, gpu_ops)
    memory.sort(key=lambda m: m.ts)
    return TraceModel(
        path=path,
        steps=tuple(steps),
        cpu_ops=tuple(cpu_ops),
        annotations=tuple(annotations),
        runtime=tuple(runtime),
        gpu_ops=tuple(gpu_ops),
        memory=tuple(memory),
        devices=_devices(devices, path),
        main_tid=main_tid,
        distributed=_distributed(distributed, path),
    )


def _add_event(e: dict, cpu_ops, annotations, runtime, gpu_ops, memory, steps) -> None:
    ph, cat = e.get("ph"), e.get("cat")
    if ph == "i" and e.get("name") == "[memory]":
        memory.append(_memory_sample(e))
        return
    if ph != "X" or "ts" not in e:
        return
    if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        gpu_ops.append(_gpu_op(e))
        return
    span = Span(
        name=str(e.get("name", "")),
        cat=str(cat),
        ts=_time(e["ts"], "ts"),
        dur=_duration(e.get("dur", 0.0)),
        tid=_thread(e.get("tid", 0)),
        args=_args(e.get("args")),
    )
    if cat == "cpu_op":
        for key in SHAPE_ARGS:
            if type(span.args.get(key, [])) is not list:
                raise _BadField(f"args.{key}", span.args[key], "a list")
        cpu_ops.append(span)
    elif cat in ("cuda_runtime", "cuda_driver"):
        _whole(span.args.get("correlation"), "args.correlation")  # a key of the launch maps
        runtime.append(span)
    elif cat in ("user_annotation", "python_function"):
        if m := STEP_NAME.match(span.name):
            steps.append(Step(span.name, int(m.group(1)), span.ts, span.dur))
        else:
            annotations.append(span)


def _devices(devices: list, path: Path | None) -> tuple[dict, ...]:
    """deviceProperties, each with the numbers the analyses read checked."""
    out = []
    for i, d in enumerate(devices if isinstance(devices, list) else []):
        if not isinstance(d, dict):
            continue
        for key in ("id", "totalGlobalMem", "computeMajor", "computeMinor"):
            try:
                _whole(d.get(key), key)
            except _BadField as bad:
                raise TraceError(
                    f"trace file {path}: deviceProperties[{i}] has {key} = {bad.value!r:.40}, "
                    "not an integer; the file was damaged or not written by torch.profiler"
                ) from None
        out.append(d)
    return tuple(out)


def _distributed(info, path: Path | None) -> DistributedInfo | None:
    """distributedInfo, with the numbers the analyses read checked (a world size that is
    not a positive integer would make every bus bandwidth wrong)."""
    if not isinstance(info, dict):
        return None

    def number(d: dict, key: str, where: str) -> int | None:
        try:
            value = _whole(d.get(key), key)
        except _BadField as bad:
            value = bad.value
        if value is None or (type(value) is int and value >= 0):
            return value
        raise TraceError(
            f"trace file {path}: {where} has {key} = {value!r:.40}, not an integer >= 0; the "
            "file was damaged or not written by torch.profiler: fix or re-export it"
        )

    groups = []
    config = info.get("pg_config")
    for i, pg in enumerate(config if isinstance(config, list) else []):
        if isinstance(pg, dict) and pg.get("pg_name") is not None:
            size = number(pg, "pg_size", f"distributedInfo.pg_config[{i}]")
            if size:
                groups.append((str(pg["pg_name"]), size))
    backend = info.get("backend")
    return DistributedInfo(
        rank=number(info, "rank", "distributedInfo"),
        world_size=number(info, "world_size", "distributedInfo") or None,
        backend=str(backend) if backend is not None else None,
        group_sizes=tuple(groups),
    )


def _gpu_op(e: dict) -> GpuOp:
    args = _args(e.get("args"))
    cat, name = e["cat"], str(e.get("name", ""))
    kind = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}[cat]
    direction = host_memory = None
    if kind == "memcpy" and (m := MEMCPY_NAME.match(name)):
        direction = m.group(1)
        ends = {m.group(2), m.group(3)}
        host_memory = next((x for x in ("Pageable", "Pinned") if x in ends), None)
    return GpuOp(
        kind=kind,
        name=name,
        ts=_time(e["ts"], "ts"),
        dur=_duration(e.get("dur", 0.0)),
        device=_whole(args.get("device"), "args.device"),
        stream=_whole(args.get("stream"), "args.stream"),
        correlation=_whole(args.get("correlation"), "args.correlation"),
        bytes=_whole(args.get("bytes"), "args.bytes", 0) or 0,
        direction=direction,
        host_memory=host_memory,
    )


def _memory_sample(e: dict) -> MemorySample:
    args = _args(e.get("args"))
    return MemorySample(
        ts=_time(e.get("ts"), "ts"),
        device_type=_whole(args.get("Device Type"), "args.Device Type", CPU_DEVICE_TYPE),
        device_id=_whole(args.get("Device Id"), "args.Device Id", -1),
        total_allocated=_whole(args.get("Total Allocated"), "args.Total Allocated", 0) or 0,
        total_reserved=_whole(args.get("Total Reserved"), "args.Total Reserved", 0) or 0,
    )


def _main_thread(events: list[dict], cpu_ops: list[Span]) -> int | str | None:
    """The training loop's thread: the one carrying ProfilerStep spans, else the busiest."""
    for e in events:
        if isinstance(e, dict) and STEP_NAME.match(str(e.get("name", ""))):
            return e.get("tid")
    counts: dict = {}
    for s in cpu_ops:
        counts[s.tid] = counts.get(s.tid, 0) + 1
    return max(counts, key=counts.__getitem__) if counts else None


def _whole_trace_step(spans: list[Span], gpu_ops: list[GpuOp]) -> list[Step]:
    """With no ProfilerStep spans, the whole profiled stretch counts as one step."""
    starts = [s.ts for s in spans] + [g.ts for g in gpu_ops]
    ends = [s.end for s in spans] + [g.end for g in gpu_ops]
    if not starts:
        return []
    # +1 us so that an event starting exactly at the last end still falls inside the step.
    return [Step("whole trace", None, min(starts), max(ends) - min(starts) + 1.0, True)]


__all__ = ["GpuOp", "MemorySample", "Span", "Step", "TraceError", "TraceModel", "load_trace"]
