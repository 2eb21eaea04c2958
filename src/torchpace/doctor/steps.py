"""Per-step measurements from a trace model: one dict of named numbers per profiled step.

The CPU split of a step: data wait (DataLoader ``__next__`` on the loop's thread), host time
blocked in host-to-device copies and in syncs, backward (from the first to the last autograd
function of the step, on any thread), optimizer (``Optimizer.step#``/``zero_grad#`` spans),
and forward, which is the rest of the step: the model's forward plus the loop's own Python.
"""

from __future__ import annotations

from torchpace.doctor import gpu
from torchpace.trace.model import (
    BACKWARD_PREFIX,
    DATALOADER_PREFIX,
    OPTIMIZER_PREFIXES,
    SYNC_RUNTIME_CALLS,
    Span,
    Step,
    TraceModel,
)

# A top-level CPU op shorter than this is dominated by dispatch overhead (Python, the
# dispatcher, allocation) rather than arithmetic: the ops torch.compile fuses away.
TINY_CPU_OP_US = 20.0
# The ops that issue a host-to-device copy, and the channel counts of an image batch
# (grey, RGB) that could travel as uint8 and be normalised on the device instead.
COPY_OPS = ("aten::to", "aten::_to_copy")
IMAGE_CHANNELS = (1, 3)


def step_metrics(model: TraceModel) -> list[dict[str, float]]:
    device = model.main_device()
    by_step = model.gpu_ops_by_step()
    runtime_by_corr = {c: s for s in model.runtime if (c := s.args.get("correlation")) is not None}
    out = []
    for i, step in enumerate(model.steps):
        ops = [op for op in by_step[i] if device is None or op.device == device]
        out.append(_one_step(model, step, ops, runtime_by_corr))
    _add_memory(model, out)
    return out


def _one_step(model: TraceModel, step: Step, ops, runtime_by_corr) -> dict[str, float]:
    main = [s for s in model.annotations if s.tid == model.main_tid and step.contains(s.ts)]
    data = [s for s in main if s.name.startswith(DATALOADER_PREFIX)]
    optim = _outermost([s for s in main if s.name.startswith(OPTIMIZER_PREFIXES)])
    backward = [s for s in model.cpu_ops if s.name.startswith(BACKWARD_PREFIX)]
    backward = [s for s in backward if step.contains(s.ts)]
    runtime = [s for s in model.runtime if step.contains(s.ts)]
    m: dict[str, float] = {"wall_ms": step.dur / 1000}
    m["data_wait_ms"] = sum(s.dur for s in data) / 1000
    m["optimizer_ms"] = sum(s.dur for s in optim) / 1000
    m["backward_ms"] = (
        (max(s.end for s in backward) - min(s.ts for s in backward)) / 1000 if backward else 0.0
    )
    m.update(gpu.copy_stats(ops, runtime_by_corr))
    copy_corrs = {op.correlation for op in ops if op.direction == "HtoD"}
    m.update(gpu.sync_stats(runtime, ops, copy_corrs, step.end))
    m.update(gpu.kernel_stats(ops))
    busy = gpu.union_us([(op.ts, op.end) for op in ops])
    m["gpu_busy_ms"] = busy / 1000
    m["gpu_idle_ms"] = max(0.0, step.dur - busy) / 1000 if ops else 0.0
    m["launch_gap_ms"] = gpu.launch_gaps_us(ops) / 1000
    # The rest of the step is "forward": the union of the other phases is taken so that a
    # sync inside the optimizer, say, is not taken out twice.
    others = [(x.ts, x.end) for x in data + optim]
    if backward:
        others.append((min(x.ts for x in backward), max(x.end for x in backward)))
    pageable = {op.correlation for op in ops if op.host_memory == "Pageable"}
    others += [
        (x.ts, x.end)
        for x in runtime
        if x.name in SYNC_RUNTIME_CALLS or x.args.get("correlation") in pageable
    ]
    clipped = [(max(a, step.ts), min(b, step.end)) for a, b in others if b > step.ts]
    m["forward_ms"] = max(0.0, step.dur - gpu.union_us(clipped)) / 1000
    m.update(_small_ops(model, step, data))
    m.update(_float_image_copies(model, step, ops, runtime_by_corr))
    return m


def _outermost(spans: list[Span]) -> list[Span]:
    """Spans not nested inside another of the list (same thread), so time is counted once."""
    out: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.ts, -s.dur)):
        if out and s.tid == out[-1].tid and s.end <= out[-1].end:
            continue
        out.append(s)
    return out


def _small_ops(model: TraceModel, step: Step, data: list[Span]) -> dict[str, float]:
    """Top-level CPU ops on the loop's thread outside data loading: count and tiny ones."""
    ops = [
        s
        for s in model.cpu_ops
        if s.tid == model.main_tid
        and step.contains(s.ts)
        and not any(d.ts <= s.ts < d.end for d in data)
    ]
    top = _outermost(ops)
    tiny = [s for s in top if s.dur < TINY_CPU_OP_US]
    return {
        "cpu_ops": float(len(top)),
        "tiny_cpu_ops": float(len(tiny)),
        "tiny_cpu_ops_ms": sum(s.dur for s in tiny) / 1000,
        "cpu_ops_ms": sum(s.dur for s in top) / 1000,
    }


def _float_image_copies(model: TraceModel, step: Step, ops, runtime_by_corr) -> dict:
    """Host-to-device copies of float32 image batches (N, 1|3, H, W): shapes from the
    ``aten::to``/``_to_copy`` op that issued the copy (traces recorded with shapes)."""
    copies = [op for op in ops if op.direction == "HtoD"]
    if not copies:
        return {"float_image_h2d_bytes": 0.0, "float_image_h2d_ms": 0.0}
    to_ops = [
        s
        for s in model.cpu_ops
        if s.name in COPY_OPS and step.contains(s.ts) and "Input Dims" in s.args
    ]
    nbytes = ms = 0.0
    for op in copies:
        call = runtime_by_corr.get(op.correlation)
        if call is None:
            continue
        issuer = next((s for s in to_ops if s.tid == call.tid and s.ts <= call.ts <= s.end), None)
        if issuer is not None and _is_float_image(issuer.args):
            nbytes += op.bytes
            ms += op.dur / 1000
    return {"float_image_h2d_bytes": nbytes, "float_image_h2d_ms": ms}


def _is_float_image(args: dict) -> bool:
    dims, types = args.get("Input Dims") or [[]], args.get("Input type") or [""]
    shape = dims[0] if dims and isinstance(dims[0], list) else []
    return types[0] == "float" and len(shape) == 4 and shape[1] in IMAGE_CHANNELS


def _add_memory(model: TraceModel, metrics: list[dict[str, float]]) -> None:
    """Allocated bytes at each step's end and the peak during it, per device, from [memory]."""
    if not model.memory:
        return
    keys = sorted({s.device_key for s in model.memory})
    for key in keys:
        samples = [s for s in model.memory if s.device_key == key]
        for step, m in zip(model.steps, metrics, strict=True):
            before_end = [s for s in samples if s.ts < step.end]
            inside = [s.total_allocated for s in before_end if s.ts >= step.ts]
            if before_end:
                m[f"{key}_allocated_end"] = float(before_end[-1].total_allocated)
            if inside:
                m[f"{key}_peak"] = float(max(inside))
