"""The speed of light: how far the step is from what the device could do, and why.

The step's FLOPs (counted in the capture: ``facts.flops``; or given by the trace's shapes)
at the device's peak (``env/peak.py``: measured here, a GPU's datasheet beside it) is the
*ideal* step. MFU is the ideal step over the measured one. The gap between them is split
by cause, each ms in one row:

- the step's waits, from the breakdown (doctor/breakdown.py): data loading, syncs and
  host-to-device copies, collectives; on a GPU the device's idle time by cause
  (doctor/idle.py): data, syncs, launch overhead, the host;
- **memory-bound ops**: ops whose arithmetic intensity (FLOPs per byte moved) is below the
  ridge of the roofline (peak FLOP/s over peak bytes/s): elementwise ops, norms, copies,
  small matmuls; their time beyond their FLOPs at peak;
- **compute-bound ops below peak**: the matmuls and convolutions' time beyond their FLOPs
  at peak;
- **uncounted ops**: ops with no FLOP formula (a custom C++ or Triton op);
- the rest of the step: the host's Python and framework time between ops (on a GPU: the
  device's other time).

The split is measured on the profiled steps; when the unprofiled step (the headline) is
known, the rows are scaled to it so that they add up to it.
"""

from __future__ import annotations

from dataclasses import dataclass

from torchpace.doctor.op_work import OpTime, op_times, traced_work
from torchpace.env.peak import FLOAT32, TF32, DevicePeak
from torchpace.facts.flops import FlopFacts
from torchpace.report.model import GapRow, OpRoofline, SpeedOfLightReport
from torchpace.trace.model import TraceModel

TOP_OPS = 12  # rows of the per-op roofline table
COUNTED, TRACE_SHAPES = "counted", "trace"


@dataclass(frozen=True)
class _StepWork:
    """The step's work, and where it was read: counted by the capture, else the trace's
    shapes (matmuls and convolutions only)."""

    source: str  # COUNTED or TRACE_SHAPES
    times: dict[str, OpTime]  # op name -> its time in the trace
    work: dict | None  # op name -> the counted op (its FLOPs and bytes); None from shapes
    op_flops: dict[str, tuple[float, str | None]]  # op name -> (FLOPs per step, dtype)
    flops: float
    forward: float | None
    backward: float | None
    total_bytes: float | None
    uncounted: list[str]  # ops with no FLOP formula


@dataclass(frozen=True)
class _HeldTo:
    """The peak the step's FLOPs are held to: each dtype's FLOPs at its own rate."""

    flops_by_dtype: dict[str, float]
    rate: float | None  # the mixed peak: measured, else the datasheet's
    datasheet_rate: float | None
    from_datasheet: bool  # no measured rate: the datasheet's is the peak
    bandwidth: float | None
    op_peaks: dict[str, float | None]  # op name -> its dtype's peak


