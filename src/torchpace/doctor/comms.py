"""Communication read as nccl-tests, HolisticTraceAnalysis and TraceLens read it, from one
rank's trace: per collective kind and message size, the device time, the algorithm and bus
bandwidths, the part exposed (no compute kernel beside it) and the part overlapped; and the
host blocked behind collectives (a sync or a device-to-host copy that waits on an
all-to-all), named by the ``record_function`` label around it.

Where a collective's metadata comes from, best first: PyTorch's ``record_param_comms`` span
around the launch (``Collective name``, ``In/Out msg nelems``, ``dtype``, ``Group size``),
the backend's ``nccl:<op>`` annotation (``Input Dims``, ``Input type``), the kernel's name
(``ncclKernel_AllReduce_RING_LL_Sum_float``: the kind, no size). The ranks a collective
spans (busbw's n): its ``Group size``, else the size the trace's ``distributedInfo`` gives
its process group (``pg_config``), else that trace's ``world_size`` where it lists one
process group at most; never guessed.

Bandwidths follow nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time; busbw = algbw x a
factor that makes it comparable with the link's peak whatever the collective: all-reduce
2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; broadcast, reduce, send/recv 1.
A kernel's time includes the wait for the slowest rank to arrive, so with skew its busbw
reads low: the cross-rank view (doctor/ranks.py) gives the wait apart.
"""

from __future__ import annotations

import bisect
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass

from torchpace.report.comms_model import CollectiveReport, CommunicationReport, HostBlockReport
from torchpace.trace.model import (
    SYNC_RUNTIME_CALLS,
    GpuOp,
    Span,
    TraceModel,
    is_collective_kernel,
)

# Bytes per element of the dtypes record_param_comms and the profiler's "Input type" name.
DTYPE_BYTES = {
    "float": 4, "float32": 4, "float64": 8, "double": 8, "half": 2, "float16": 2,
    "bfloat16": 2, "bf16": 2, "int": 4, "int32": 4, "int64": 8, "long": 8, "long int": 8,
    "int16": 2, "short": 2, "int8": 1, "uint8": 1, "char": 1, "byte": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1,
}  # fmt: skip
# "ncclKernel_AllReduce_RING_LL_Sum_float(...)", "ncclDevKernel_SendRecv(...)"
KERNEL_KIND = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
# The same collective under the names the three sources give it.
KIND_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "_all_gather_base": "all_gather", "allgather_into_tensor_coalesced": "all_gather",
    "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "broadcast": "broadcast", "reduce": "reduce",
    "sendrecv": "send_recv", "send": "send_recv", "recv": "send_recv", "barrier": "barrier",
}  # fmt: skip


def bus_factor(kind: str, ranks: int | None) -> float | None:
    """nccl-tests' busbw / algbw for a collective over ``ranks`` ranks (None: unknown n)."""
    if kind in ("broadcast", "reduce", "send_recv"):
        return 1.0
    if not ranks or ranks < 1:
        return None
    n = ranks
    if kind == "all_reduce":
        return 2 * (n - 1) / n
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return None


# Unidirectional NVLink bandwidth per GPU, GB/s, from the vendors' datasheets: the peak busbw
# an intra-node collective can reach. Across nodes the network's rate is the limit instead,
# which a trace does not record.
NVLINK_PEAK_GBPS = (("H200", 450.0), ("H100", 450.0), ("A100", 300.0), ("V100", 150.0))


def link_peak(model: TraceModel) -> tuple[str, float] | None:
    for device in model.devices:
        name = str(device.get("name", ""))
        for part, peak in NVLINK_PEAK_GBPS:
            if part in name and "PCIe" not in name:
                return f"{part} NVLink", peak
    return None


@dataclass(frozen=True)
class Collective:
    """One collective kernel with what is known of the call that launched it."""

    kind: str
    size_bytes: int | None
    ranks: int | None
    group: str | None  # the process group's name, where the trace records it
    kernel: GpuOp
    exposed_us: float  # its time with no compute kernel running on the device


def read_communication(model: TraceModel) -> CommunicationReport | None:
    """The trace's communication, or None when it ran no collective kernel."""
    kernels = [op for op in model.gpu_ops if op.kind == "kernel"]
    comm = sorted((k for k in kernels if is_collective_kernel(k.name)), key=lambda k: k.ts)
    if not comm or not model.steps:
        return None
    compute = _merged((k.ts, k.end) for k in kernels if not is_collective_kernel(k.name))
    calls = _CallIndex(model)
    collectives = [
        Collective(*calls.describe(k), kernel=k, exposed_us=k.dur - _covered(compute, k.ts, k.end))
        for k in comm
    ]
    steps = len(model.steps)
    peak = link_peak(model)
    ms = sum(c.kernel.dur for c in collectives) / 1000 / steps
    exposed = sum(c.exposed_us for c in collectives) / 1000 / steps
    host_blocked = _host_blocked(model, comm, steps)
    return CommunicationReport(
        ms_per_step=ms,
        exposed_ms_per_step=exposed,
        overlapped_ms_per_step=ms - exposed,
        host_blocked_ms_per_step=sum(b.ms_per_step for b in host_blocked),
        link=peak[0] if peak else None,
        link_peak_gbps=peak[1] if peak else None,
        collectives=_rows(collectives, steps),
        host_blocked=host_blocked,
    )


