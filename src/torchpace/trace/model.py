"""One model of a torch.profiler trace: steps, CPU ops, annotations, GPU work, runtime calls
and memory samples, whatever job wrote it.

Times stay in the trace's own unit, microseconds, as floats. GPU work is attributed to the
step in which the CPU *launched* it (through the runtime call's correlation id), because a
kernel queued at the end of step 3 may run during step 4 and still belongs to step 3's work.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

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

    def with_steps(self, steps: Iterable[Step]) -> TraceModel:
        """The same trace cut into other steps."""
        return dataclasses.replace(self, steps=tuple(steps))

    @property
    def has_gpu(self) -> bool:
        return bool(self.gpu_ops)

    def launch_ts(self) -> dict[int, float]:
        """correlation id -> the ts of the runtime call that queued the GPU work."""
        return {c: s.ts for s in self.runtime if (c := s.args.get("correlation")) is not None}

    def gpu_ops_by_step(self) -> dict[int, list[GpuOp]]:
        """Step index -> GPU work launched during that step (by correlation, else by ts)."""
        launches = self.launch_ts()
        out: dict[int, list[GpuOp]] = {i: [] for i in range(len(self.steps))}
        for op in self.gpu_ops:
            t = launches.get(op.correlation, op.ts) if op.correlation is not None else op.ts
            for i, step in enumerate(self.steps):
                if step.contains(t):
                    out[i].append(op)
                    break
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
    model = build_model(data["traceEvents"], data.get("deviceProperties") or [], Path(path))
    if not (model.cpu_ops or model.annotations or model.gpu_ops or model.runtime):
        raise TraceError(
            f"trace file {path} holds no profiled events (no ops, kernels or runtime calls); "
            "the profiler window probably closed before any work ran: profile at least one "
            "training step"
        )
    return model


def build_model(events: list[dict], devices: list[dict], path: Path | None = None) -> TraceModel:
    cpu_ops, annotations, runtime, gpu_ops, memory, steps = [], [], [], [], [], []
    for e in events:
        if not isinstance(e, dict):
            continue
        ph, cat = e.get("ph"), e.get("cat")
        if ph == "i" and e.get("name") == "[memory]":
            memory.append(_memory_sample(e))
            continue
        if ph != "X" or "ts" not in e:
            continue
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            gpu_ops.append(_gpu_op(e))
            continue
        span = Span(
            name=str(e.get("name", "")),
            cat=str(cat),
            ts=float(e["ts"]),
            dur=float(e.get("dur", 0.0)),
            tid=e.get("tid", 0),
            args=e.get("args") or {},
        )
        if cat == "cpu_op":
            cpu_ops.append(span)
        elif cat in ("cuda_runtime", "cuda_driver"):
            runtime.append(span)
        elif cat in ("user_annotation", "python_function"):
            if m := STEP_NAME.match(span.name):
                steps.append(Step(span.name, int(m.group(1)), span.ts, span.dur))
            else:
                annotations.append(span)
    steps.sort(key=lambda s: s.ts)
    main_tid = _main_thread(events, cpu_ops)
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
        devices=tuple(d for d in devices if isinstance(d, dict)),
        main_tid=main_tid,
    )


def _gpu_op(e: dict) -> GpuOp:
    args = e.get("args") or {}
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
        ts=float(e["ts"]),
        dur=float(e.get("dur", 0.0)),
        device=args.get("device"),
        stream=args.get("stream"),
        correlation=args.get("correlation"),
        bytes=int(args.get("bytes") or 0),
        direction=direction,
        host_memory=host_memory,
    )


def _memory_sample(e: dict) -> MemorySample:
    args = e.get("args") or {}
    return MemorySample(
        ts=float(e["ts"]),
        device_type=int(args.get("Device Type", CPU_DEVICE_TYPE)),
        device_id=int(args.get("Device Id", -1)),
        total_allocated=int(args.get("Total Allocated") or 0),
        total_reserved=int(args.get("Total Reserved") or 0),
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