def analyse(
    model: TraceModel | None,
    profile,
    peak: DevicePeak | None,
    peak_measured_here: bool = True,
) -> SpeedOfLightReport | None:
    """``profile``: the doctor's Profile (per-step metrics and the run's facts). None where
    neither the capture nor the trace gives the step's FLOPs."""
    facts = profile.facts
    counted: FlopFacts | None = facts.flops if facts is not None else None
    gpu = bool(model is not None and model.has_gpu)
    notes: list[str] = []
    work = _step_work(model, counted, gpu, notes)
    if work is None:
        return None
    if counted is not None and counted.reason:
        notes.append(f"FLOP count: {counted.reason}")
    step_ms, step_source = _step_ms(profile)
    window_ms = profile.step_ms if profile.steps else step_ms
    held = _held_to(work.op_flops, peak, gpu, profile.process, notes)
    steps = max(1, len(model.steps)) if model is not None and model.steps else 1
    ops = _roofline(work.times, work.work, steps, held.op_peaks, held.rate, held.bandwidth)
    ideal_ms = 1000 * work.flops / held.rate if held.rate else None
    gap = _split_gap(profile, ops, ideal_ms, (step_ms, step_source, window_ms), gpu, work, notes)
    uncounted_ms = sum(op.ms for op in ops if not op.has_formula and op.name in work.uncounted)
    if work.uncounted:
        notes.append(
            f"no FLOP formula for {', '.join(work.uncounted)}: "
            f"{100 * uncounted_ms / max(window_ms, 1e-9):.1f}% of the step is uncounted work"
        )
    ops.sort(key=lambda o: -o.ms)
    return SpeedOfLightReport(
        source=work.source,
        device=peak.device if peak else ("cuda" if gpu else "cpu"),
        device_name=(peak.name if peak else None) or profile.device_name,
        flops_per_step=work.flops,
        flops_forward=work.forward,
        flops_backward=work.backward,
        bytes_per_step=work.total_bytes,
        flops_by_dtype=held.flops_by_dtype,
        samples_per_step=counted.samples if work.source == COUNTED else None,
        step_ms=round(step_ms, 3),
        step_source=step_source,
        profiled_step_ms=round(window_ms, 3),
        **_rates(work.flops / (step_ms / 1000) if step_ms > 0 else 0.0, held),
        peak_bandwidth=held.bandwidth,
        datasheet_bandwidth=peak.datasheet_bandwidth if peak else None,
        peak_measured_here=peak_measured_here,
        peak_source=(
            "datasheet"
            if held.from_datasheet
            else ("measured here" if peak_measured_here else "this machine's")
        ),
        ideal_ms=round(ideal_ms, 4) if ideal_ms is not None else None,
        gap=tuple(gap),
        ops=tuple(ops[:TOP_OPS]),
        modules=tuple(counted.modules) if work.source == COUNTED else (),
        uncounted_ops=tuple(work.uncounted),
        uncounted_ms=round(uncounted_ms, 3),
        uncounted_share=round(uncounted_ms / window_ms, 4) if window_ms > 0 else 0.0,
        notes=tuple(notes),
    )


def _step_work(
    model: TraceModel | None, counted: FlopFacts | None, gpu: bool, notes: list[str]
) -> _StepWork | None:
    """The FLOP source: the capture's count when it counted any, else the trace's shapes;
    None when neither gives the step's FLOPs."""
    if counted is not None and counted.counted and counted.flops > 0:
        names = {op.name for op in counted.ops}
        return _StepWork(
            source=COUNTED,
            times=op_times(model, names, gpu) if model is not None else {},
            work={op.name: op for op in counted.ops},
            op_flops={op.name: (float(op.flops), op.dtype) for op in counted.ops if op.flops},
            flops=float(counted.flops),
            forward=float(counted.flops_forward),
            backward=float(counted.flops_backward),
            total_bytes=float(counted.bytes),
            uncounted=list(counted.uncounted_ops),
        )
    if model is None or not (traced := traced_work(model, gpu)):
        return None
    steps = max(1, len(model.steps)) if model.steps else 1
    op_flops = {name: (t.flops / steps, t.dtype) for name, t in traced.items() if t.flops}
    notes.append(
        "FLOPs from the trace's shapes: matmuls and convolutions only (other ops' work "
        "is not in a trace); run `torchpace doctor script.py` for a counted step"
    )
    return _StepWork(
        source=TRACE_SHAPES,
        times=traced,
        work=None,
        op_flops=op_flops,
        flops=sum(f for f, _ in op_flops.values()),
        forward=None,
        backward=None,
        total_bytes=None,
        uncounted=[],
    )