def collective_calls(model: TraceModel) -> list[tuple[GpuOp, str, str | None, float]]:
    """Every collective kernel in the order the device ran them, as (kernel, kind, process
    group, the time the host launched it): the cross-rank split (doctor/skew.py) matches
    calls across ranks by these."""
    calls = _CallIndex(model)
    out = []
    for k in sorted((k for k in model.gpu_ops if k.kind == "kernel"), key=lambda k: k.ts):
        if not is_collective_kernel(k.name):
            continue
        kind, _, _, group = calls.describe(k)
        launch = calls.launch.get(k.correlation) if k.correlation is not None else None
        out.append((k, kind, group, launch.ts if launch is not None else k.ts))
    return out


class _CallIndex:
    """What launched a kernel: the runtime call with its correlation id, and the collective
    spans around that call on its thread."""

    def __init__(self, model: TraceModel):
        self.launch: dict[int, Span] = {
            c: s for s in model.runtime if (c := s.args.get("correlation")) is not None
        }
        by_tid: dict = defaultdict(list)
        for s in (*model.cpu_ops, *model.annotations):
            if s.name == "record_param_comms" or s.name.startswith("nccl:"):
                by_tid[s.tid].append(s)
        self.spans = {tid: sorted(spans, key=lambda s: s.ts) for tid, spans in by_tid.items()}
        self.starts = {tid: [s.ts for s in spans] for tid, spans in self.spans.items()}
        self.distributed = model.distributed

    def describe(self, kernel: GpuOp) -> tuple[str, int | None, int | None, str | None]:
        """(kind, message bytes, ranks, process group) of the call that launched ``kernel``."""
        kind, size, ranks, group = _kernel_kind(kernel.name), None, None, None
        launch = self.launch.get(kernel.correlation) if kernel.correlation is not None else None
        for span in self._around(launch) if launch is not None else ():
            args = span.args
            if span.name == "record_param_comms":
                if name := args.get("Collective name"):
                    kind = KIND_ALIASES.get(str(name).lower(), str(name).lower())
                nelems = max(_int(args.get("In msg nelems")), _int(args.get("Out msg nelems")))
                width = DTYPE_BYTES.get(str(args.get("dtype", "")).lower())
                if size is None and nelems and width:
                    size = nelems * width
                ranks = ranks or _int(args.get("Group size")) or None
                if group is None and args.get("Process Group Name") is not None:
                    group = str(args["Process Group Name"])
            else:  # "nccl:all_reduce" with the tensor's dims and type
                kind = KIND_ALIASES.get(span.name.removeprefix("nccl:"), kind)
                if size is None:
                    size = _annotation_bytes(args)
        if ranks is None and self.distributed is not None:
            ranks = self.distributed.group_size(group)
        return kind, size, ranks, group

    def _around(self, launch: Span) -> list[Span]:
        """The collective spans on the launch's thread that contain it, innermost first."""
        starts = self.starts.get(launch.tid)
        if not starts:
            return []
        spans = self.spans[launch.tid]
        i = bisect.bisect_right(starts, launch.ts)
        out = []
        # a collective span holds a handful of launches: look back a few spans only
        for s in reversed(spans[max(0, i - 8) : i]):
            if s.ts <= launch.ts <= s.end:
                out.append(s)
        return out


def _kernel_kind(name: str) -> str:
    m = KERNEL_KIND.search(name)
    if not m:
        return "other"
    return KIND_ALIASES.get(m.group(1).lower(), m.group(1).lower())


def _annotation_bytes(args: dict) -> int | None:
    dims, types = args.get("Input Dims"), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list):
        return None
    total = 0
    for shape, dtype in zip(dims, types, strict=False):
        width = DTYPE_BYTES.get(str(dtype).lower())
        if not width or not isinstance(shape, list):
            continue
        n = 1
        for d in shape:
            n *= int(d) if isinstance(d, int) else 1
        total += n * width
    return total or None


def _int(x) -> int:
    try:
        return int(x)
    except (TypeError, ValueError):
        return 0


def _rows(collectives: list[Collective], steps: int) -> tuple[CollectiveReport, ...]:
    groups: dict[tuple, list[Collective]] = defaultdict(list)
    for c in collectives:
        groups[(c.kind, c.size_bytes, c.ranks)].append(c)
    rows = []
    for (kind, size, ranks), calls in groups.items():
        algbw = busbw = None
        if size:
            rates = [size / c.kernel.dur / 1e3 for c in calls if c.kernel.dur > 0]  # GB/s
            algbw = statistics.median(rates) if rates else None
            factor = bus_factor(kind, ranks)
            busbw = algbw * factor if algbw is not None and factor is not None else None
        ms = sum(c.kernel.dur for c in calls) / 1000 / steps
        exposed = sum(c.exposed_us for c in calls) / 1000 / steps
        rows.append(
            CollectiveReport(
                kind=kind,
                size_bytes=size,
                ranks=ranks,
                calls_per_step=len(calls) / steps,
                ms_per_step=ms,
                exposed_ms_per_step=exposed,
                overlapped_ms_per_step=ms - exposed,
                algbw_gbps=algbw,
                busbw_gbps=busbw,
            )
        )
    return tuple(sorted(rows, key=lambda r: -r.ms_per_step))


