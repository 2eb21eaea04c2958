"""Each op's time in the profiled steps, and its work where the trace alone gives it.

Times: the outermost span of each op of interest on its thread (``aten::linear`` is left out
when ``aten::addmm`` inside it is what was counted), outside DataLoader fetches (the
collate's ops are the loader's time, a wait in the speed of light's split); on a GPU the
kernels the op launched (through the runtime call's correlation id) instead of the host's
span. Work from the trace (``doctor --trace``): the profiler's own ``flops`` argument
(``with_flops=True``), else the shapes (``record_shapes=True``) of the matmuls and
convolutions, with the formulas ``torch.utils.flop_counter`` uses.
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass

from torchpace.trace.model import DATALOADER_PREFIX, Span, TraceModel

# Ops whose FLOPs the trace's shapes give (the profiler's spelling).
SHAPE_FORMULA_OPS = (
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::convolution",
    "aten::convolution_backward",
)
# The profiler's with_flops also counts these elementwise ops; MFU's convention (and the
# counted step's) does not, so their "flops" argument is left out.
ELEMENTWISE_WITH_FLOPS = frozenset({"aten::mul", "aten::add", "aten::mul_", "aten::add_"})
# Bytes of one element, by the profiler's "Input type" spelling.
ELEMENT_BYTES = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "int": 4,
    "long int": 8,
}


@dataclass
class OpTime:
    calls: int = 0
    time_us: float = 0.0  # the host span's, or the kernels' on a GPU run
    flops: float = 0.0  # from the trace (``traced_work``); 0 where it gives none
    bytes: float = 0.0
    dtype: str | None = None


def op_times(model: TraceModel, names: set[str], device_time: bool) -> dict[str, OpTime]:
    """Op name -> its calls and time over all of the model's steps (the caller divides by
    the steps)."""
    loader = sorted(
        (s.ts, s.end) for s in model.annotations if s.name.startswith(DATALOADER_PREFIX)
    )
    kernels = _kernel_time_by_launch(model) if device_time else None
    out: dict[str, OpTime] = defaultdict(OpTime)
    for span in outermost(model, names):
        if _inside(loader, span.ts):
            continue
        t = out[span.name]
        t.calls += 1
        t.time_us += kernels(span) if kernels else span.dur
    return dict(out)


def outermost(model: TraceModel, names: set[str]) -> list[Span]:
    """Spans named in ``names`` within the model's steps and inside no other such span of
    their thread."""
    if not model.steps:
        return []
    lo, hi = model.steps[0].ts, model.steps[-1].end
    by_thread: dict = defaultdict(list)
    for s in model.cpu_ops:
        if s.name in names and lo <= s.ts < hi:
            by_thread[s.tid].append(s)
    out = []
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s.ts, -s.dur))
        claimed_until = -math.inf
        for s in spans:
            if s.ts < claimed_until:
                continue
            out.append(s)
            claimed_until = s.end
    return out


def _inside(intervals: list[tuple[float, float]], ts: float) -> bool:
    i = bisect.bisect_right(intervals, (ts, math.inf)) - 1
    return i >= 0 and intervals[i][0] <= ts < intervals[i][1]


def _kernel_time_by_launch(model: TraceModel):
    """span -> the device time of the kernels its thread launched while it ran."""
    device_us: dict[int, float] = defaultdict(float)
    for op in model.gpu_ops:
        if op.correlation is not None:
            device_us[op.correlation] += op.dur
    launches: dict = defaultdict(list)
    for r in model.runtime:
        c = r.args.get("correlation")
        if c is not None and c in device_us:
            launches[r.tid].append((r.ts, device_us[c]))
    for calls in launches.values():
        calls.sort()
    starts = {tid: [ts for ts, _ in calls] for tid, calls in launches.items()}

    def kernels(span: Span) -> float:
        calls = launches.get(span.tid, [])
        i = bisect.bisect_left(starts.get(span.tid, []), span.ts)
        total = 0.0
        while i < len(calls) and calls[i][0] < span.end:
            total += calls[i][1]
            i += 1
        return total

    return kernels


# --- work from the trace alone -------------------------------------------------------------
def traced_work(model: TraceModel, device_time: bool) -> dict[str, OpTime]:
    """Op name -> time and the FLOPs/bytes the trace gives (its ``flops`` argument, else the
    shapes of the matmuls and convolutions); empty when the trace has neither."""
    flops_args = {s.name for s in model.cpu_ops if "flops" in s.args}
    names = set(SHAPE_FORMULA_OPS) | (flops_args - ELEMENTWISE_WITH_FLOPS)
    spans = [s for s in outermost(model, names)]
    if not any("flops" in s.args or "Input Dims" in s.args for s in spans):
        return {}
    loader = sorted(
        (s.ts, s.end) for s in model.annotations if s.name.startswith(DATALOADER_PREFIX)
    )
    kernels = _kernel_time_by_launch(model) if device_time else None
    out: dict[str, OpTime] = defaultdict(OpTime)
    for s in spans:
        if _inside(loader, s.ts):
            continue
        work = span_work(s)
        if work is None:
            continue
        t = out[s.name]
        t.calls += 1
        t.time_us += kernels(s) if kernels else s.dur
        t.flops += work[0]
        t.bytes += work[1]
        t.dtype = t.dtype or work[2]
    return dict(out)


def span_work(span: Span) -> tuple[float, float, str | None] | None:
    """(FLOPs, bytes, dtype) of one op span, or None where its arguments do not give them."""
    args = span.args
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    dtype = types[0] if types else None
    size = ELEMENT_BYTES.get(dtype or "", 4)
    flops = args.get("flops")
    try:
        if flops is None:
            flops, out_numel = _shape_flops(span.name, dims, args.get("Concrete Inputs") or [])
        else:
            out_numel = 0
    except (IndexError, ValueError, TypeError, ZeroDivisionError):
        return None
    if flops is None:
        return None
    in_numel = sum(math.prod(d) for d in dims if isinstance(d, list) and d)
    return float(flops), float((in_numel + out_numel) * size), _dtype_name(dtype)


def _dtype_name(profiler_type: str | None) -> str | None:
    return {
        "float": "float32",
        "c10::Half": "float16",
        "c10::BFloat16": "bfloat16",
        "double": "float64",
    }.get(profiler_type or "")


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.strip("[]").split(",") if x.strip()]


def _shape_flops(name: str, dims: list, concrete: list) -> tuple[int | None, int]:
    """FLOPs and output elements from the input shapes (torch.utils.flop_counter's
    formulas: a multiply-add is two FLOPs; a bias add is not counted)."""
    if name == "aten::mm":
        (m, k), (_, n) = dims[0], dims[1]
        return 2 * m * k * n, m * n
    if name == "aten::addmm":
        (m, k), (_, n) = dims[1], dims[2]
        return 2 * m * k * n, m * n
    if name in ("aten::bmm", "aten::baddbmm"):
        a, b = (dims[0], dims[1]) if name == "aten::bmm" else (dims[1], dims[2])
        batch, m, k = a
        return 2 * batch * m * k * b[2], batch * m * b[2]
    if name == "aten::convolution":
        x, w = dims[0], dims[1]
        stride, padding, dilation = _ints(concrete[3]), _ints(concrete[4]), _ints(concrete[5])
        transposed = concrete[6] == "True"
        if transposed:
            return 2 * x[0] * math.prod(x[2:]) * math.prod(w), 0
        out = [
            (size + 2 * p - d * (k - 1) - 1) // s + 1
            for size, k, s, p, d in zip(x[2:], w[2:], stride, padding, dilation, strict=True)
        ]
        return 2 * x[0] * math.prod(out) * math.prod(w), x[0] * w[0] * math.prod(out)
    if name == "aten::convolution_backward":
        grad_out, w = dims[0], dims[2]
        mask = [m.strip() == "True" for m in concrete[10].strip("[]").split(",")]
        if concrete[6] == "True":  # transposed: the input's spatial size sets the work
            per_grad = 2 * dims[1][0] * math.prod(dims[1][2:]) * math.prod(w)
        else:
            per_grad = 2 * grad_out[0] * math.prod(grad_out[2:]) * math.prod(w)
        return per_grad * (int(mask[0]) + int(mask[1])), 0
    return None, 0
