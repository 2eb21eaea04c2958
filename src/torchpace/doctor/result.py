"""The doctor's report (report/model.DoctorReport), built here once from the diagnosis, beside
what it reads, so that the report package renders typed data and never imports the doctor.
``diagnosis_to_dict`` is the JSON that `--json` writes."""

from __future__ import annotations

import importlib.metadata
import platform

from torchpace import catalog
from torchpace._version import __version__
from torchpace.doctor.analyze import Diagnosis
from torchpace.doctor.coverage import coverage
from torchpace.doctor.memory_result import memory_report
from torchpace.doctor.steps import metric_names
from torchpace.report.model import (
    GPU_BUSY,
    NO_BOTTLENECK,
    PERFETTO_HINT,
    SCHEMA_VERSION,
    TRACE_STATUS,
    CrossRank,
    Device,
    DoctorReport,
    Env,
    FilesReport,
    GpuPart,
    GpuReport,
    ProfiledStep,
    ProfilerLog,
    RecordedStep,
    ReportedFinding,
    Row,
    Stat,
    StepAllocator,
)

__all__ = ["NO_BOTTLENECK", "PERFETTO_HINT", "SCHEMA_VERSION", "TRACE_STATUS"]
# The step breakdown's rows (report/model.Row) -> the step's part (StepMetrics.part_*,
# doctor/breakdown.py).
BREAKDOWN = dict(
    zip(
        Row,
        metric_names(
            "part_data_wait_ms",
            "part_h2d_ms",
            "part_forward_ms",
            "part_backward_ms",
            "part_optimizer_ms",
            "part_sync_ms",
            "part_collective_ms",
            "part_rank_wait_ms",
            "part_other_ms",
        ),
        strict=True,
    )
)
# The device's timeline in the step (GPU runs), split the same way: they add up to the step.
GPU_SPLIT = metric_names(*(part.value for part in GpuPart))
GPU_METRICS = metric_names(
    "gpu_busy_ms",
    "gpu_idle_ms",
    "gpu_compute_ms",
    "gpu_comm_ms",
    "gpu_comm_alone_ms",
    "gpu_rank_wait_ms",
    "gpu_copy_alone_ms",
    "idle_data_ms",
    "idle_sync_ms",
    "idle_launch_ms",
    "idle_host_ms",
    "kernels",
    "tiny_kernels",
    "launch_gap_ms",
    "matmul_ms",
    "matmul_tensor_core_ms",
    "matmul_tf32_ms",
    "layout_transpose_ms",
    "fp32_norm_ms",
    "fp32_elementwise_ms",
    "optimizer_kernels",
    "optimizer_kernel_ms",
    "h2d_ms",
    "h2d_bytes",
    "h2d_pageable_bytes",
    "h2d_pinned_bytes",
    "syncs",
    "sync_idle_ms",
)


def build_report(
    d: Diagnosis,
    command: list[str] | None = None,
    env: Env | None = None,
    cross_rank: CrossRank | None = None,
    profiler_log: ProfilerLog | None = None,
    files: FilesReport | None = None,
) -> DoctorReport:
    """``env``: this environment's versions, only when the script ran here (not --trace)."""
    p, facts = d.profile, d.profile.facts
    gpu = None
    if p.has_gpu:
        stats = {m: Stat.of(p.metrics[m]) for m in GPU_METRICS if m in p.metrics}
        gpu = GpuReport(stats, p.matmul_dtypes)
    command = command or (facts.command if facts else None)
    return DoctorReport(
        torchpace=__version__,
        command=tuple(command) if command else None,
        status=str(facts.status) if facts else TRACE_STATUS,
        error=facts.error if facts else None,
        env=env,
        steps_captured=p.steps,
        whole_trace_as_one_step=p.synthetic_steps,
        step_note=facts.step_note if facts else None,
        step_ms=Stat.of(p.metrics["wall_ms"]) if "wall_ms" in p.metrics else None,
        samples_per_s=p.throughput.samples_per_s if p.throughput else None,
        throughput=p.throughput,
        # the step without the profiler: the median of the unprofiled steps (compare, html)
        unprofiled_step_ms=(
            p.throughput.step_ms_median if p.throughput and p.throughput.unprofiled else None
        ),
        breakdown_ms={row: Stat.of(p.metrics[m]) for row, m in BREAKDOWN.items() if m in p.metrics},
        # each row's share of the profiled steps' total time, in %: they add up to 100
        breakdown_pct=shares(p.per_step, BREAKDOWN),
        gpu=gpu,
        memory=memory_report(d),
        communication=p.communication,  # built by doctor/comms.py
        device=Device(
            index=p.device,
            name=p.device_name,
            capability=".".join(map(str, p.capability)) if p.capability else None,
            memory_bytes=p.memory_capacity,
        ),
        loaders=tuple(facts.loaders) if facts else (),
        process=facts.process if facts else None,
        probes=tuple(facts.probes) if facts else (),
        verdict=NO_BOTTLENECK if d.healthy else f"{len(d.findings)} finding(s)",
        # the breakdown's rows of 10% of the step or more, each with the findings acting on
        # it; one with none is "unexplained" (doctor/coverage.py)
        coverage=tuple(coverage(p, d.findings)),
        # was the window disturbed by other work on the machine (doctor/disturbance.py)
        window_check=d.window_check,
        findings=tuple(reported(f) for f in d.findings),
        trace=d.trace_path,
        trace_truncated=bool(facts and facts.trace_truncated),
        open_trace=PERFETTO_HINT if d.trace_path else None,
        # step by step, for the charts of the HTML report and for `torchpace compare`
        per_step=per_step(d),
        steps_recorded=tuple(_recorded(s) for s in facts.steps) if facts else (),
        # FLOPs, MFU, the gap to the speed of light by cause, the per-op roofline (None: the
        # step's FLOPs are not known)
        speed_of_light=d.speed_of_light,
        gpu_split_pct=shares(p.per_step, {part: part.value for part in GpuPart}) if gpu else None,
        cross_rank=cross_rank,
        profiler_log=profiler_log,
        files=files,
    )