def _held_to(op_flops, peak: DevicePeak | None, gpu: bool, process, notes) -> _HeldTo:
    """The peak: each op's FLOPs at its precision's rate, measured here, else the
    datasheet's (a GPU trace read on a machine without it)."""
    measured = peak.matmul_flops if peak else {}
    sheet = peak.datasheet_flops if peak else {}
    keys = {name: precision(name, dtype, gpu, process, measured or sheet)
            for name, (_, dtype) in op_flops.items()}  # fmt: skip
    flops_by_dtype: dict[str, float] = {}
    for name, (f, _) in op_flops.items():
        flops_by_dtype[keys[name]] = flops_by_dtype.get(keys[name], 0.0) + f
    peak_rate = _mixed_peak(flops_by_dtype, measured, notes)
    sheet_rate = _mixed_peak(flops_by_dtype, sheet, None)
    rates = measured
    if peak_rate is None and sheet_rate is not None:
        peak_rate, rates = sheet_rate, sheet
        notes.append("the peak is the datasheet's: the device is not on this machine to measure")
    return _HeldTo(
        flops_by_dtype=flops_by_dtype,
        rate=peak_rate,
        datasheet_rate=sheet_rate,
        from_datasheet=rates is sheet and bool(sheet),
        bandwidth=(peak.bandwidth or peak.datasheet_bandwidth) if peak else None,
        op_peaks={name: rates.get(key) or rates.get(FLOAT32) for name, key in keys.items()},
    )


def _split_gap(profile, ops, ideal_ms, step, gpu: bool, work: _StepWork, notes) -> list[GapRow]:
    """The gap from the ideal step to the measured one, by cause; ``step``: (the headline
    step's ms, where it comes from, the profiled steps' ms). Empty where there is no ideal,
    no op to split, or a step at or above the peak (a peak to distrust)."""
    step_ms, step_source, window_ms = step
    gap = _gap(profile, ops, ideal_ms, window_ms, gpu, work.uncounted) if ideal_ms and ops else []
    if ideal_ms and not ops:
        notes.append("no trace of the step's ops: the gap to the speed of light is not split")
    if ideal_ms and step_ms <= ideal_ms:  # nothing to split, and a peak to distrust
        notes.append(
            "the step ran at or above the measured peak: the probe read the peak low (a busy "
            "machine while it ran?); `torchpace env --measure-peak` on a quiet machine "
            "measures it again"
        )
        return []
    if gap and step_source == "unprofiled" and window_ms > (ideal_ms or 0):
        scale = (step_ms - ideal_ms) / (window_ms - ideal_ms)
        gap = [GapRow(g.cause, round(g.ms * scale, 3), g.detail) for g in gap]
        notes.append(
            "the split is measured on the profiled steps and scaled to the unprofiled step"
        )
    return gap


def _rates(achieved: float, held: _HeldTo) -> dict:
    """The achieved FLOP/s against the peak and the datasheet's: the report's MFU fields."""
    return {
        "achieved_flop_per_s": achieved,
        "peak_flop_per_s": held.rate,
        "datasheet_flop_per_s": held.datasheet_rate,
        "mfu": achieved / held.rate if held.rate else None,
        "mfu_datasheet": achieved / held.datasheet_rate if held.datasheet_rate else None,
    }


def device_peak(
    model: TraceModel | None, profile, flops_dtypes, refresh: bool = False
) -> tuple[DevicePeak | None, bool]:
    """The peak the step is held to, and whether it was measured on the device that ran
    it: this machine's CPU or GPU for a script run here; for a GPU trace from elsewhere
    its datasheet, by the trace's device name."""
    from torchpace.env.peak import BFLOAT16, FLOAT16, cpu_dtypes, datasheet, measure_peak

    process = profile.process
    gpu = bool(model is not None and model.has_gpu)
    if gpu:
        here = process is not None and process.cuda_available and _cuda_here()
        if here:
            index = profile.device or 0
            return measure_peak(f"cuda:{index}", refresh=refresh), True
        sheet = datasheet(profile.device_name)
        if sheet is None:
            return None, False
        return DevicePeak(
            f"cuda:{profile.device or 0}",
            profile.device_name or "GPU",
            None,
            datasheet_flops=dict(sheet.flops),
            datasheet_bandwidth=sheet.bandwidth,
        ), False
    from torchpace.env.cpu import read_cpu_facts

    native = read_cpu_facts().bf16_native
    dtypes = [d for d in cpu_dtypes(native) if d == FLOAT32 or d in flops_dtypes]
    if not native and (BFLOAT16 in flops_dtypes or FLOAT16 in flops_dtypes):
        dtypes = [FLOAT32]
    threads = process.intra_op_threads if process is not None else None
    return measure_peak("cpu", dtypes, threads, refresh=refresh), process is not None


