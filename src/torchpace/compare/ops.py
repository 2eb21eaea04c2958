"""The operators and kernels whose time changed most between two traces.

Like HolisticTraceAnalysis's trace diff, events are matched by name and compared by count
and total duration; here both are per step (each trace's own step count), so that two runs
that profiled a different number of steps still compare. GPU traces compare their kernels
and copies (device time); CPU-only traces their ``aten::`` operators (inclusive host time,
so an op's time includes the ops it calls).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

# Names longer than this (templated CUDA kernels run to hundreds of characters) are cut.
MAX_NAME = 120


@dataclass(frozen=True)
class OpTotals:
    kind: str  # "kernel" (device time) or "cpu op" (host time)
    steps: int
    ms: dict[str, float]  # name -> total ms in the steps
    count: dict[str, int]


def op_totals(trace: Path, model=None) -> OpTotals:
    """``model``: the trace's model when it was already read (a large trace is read once)."""
    from torchpace.trace import load_trace

    model = model if model is not None else load_trace(trace)
    steps = model.steps
    lo = min((s.ts for s in steps), default=None)
    hi = max((s.end for s in steps), default=None)

    def inside(ts: float) -> bool:
        return lo is None or lo <= ts <= hi

    ms: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    if model.has_gpu:
        launched = model.launch_ts()
        for op in model.gpu_ops:
            when = launched.get(op.correlation, op.ts) if op.correlation is not None else op.ts
            if inside(when):
                ms[op.name] += op.dur / 1000
                count[op.name] += 1
        kind = "kernel"
    else:
        for span in model.cpu_ops:
            if span.name.startswith("aten::") and inside(span.ts):
                ms[span.name] += span.dur / 1000
                count[span.name] += 1
        kind = "cpu op"
    return OpTotals(kind, max(len(steps), 1), dict(ms), dict(count))


def op_deltas(a: OpTotals, b: OpTotals, top: int = 15) -> list[dict]:
    """The ``top`` names whose time per step changed most, biggest change first."""
    rows = []
    for name in set(a.ms) | set(b.ms):
        a_ms, b_ms = a.ms.get(name, 0.0) / a.steps, b.ms.get(name, 0.0) / b.steps
        rows.append(
            {
                "name": name if len(name) <= MAX_NAME else name[: MAX_NAME - 1] + "…",
                "a_ms_per_step": round(a_ms, 4),
                "b_ms_per_step": round(b_ms, 4),
                "delta_ms_per_step": round(b_ms - a_ms, 4),
                "a_count_per_step": round(a.count.get(name, 0) / a.steps, 2),
                "b_count_per_step": round(b.count.get(name, 0) / b.steps, 2),
            }
        )
    rows.sort(key=lambda r: (-abs(r["delta_ms_per_step"]), r["name"]))
    return rows[:top]