def diagnosis_to_dict(
    d: Diagnosis, command: list[str] | None = None, env: Env | None = None
) -> dict:
    """The report's JSON (doctor_report.json, --json)."""
    return build_report(d, command, env).to_dict()


def reported(f) -> ReportedFinding:
    """A finding (doctor/finding.Finding) as the report shows it."""
    share = f.saving_share
    return ReportedFinding(
        code=f.code,
        severity=f.severity,
        title=f.title,
        detail=f.detail,
        evidence=dict(f.evidence),
        fix=f.fix,
        saving_ms=f.saving_ms,
        saving_pct=None if share is None else round(100 * share, 1),
        step_ms=f.step_ms,
        location=f.location,
        knob=f.knob,
        notes=tuple(f.notes),
        ends_job=f.ends_job,
        basis=f.basis,
        practices=tuple(f.practices),
        doc=catalog.get(f.code).doc_path,
    )


def shares(steps, rows: dict) -> dict:
    """Each row's share of the steps' total wall time, in % (one decimal): the rows of a
    split add up to 100 (a median of each row would not). Rows the steps did not measure
    are left out."""
    total = sum(m.wall_ms for m in steps)
    if total <= 0:
        return {}
    return {
        key: round(100 * sum(getattr(m, name) for m in steps if name in m.measured()) / total, 1)
        for key, name in rows.items()
        if any(name in m.measured() for m in steps)
    }


def per_step(d: Diagnosis) -> tuple[ProfiledStep, ...]:
    """Each profiled step's breakdown, device time and memory (those it really measured)."""
    out = []
    gpu = d.profile.has_gpu
    names = {**BREAKDOWN, **{n: n for n in (GPU_BUSY, *GPU_SPLIT) if gpu}}
    for m in d.profile.per_step:
        measured = m.measured()
        out.append(
            ProfiledStep(
                wall_ms=round(m.wall_ms, 3),
                parts={
                    str(key): round(getattr(m, name), 3)
                    for key, name in names.items()
                    if name in measured
                },
                memory={
                    device: StepAllocator(mem.allocated_end, mem.peak)
                    for device, mem in m.memory.items()
                },
            )
        )
    return tuple(out)


def _recorded(s) -> RecordedStep:
    """A step the run facts hold (warm-up, window, reference, probe): time and memory."""
    return RecordedStep(
        index=s.index,
        phase=str(s.phase),
        wall_ms=s.wall_ms,
        data_wait_ms=s.data_wait_ms,
        rss_bytes=s.rss_bytes,
        cuda_allocated_bytes=s.cuda_allocated_bytes,
        cuda_peak_bytes=s.cuda_peak_bytes,
    )


def env_summary() -> Env:
    """Versions of this environment (the one the script ran in), read without importing torch."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return Env(
        python=platform.python_version(),
        torch=torch_version,
        platform=platform.platform(terse=True),
    )
