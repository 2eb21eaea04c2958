"""Per-step measurements from a trace model: one ``StepMetrics`` per profiled step.

The phases of a step, each measured on its own: data wait (DataLoader ``__next__`` on the
loop's thread), host time blocked in host-to-device copies and in syncs, backward (from the
first to the last autograd function of the step, on any thread), optimizer
(``Optimizer.step#``/``zero_grad#`` spans, less the closure they call: forward and backward
run inside ``optimizer.step(closure)`` in Lightning and LBFGS). The checks read these.

The step's split (``part_*``, doctor/breakdown.py) gives every microsecond of the step to
exactly one row (data wait, H2D copy, sync, collectives, waiting for other ranks, optimizer,
backward, forward, other), so the rows add up to the step; on a GPU run the device's
timeline in the step is split the same way (compute, communication alone, copies alone,
idle). The report's breakdown shows the split.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from torchpace.doctor import breakdown, gpu
from torchpace.doctor.idle import attribute_idle
from torchpace.facts.run import StepRecord
from torchpace.trace.index import TimeIndex
from torchpace.trace.model import (
    BACKWARD_PREFIX,
    CLOSURE_SPAN,
    DATALOADER_PREFIX,
    OPTIMIZER_PREFIXES,
    SYNC_RUNTIME_CALLS,
    GpuOp,
    Span,
    Step,
    TraceModel,
    is_collective_span,
)

# A top-level CPU op shorter than this is dominated by dispatch overhead (Python, the
# dispatcher, allocation) rather than arithmetic: the ops torch.compile fuses away.
TINY_CPU_OP_US = 20.0
# The ops that issue a host-to-device copy, and the channel counts of an image batch
# (grey, RGB) that could travel as uint8 and be normalised on the device instead.
COPY_OPS = ("aten::to", "aten::_to_copy")
IMAGE_CHANNELS = (1, 3)


@dataclass(frozen=True)
class DeviceMemory:
    """One device's allocator totals in one step, from the trace's [memory] samples."""

    allocated_end: float | None = None  # bytes allocated at the step's end
    peak: float | None = None  # the most bytes allocated during the step


@dataclass(frozen=True)
class StepMetrics:
    """The numbers of one step, by name: a check reading a metric that does not exist fails
    with an AttributeError instead of silently reading zero.

    Times in ms, sizes in bytes. Counts are floats: the profile's median of them can fall
    between two steps. A step known only from the run facts (no trace) has its wall time and
    data wait; the rest stays 0 and ``traced`` is False.
    """

    wall_ms: float
    # the phases of the step, each on its own (see the module's docstring)
    data_wait_ms: float = 0.0
    backward_ms: float = 0.0
    optimizer_ms: float = 0.0
    # the step's split (doctor/breakdown.py): every ms of the step in exactly one row, the
    # rows adding up to wall_ms. rank_wait: of the collectives, the time waiting for the
    # slowest rank, known only with the other ranks' traces (doctor/ranks.py)
    part_data_wait_ms: float = 0.0
    part_h2d_ms: float = 0.0
    part_forward_ms: float = 0.0
    part_backward_ms: float = 0.0
    part_optimizer_ms: float = 0.0
    part_sync_ms: float = 0.0
    part_collective_ms: float = 0.0
    part_rank_wait_ms: float = 0.0
    part_other_ms: float = 0.0
    # the device's timeline in the step (GPU runs), adding up to wall_ms with gpu_idle_ms:
    # a compute kernel runs; only communication kernels run (of which waiting for the
    # slowest rank, with the other ranks' traces); only copies/memsets run. gpu_comm_ms is
    # all the time a communication kernel runs, overlapped by compute or not
    gpu_compute_ms: float = 0.0
    gpu_comm_alone_ms: float = 0.0
    gpu_rank_wait_ms: float = 0.0
    gpu_copy_alone_ms: float = 0.0
    gpu_comm_ms: float = 0.0
    # device work the optimizer spans launched: kernel count and busy time
    optimizer_kernels: float = 0.0
    optimizer_kernel_ms: float = 0.0
    # the device's time
    gpu_busy_ms: float = 0.0
    gpu_idle_ms: float = 0.0
    launch_gap_ms: float = 0.0
    # the device's idle inside the step's span, by the cause that kept the host from
    # launching (doctor/idle.py); they add up to that idle, never more
    idle_data_ms: float = 0.0
    idle_sync_ms: float = 0.0
    idle_launch_ms: float = 0.0
    idle_host_ms: float = 0.0
    idle_copy_sync_ms: float = 0.0  # of idle_sync_ms: after syncs that finish a copy
    # host-to-device copies (gpu.CopyStats)
    h2d_ms: float = 0.0
    h2d_bytes: float = 0.0
    h2d_pageable_bytes: float = 0.0
    h2d_pinned_bytes: float = 0.0
    h2d_pageable_ms: float = 0.0
    h2d_pageable_host_ms: float = 0.0
    h2d_count: float = 0.0
    d2h_pageable_count: float = 0.0
    # host syncs (gpu.SyncStats)
    syncs: float = 0.0
    sync_wait_ms: float = 0.0
    sync_idle_ms: float = 0.0
    copy_syncs: float = 0.0
    copy_sync_wait_ms: float = 0.0
    copy_sync_idle_ms: float = 0.0
    # kernels (gpu.KernelStats)
    kernels: float = 0.0
    tiny_kernels: float = 0.0
    kernel_ms: float = 0.0
    matmul_ms: float = 0.0
    matmul_tensor_core_ms: float = 0.0
    conv_kernels: float = 0.0
    matmul_tf32_ms: float = 0.0
    layout_transpose_ms: float = 0.0
    fp32_norm_ms: float = 0.0
    fp32_elementwise_ms: float = 0.0
    # top-level CPU ops on the loop's thread outside data loading
    cpu_ops: float = 0.0
    tiny_cpu_ops: float = 0.0
    tiny_cpu_ops_ms: float = 0.0
    cpu_ops_ms: float = 0.0
    # float32 image batches copied to the device
    float_image_h2d_bytes: float = 0.0
    float_image_h2d_ms: float = 0.0
    # device key ("cpu", "cuda:0") -> allocator totals; empty without [memory] samples
    memory: Mapping[str, DeviceMemory] = field(default_factory=dict)
    traced: bool = True

    @classmethod
    def from_record(cls, record: StepRecord) -> StepMetrics:
        """A step of the run facts, for a run whose trace could not be read: its wall time,
        the data wait in it, and the rest unattributed."""
        data = min(record.data_wait_ms, record.wall_ms)
        return cls(
            wall_ms=record.wall_ms,
            data_wait_ms=record.data_wait_ms,
            part_data_wait_ms=data,
            part_other_ms=record.wall_ms - data,
            traced=False,
        )

    def measured(self) -> tuple[str, ...]:
        """The names of the numbers this step really has (the others are 0 by default)."""
        return NUMBERS if self.traced else FROM_RECORD


# Every per-step number, and those a run-facts step record gives.
NUMBERS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(StepMetrics) if f.name not in ("memory", "traced")
)
FROM_RECORD = ("wall_ms", "data_wait_ms", "part_data_wait_ms", "part_other_ms")


def metric_names(*names: str) -> tuple[str, ...]:
    """``names``, each checked to be a per-step number: a list of metrics kept elsewhere (the
    report's rows) fails at import when a metric is renamed, instead of losing a row."""
    unknown = [n for n in names if n not in NUMBERS]
    if unknown:
        raise ValueError(f"not per-step metrics (StepMetrics fields): {', '.join(unknown)}")
    return names


@dataclass(frozen=True)
class _Events:
    """The events each step reads, indexed by time once for all the steps (trace/index.py):
    every step then costs its own events, not the whole trace's."""

    main: TimeIndex[Span]  # annotations on the loop's thread
    loop_cpu: TimeIndex[Span]  # CPU ops on the loop's thread
    backward: TimeIndex[Span]  # autograd functions, on any thread
    runtime: TimeIndex[Span]
    collectives_elsewhere: TimeIndex[Span]  # collective spans on other threads
    copy_ops: TimeIndex[Span]  # aten::to / _to_copy with their input shapes
    timeline: TimeIndex[GpuOp]  # the main device's work

    @classmethod
    def of(cls, model: TraceModel, device: int | None) -> _Events:
        loop = model.main_tid
        return cls(
            main=TimeIndex(s for s in model.annotations if s.tid == loop),
            loop_cpu=TimeIndex(s for s in model.cpu_ops if s.tid == loop),
            backward=TimeIndex(s for s in model.cpu_ops if s.name.startswith(BACKWARD_PREFIX)),
            runtime=model.runtime_index,
            collectives_elsewhere=TimeIndex(
                s
                for s in (*model.cpu_ops, *model.annotations)
                if s.tid != loop and is_collective_span(s.name)
            ),
            copy_ops=TimeIndex(
                s for s in model.cpu_ops if s.name in COPY_OPS and "Input Dims" in s.args
            ),
            timeline=TimeIndex(op for op in model.gpu_ops if device is None or op.device == device),
        )


def step_metrics(model: TraceModel, rank_wait_ms: list[float] | None = None) -> list[StepMetrics]:
    """``rank_wait_ms``: per step, how long this rank waited for the slowest one inside its
    collectives (doctor/ranks.py, from every rank's trace); carved out of the collectives."""
    device = model.main_device()
    by_step = model.gpu_ops_by_step()
    runtime_by_corr = {c: s for s in model.runtime if (c := s.args.get("correlation")) is not None}
    memory = _memory(model)
    events = _Events.of(model, device)
    out = []
    for i, step in enumerate(model.steps):
        ops = [op for op in by_step[i] if device is None or op.device == device]
        m = _one_step(model, step, ops, runtime_by_corr, memory[i], events)
        if rank_wait_ms is not None and len(rank_wait_ms) == len(model.steps):
            m = with_rank_wait(m, rank_wait_ms[i])
        out.append(m)
    return out


def with_rank_wait(m: StepMetrics, wait_ms: float) -> StepMetrics:
    """The step with ``wait_ms`` (waiting for the slowest rank) taken out of its time in
    collectives, on each timeline, never more than that time: the host's collectives row
    (a gloo all-reduce, a sync while the device communicates), and on a GPU run the
    device's communication alone."""
    wait = max(0.0, wait_ms)
    host = min(wait, m.part_collective_ms)
    device = min(wait, m.gpu_comm_alone_ms)
    return dataclasses.replace(
        m,
        part_collective_ms=m.part_collective_ms - host,
        part_rank_wait_ms=host,
        gpu_comm_alone_ms=m.gpu_comm_alone_ms - device,
        gpu_rank_wait_ms=device,
    )


def _one_step(
    model: TraceModel,
    step: Step,
    ops,
    runtime_by_corr,
    memory: dict[str, DeviceMemory],
    events: _Events,
) -> StepMetrics:
    main = events.main.starting_in(step.ts, step.end)
    data = [s for s in main if s.name.startswith(DATALOADER_PREFIX)]
    optim = _outermost([s for s in main if s.name.startswith(OPTIMIZER_PREFIXES)])
    closures = [s for s in main if s.name == CLOSURE_SPAN]
    optim_pieces = _subtract([(s.ts, s.end) for s in optim], [(s.ts, s.end) for s in closures])
    backward = events.backward.starting_in(step.ts, step.end)
    runtime = events.runtime.starting_in(step.ts, step.end)
    copy_corrs = {op.correlation for op in ops if op.direction == "HtoD"}
    busy = gpu.union_us([(op.ts, op.end) for op in ops])
    image_bytes, image_ms = _float_image_copies(events, step, ops, runtime_by_corr)
    near = events.timeline.overlapping(step.ts, step.end) if ops else []
    idle = _idle_causes(model, events, step, near, data, runtime, copy_corrs) if ops else None
    return StepMetrics(
        wall_ms=step.dur / 1000,
        data_wait_ms=sum(s.dur for s in data) / 1000,
        **_split(model, events, step, main, data, optim_pieces, backward, runtime, ops, near),
        **_device_split(near, step) if ops else {},
        backward_ms=(
            (max(s.end for s in backward) - min(s.ts for s in backward)) / 1000 if backward else 0.0
        ),
        optimizer_ms=sum(b - a for a, b in optim_pieces) / 1000,
        **_optimizer_kernels(ops, runtime, optim_pieces),
        gpu_busy_ms=busy / 1000,
        # the device's idle on its timeline inside the step (ops of any step keep it busy),
        # the total that the idle causes below add up to
        gpu_idle_ms=idle.idle_ms if idle else 0.0,
        launch_gap_ms=gpu.launch_gaps_us(ops) / 1000,
        **(dataclasses.asdict(idle) if idle else {}),
        # the gpu module's stats carry the same field names as StepMetrics (a renamed one
        # fails here, as an unexpected keyword)
        **dataclasses.asdict(gpu.copy_stats(ops, runtime_by_corr)),
        **dataclasses.asdict(gpu.sync_stats(runtime, ops, copy_corrs, step.end)),
        **dataclasses.asdict(gpu.kernel_stats(ops)),
        **dataclasses.asdict(_small_ops(events, step, data)),
        float_image_h2d_bytes=image_bytes,
        float_image_h2d_ms=image_ms,
        memory=memory,
    )


def _split(
    model: TraceModel,
    events: _Events,
    step: Step,
    main: list[Span],
    data: list[Span],
    optim: list[tuple[float, float]],
    backward: list[Span],
    runtime: list[Span],
    ops: list[GpuOp],
    near: list[GpuOp],
) -> dict[str, float]:
    """The step's wall time split into rows (doctor/breakdown.py has the order and why)."""
    loop = model.main_tid
    h2d_pageable = {op.correlation for op in ops if op.kind == "memcpy" and op.direction == "HtoD"
                    and op.host_memory == "Pageable"}  # fmt: skip
    # a copy to pageable host memory (.item(), .cpu()) waits for the device: a sync
    d2h_pageable = {op.correlation for op in ops if op.kind == "memcpy" and op.direction != "HtoD"
                    and op.host_memory == "Pageable"}  # fmt: skip
    copy_syncs = _copy_syncs(runtime, {op.correlation for op in ops if op.direction == "HtoD"})
    h2d, syncs = [], []
    for x in runtime:
        corr = x.args.get("correlation")
        if corr in h2d_pageable or x in copy_syncs:
            h2d.append((x.ts, x.end))
        elif x.name in SYNC_RUNTIME_CALLS or corr in d2h_pageable:
            syncs.append((x.ts, x.end))
    syncs = breakdown.merge(syncs)
    comm_sync = breakdown.intersect(syncs, breakdown.comm_only(near, step.ts, step.end))
    loop_cpu = events.loop_cpu.starting_in(step.ts, step.end)
    loop_spans = [*loop_cpu, *main]  # main: the loop thread's annotations in the step
    collectives = [(s.ts, s.end) for s in loop_spans if is_collective_span(s.name)]
    # collectives another thread runs count where the loop's thread runs no op of its own:
    # it is waiting for them (an all-reduce overlapping its work costs nothing)
    loop_ops = breakdown.merge((s.ts, s.end) for s in loop_cpu)
    elsewhere = breakdown.subtract(
        breakdown.merge(
            (s.ts, s.end) for s in events.collectives_elsewhere.overlapping(step.ts, step.end)
        ),
        loop_ops,
    )
    autograd = breakdown.merge((s.ts, s.end) for s in backward if s.tid == loop)
    loop_work = breakdown.outside(
        [
            s
            for s in loop_spans
            if not s.name.startswith(BACKWARD_PREFIX) and not is_collective_span(s.name)
        ],
        autograd,
    )
    passes = breakdown.backward_passes(backward, loop_work)
    parts = breakdown.partition(
        step.ts,
        step.end,
        [
            ("data_wait", [(s.ts, s.end) for s in data]),
            ("h2d", h2d),
            ("collective", comm_sync),
            ("sync", syncs),
            ("collective", collectives),
            ("optimizer", optim),
            ("backward", passes),
            ("collective", elsewhere),
            ("forward", breakdown.forward_regions(step.ts, step.end, passes, optim)),
        ],
    )
    return {f"part_{row}_ms": parts.get(row, 0.0) / 1000 for row in breakdown.HOST_ROWS}


def _copy_syncs(runtime: list[Span], copy_corrs: set[int]) -> set[Span]:
    """The sync calls that finish a blocking host-to-device copy: right after the copy's
    call on the same thread (as in gpu.sync_stats)."""
    out, previous = set(), {}
    for call in sorted(runtime, key=lambda x: x.ts):
        before = previous.get(call.tid)
        if (
            call.name in SYNC_RUNTIME_CALLS
            and before is not None
            and before.args.get("correlation") in copy_corrs
        ):
            out.add(call)
        previous[call.tid] = call
    return out


def _device_split(near: list[GpuOp], step: Step) -> dict[str, float]:
    split = breakdown.device_split(near, step.ts, step.end)
    return {
        "gpu_compute_ms": split.compute_ms,
        "gpu_comm_alone_ms": split.comm_alone_ms,
        "gpu_copy_alone_ms": split.copy_alone_ms,
        "gpu_comm_ms": split.comm_ms,
    }


def _optimizer_kernels(
    ops, runtime: list[Span], optim: list[tuple[float, float]]
) -> dict[str, float]:
    """The kernels launched from inside the optimizer's spans, less any closure that runs the
    forward and backward inside ``step()`` (by the launch call's time and correlation), and
    the union of their device time."""
    if not optim:
        return {}
    launched = {
        c
        for x in runtime
        if (c := x.args.get("correlation")) is not None and any(a <= x.ts < b for a, b in optim)
    }
    kernels = [op for op in ops if op.kind == "kernel" and op.correlation in launched]
    return {
        "optimizer_kernels": float(len(kernels)),
        "optimizer_kernel_ms": gpu.union_us([(k.ts, k.end) for k in kernels]) / 1000,
    }


def _idle_causes(
    model: TraceModel, events: _Events, step: Step, near: list[GpuOp], data, runtime, copies
):
    """The device's idle in the step by cause: its ops from any step that overlap this one
    (``near``), the loop thread's data waits and syncs (those right after a copy call finish
    the copy, as in gpu.sync_stats)."""
    to_host = {op.correlation for op in near if op.kind == "memcpy" and op.direction == "DtoH"}
    to_pageable = {op.correlation for op in near if op.kind == "memcpy" and op.direction == "DtoH"
                   and op.host_memory == "Pageable"}  # fmt: skip
    loop = [
        call
        for call in sorted(runtime, key=lambda x: x.ts)
        if model.main_tid is None or call.tid == model.main_tid
    ]
    aten = [
        op for op in events.loop_cpu.starting_in(step.ts, step.end) if op.name.startswith("aten::")
    ]
    syncs, copy_syncs, previous = [], [], None
    for call in loop:
        corr = call.args.get("correlation")
        if call.name in SYNC_RUNTIME_CALLS:
            began = call.ts
            if previous is not None and previous.args.get("correlation") in to_host:
                # .item(), .cpu(): the copy to host memory and the sync that waits for it
                # are one sync, from the copy's call on
                began = previous.ts
            # ...and from the start of the op that made them (aten::item): its own host
            # work is part of what the sync costs an idle device
            began = min([began, *(op.ts for op in aten if op.ts <= began and op.end >= call.end)])
            began = dataclasses.replace(call, ts=began, dur=call.end - began)
            syncs.append(began)
            if previous is not None and previous.args.get("correlation") in copies:
                copy_syncs.append(began)
        elif corr in to_pageable:  # a copy to pageable host memory blocks until it is done
            syncs.append(call)
        previous = call
    return attribute_idle(near, step.ts, step.end, data, syncs, copy_syncs)


def _subtract(
    intervals: list[tuple[float, float]], holes: list[tuple[float, float]]
) -> list[tuple[float, float]]:
    """The parts of ``intervals`` outside every hole (each interval cut where holes fall)."""
    out = []
    for start, end in intervals:
        cursor = start
        for h_start, h_end in sorted(holes):
            if h_end <= cursor or h_start >= end:
                continue
            if h_start > cursor:
                out.append((cursor, h_start))
            cursor = max(cursor, h_end)
        if cursor < end:
            out.append((cursor, end))
    return out


def _outermost(spans: list[Span]) -> list[Span]:
    """Spans not nested inside another of the list (same thread), so time is counted once."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.ts, -s.dur)):
        if out and s.tid == out[-1].tid and s.end <= out[-1].end:
            continue
        out.append(s)
    return out


@dataclass(frozen=True)
class CpuOpStats:
    cpu_ops: float
    tiny_cpu_ops: float  # shorter than TINY_CPU_OP_US
    tiny_cpu_ops_ms: float
    cpu_ops_ms: float


def _small_ops(events: _Events, step: Step, data: list[Span]) -> CpuOpStats:
    """Top-level CPU ops on the loop's thread outside data loading: count and tiny ones."""
    ops = [
        s
        for s in events.loop_cpu.starting_in(step.ts, step.end)
        if not any(d.ts <= s.ts < d.end for d in data)
    ]
    top = _outermost(ops)
    tiny = [s for s in top if s.dur < TINY_CPU_OP_US]
    return CpuOpStats(
        cpu_ops=float(len(top)),
        tiny_cpu_ops=float(len(tiny)),
        tiny_cpu_ops_ms=sum(s.dur for s in tiny) / 1000,
        cpu_ops_ms=sum(s.dur for s in top) / 1000,
    )


def _float_image_copies(events: _Events, step: Step, ops, runtime_by_corr) -> tuple[float, float]:
    """(bytes, device ms) of host-to-device copies of float32 image batches (N, 1|3, H, W):
    shapes from the ``aten::to``/``_to_copy`` op that issued the copy (traces recorded with
    shapes)."""
    copies = [op for op in ops if op.direction == "HtoD"]
    if not copies:
        return 0.0, 0.0
    to_ops = events.copy_ops.starting_in(step.ts, step.end)
    nbytes = ms = 0.0
    for op in copies:
        call = runtime_by_corr.get(op.correlation)
        if call is None:
            continue
        issuer = next((s for s in to_ops if s.tid == call.tid and s.ts <= call.ts <= s.end), None)
        if issuer is not None and _is_float_image(issuer.args):
            nbytes += op.bytes
            ms += op.dur / 1000
    return nbytes, ms


def _is_float_image(args: dict) -> bool:
    dims, types = args.get("Input Dims") or [[]], args.get("Input type") or [""]
    shape = dims[0] if dims and isinstance(dims[0], list) else []
    return types[0] == "float" and len(shape) == 4 and shape[1] in IMAGE_CHANNELS


def _memory(model: TraceModel) -> list[dict[str, DeviceMemory]]:
    """Per step, each device's allocated bytes at the step's end and its peak during the
    step, from the [memory] samples; a device without samples in reach is left out."""
    out: list[dict[str, DeviceMemory]] = [{} for _ in model.steps]
    for key in sorted({s.device_key for s in model.memory}):
        samples = TimeIndex(s for s in model.memory if s.device_key == key)
        for step, memory in zip(model.steps, out, strict=True):
            last = samples.last_before(step.end)
            inside = [s.total_allocated for s in samples.starting_in(step.ts, step.end)]
            if last is not None:
                memory[key] = DeviceMemory(
                    allocated_end=float(last.total_allocated),
                    peak=float(max(inside)) if inside else None,
                )
    return out