# A blocking call counts as blocked behind communication when collective kernels ran during
# at least this share of the device's busy time inside it.
BEHIND_SHARE = 0.5


def _host_blocked(model: TraceModel, comm: list[GpuOp], steps: int) -> tuple[HostBlockReport, ...]:
    """Blocking calls on the loop's thread during which the device mostly ran collectives:
    a ``.item()``/``.cpu()`` or a stream sync queued after an all-to-all waits for it."""
    blocking = [
        s for s in model.runtime if s.name in SYNC_RUNTIME_CALLS and s.tid == model.main_tid
    ]
    if not blocking:
        return ()
    comm_iv = _merged((k.ts, k.end) for k in comm)
    busy_iv = _merged((op.ts, op.end) for op in model.gpu_ops)
    compute_iv = _merged(
        (op.ts, op.end)
        for op in model.gpu_ops
        if op.kind == "kernel" and not is_collective_kernel(op.name)
    )
    alone_iv = _subtract(comm_iv, compute_iv)  # the device only communicating: TP506's time
    labels = _LabelIndex(model)
    kinds = sorted(comm, key=lambda k: k.end)
    ends = [k.end for k in kinds]
    total: dict[tuple, float] = defaultdict(float)
    for s in blocking:
        in_comm = _covered(comm_iv, s.ts, s.end)
        busy = _covered(busy_iv, s.ts, s.end)
        if in_comm <= 0 or busy <= 0 or in_comm / busy < BEHIND_SHARE:
            continue
        # the collective that was running when the wait ended (the last to end before it)
        i = max(0, bisect.bisect_right(ends, s.end) - 1)
        behind = _kernel_kind(kinds[i].name)
        # the part of the wait the device spent only communicating is the exposed
        # communication (the breakdown's collective row, TP506): counted there, not here
        total[(labels.innermost(s), s.name, behind)] += s.dur - _covered(alone_iv, s.ts, s.end)
    blocks = [
        HostBlockReport(label=label, call=call, ms_per_step=us / 1000 / steps, behind=behind)
        for (label, call, behind), us in total.items()
        if us > 0
    ]
    return tuple(sorted(blocks, key=lambda b: -b.ms_per_step))


class _LabelIndex:
    """The innermost user annotation (``record_function`` label) around a span, per thread:
    the annotations that started before it, looked at latest first, up to the first that
    holds it (annotations on one thread nest, so a later one that ended before the span
    cannot hold it, and the walk back stops at the first that does)."""

    # How far back the walk looks: a label holds a handful of nested ones at most; past
    # this, the span is taken to have no label (a flat list of finished annotations).
    LOOK_BACK = 64

    def __init__(self, model: TraceModel):
        by_tid: dict = defaultdict(list)
        for a in model.annotations:
            if a.cat == "user_annotation" and not a.name.startswith(("nccl:", "gloo:")):
                by_tid[a.tid].append(a)
        self.spans = {tid: sorted(spans, key=lambda a: a.ts) for tid, spans in by_tid.items()}
        self.starts = {tid: [a.ts for a in spans] for tid, spans in self.spans.items()}

    def innermost(self, span: Span) -> str | None:
        spans = self.spans.get(span.tid)
        if not spans:
            return None
        i = bisect.bisect_right(self.starts[span.tid], span.ts)
        for a in reversed(spans[max(0, i - self.LOOK_BACK) : i]):
            if a.end >= span.end:
                return a.name
        return None


def _merged(intervals) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _subtract(a: list[tuple[float, float]], b: list[tuple[float, float]]):
    """The parts of merged intervals ``a`` that merged intervals ``b`` do not cover."""
    out, j = [], 0
    for lo, hi in a:
        while j < len(b) and b[j][1] <= lo:
            j += 1
        k, start = j, lo
        while k < len(b) and b[k][0] < hi:
            if b[k][0] > start:
                out.append((start, b[k][0]))
            start = max(start, b[k][1])
            k += 1
        if start < hi:
            out.append((start, hi))
    return out


def _covered(merged: list[tuple[float, float]], a: float, b: float) -> float:
    """How much of [a, b] the merged intervals cover."""
    i = max(0, bisect.bisect_right(merged, (a, float("inf"))) - 1)
    covered = 0.0
    while i < len(merged) and merged[i][0] < b:
        lo, hi = max(a, merged[i][0]), min(b, merged[i][1])
        if hi > lo:
            covered += hi - lo
        i += 1
    return covered