def device_peak_for_facts(facts, refresh: bool = False) -> tuple[float | None, str]:
    """The measured peak for a captured run's counted step (its device, its dtypes), and
    where it came from: what tune holds its ladder to."""
    from torchpace.env.peak import BFLOAT16, FLOAT16, cpu_dtypes, measure_peak

    process = facts.process
    dtypes = {op.name: op.dtype for op in facts.flops.ops if op.flops}
    if process is not None and process.device == "cuda" and _cuda_here():
        peak = measure_peak("cuda:0", refresh=refresh)
    else:
        from torchpace.env.cpu import read_cpu_facts

        native = read_cpu_facts().bf16_native
        wanted = set(dtypes.values())
        probe = [d for d in cpu_dtypes(native) if d == FLOAT32 or d in wanted]
        if not native and wanted & {BFLOAT16, FLOAT16}:
            probe = [FLOAT32]
        threads = process.intra_op_threads if process else None
        peak = measure_peak("cpu", probe, threads, refresh=refresh)
    gpu = peak.device.startswith("cuda")
    by_key: dict[str, float] = {}
    for op in facts.flops.ops:
        if op.flops:
            key = precision(op.name, op.dtype, gpu, process, peak.matmul_flops)
            by_key[key] = by_key.get(key, 0.0) + op.flops
    return _mixed_peak(by_key, peak.matmul_flops, None), "measured here"


def _cuda_here() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def _step_ms(profile) -> tuple[float, str]:
    t = profile.throughput
    if t is not None and t.unprofiled and t.step_ms_median:
        return float(t.step_ms_median), "unprofiled"
    return float(profile.step_ms), "profiled"


def precision(name: str, dtype: str | None, gpu: bool, process, rates: dict) -> str:
    """The peak an op runs against: its input dtype, except an fp32 op on a GPU that runs
    on tensor cores as TF32: convolutions unless the run turned cuDNN's TF32 off (torch's
    default is on), matmuls where the run turned it on (torch's default is off)."""
    dtype = dtype or FLOAT32
    if not gpu or dtype != FLOAT32 or TF32 not in rates:
        return dtype
    if "convolution" in name:
        on = process is None or process.tf32_cudnn is not False
    else:
        on = process is not None and bool(process.tf32_matmul)
    return TF32 if on else FLOAT32


def _mixed_peak(flops_by_dtype: dict[str, float], rates: dict[str, float], notes) -> float | None:
    """The peak of the step's mix of precisions: its FLOPs over the time each one's share
    takes at its own peak. A dtype not probed (bf16 on a CPU without native bf16) is held
    to the fp32 peak, its ceiling."""
    total = sum(flops_by_dtype.values())
    if total <= 0 or not rates:
        return None
    seconds = 0.0
    for dtype, flops in flops_by_dtype.items():
        rate = rates.get(dtype)
        if rate is None:
            rate = rates.get(FLOAT32)
            if rate is None:
                return None
            if notes is not None:
                notes.append(f"no {dtype} peak on this device: its FLOPs are held to fp32's")
        seconds += flops / rate
    return total / seconds


def _roofline(
    times: dict[str, OpTime], work, steps: int, op_peaks: dict, peak_rate, bandwidth
) -> list[OpRoofline]:
    out = []
    for name, t in times.items():
        op_peak = op_peaks.get(name) or peak_rate
        ridge = op_peak / bandwidth if op_peak and bandwidth else None
        if work is not None:
            w = work.get(name)
            flops = float(w.flops) if w else 0.0
            nbytes = float(w.bytes) if w else 0.0
            has_formula = bool(w and w.has_formula)
        else:  # the trace's work is over all its steps
            flops, nbytes, has_formula = t.flops / steps, t.bytes / steps, True
        ms = t.time_us / 1000 / steps
        seconds = ms / 1000
        intensity = flops / nbytes if nbytes > 0 else None
        if has_formula and flops > 0 and ridge is not None and intensity is not None:
            bound = "compute" if intensity >= ridge else "memory"
        elif nbytes > 0 and flops == 0 and (has_formula or name.startswith("aten::")):
            bound = "memory"
        elif nbytes == 0 and flops == 0 and name.startswith("aten::"):
            bound = "view"  # moves no data: its time is the framework's, host overhead
        else:
            bound = "unknown"
        floors = [
            x
            for x in (
                flops / op_peak if op_peak else None,
                nbytes / bandwidth if bandwidth else None,
            )
            if x is not None
        ]
        out.append(
            OpRoofline(
                name=name,
                calls=round(t.calls / steps, 2),
                ms=round(ms, 4),
                flops=flops,
                bytes=nbytes,
                flop_per_s=flops / seconds if seconds > 0 and flops else None,
                bytes_per_s=nbytes / seconds if seconds > 0 and nbytes else None,
                intensity=intensity,
                bound=bound,
                floor_ms=round(1000 * max(floors), 4) if floors else None,
                has_formula=has_formula,
            )
        )
    return out


def _metric(profile, name: str) -> float:
    stat = profile.metrics.get(name)
    return float(stat.median) if stat is not None else 0.0


def _gap(profile, ops, ideal_ms, window_ms, gpu: bool, uncounted) -> list[GapRow]:
    """The profiled step minus its ideal, in rows that add up to it."""
    rows: list[GapRow] = []
    if gpu:
        rows += [
            GapRow("data loading", _metric(profile, "idle_data_ms"), "GPU idle waiting for data"),
            GapRow("syncs", _metric(profile, "idle_sync_ms"), "GPU idle behind host syncs"),
            GapRow(
                "launch overhead",
                _metric(profile, "idle_launch_ms"),
                "GPU idle between kernels the host launched late",
            ),
            GapRow(
                "GPU idle (host)",
                _metric(profile, "idle_host_ms"),
                "GPU idle while the host ran Python or framework code",
            ),
            GapRow(
                "collectives",
                _metric(profile, "gpu_comm_alone_ms") + _metric(profile, "gpu_rank_wait_ms"),
                "communication not overlapped",
            ),
            GapRow("copies", _metric(profile, "gpu_copy_alone_ms"), "copies with no kernel"),
        ]
    else:
        rows += [
            GapRow(
                "data loading",
                _metric(profile, "part_data_wait_ms"),
                "the loop waiting in DataLoader __next__",
            ),
            GapRow(
                "syncs and copies",
                _metric(profile, "part_sync_ms") + _metric(profile, "part_h2d_ms"),
            ),
            GapRow(
                "collectives",
                _metric(profile, "part_collective_ms") + _metric(profile, "part_rank_wait_ms"),
            ),
        ]
    # Each op's time beyond its own FLOPs at peak (its share of the ideal step).
    memory = compute = unknown = 0.0
    total_flops = sum(o.flops for o in ops) or 1.0
    for o in ops:
        own_ideal = ideal_ms * o.flops / total_flops
        beyond = max(0.0, o.ms - own_ideal)
        if not o.has_formula and o.name in uncounted:
            unknown += o.ms
        elif o.bound == "compute":
            compute += beyond
        elif o.bound == "memory":
            memory += beyond
        elif o.bound == "unknown":
            unknown += o.ms
    rows += [
        GapRow("memory-bound ops", memory, "below the ridge of the roofline: bytes, not FLOPs"),
        GapRow("compute-bound ops below peak", compute, "matmuls/convolutions under the peak"),
        GapRow("uncounted ops", unknown, "ops with no FLOP formula"),
    ]
    rest = window_ms - ideal_ms - sum(r.ms for r in rows)
    other = "the device's other time" if gpu else "Python and framework time between ops"
    rows.append(GapRow("host overhead" if not gpu else "other", max(0.0, rest), other))
    if rest < 0:  # op spans overlap the waits (a wait inside an op): keep the rows' sum
        total = sum(r.ms for r in rows)
        target = max(0.0, window_ms - ideal_ms)
        rows = [GapRow(r.cause, r.ms * target / total if total else 0.0, r.detail) for r in rows]
    return [GapRow(r.cause, round(r.ms, 3), r.detail) for r in rows if r.ms > 0.0005]
