"""The doctor's result as plain data: the dict that `--json` writes and the terminal report
(``torchpace.report``) draws. Built here, beside the diagnosis it reads, so that the report
package renders plain data and never imports the doctor."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import platform

from torchpace import __version__
from torchpace.doctor.analyze import Diagnosis
from torchpace.doctor.coverage import coverage
from torchpace.doctor.memory_result import memory_details
from torchpace.doctor.steps import metric_names

NO_BOTTLENECK = "no significant bottleneck found"
# The version of this dict's layout (docs/schemas/doctor_report.schema.json): raised when a
# key is renamed, removed or changes meaning; a new key keeps it. 2: breakdown_ms.forward_ms
# is the forward alone (it was "forward + other"; the rest is other_ms now).
SCHEMA_VERSION = 2
# The status of a report on a --trace file, where no run took place.
TRACE_STATUS = "trace"
PERFETTO_HINT = "open https://ui.perfetto.dev and drag the trace file in (or chrome://tracing)"
# The step breakdown's rows, in the order of a step: the report's key (the first six since
# schema_version 1) -> the step's part (StepMetrics.part_*, doctor/breakdown.py). Every ms of
# a step is in exactly one row: the rows add up to the step.
BREAKDOWN = dict(
    zip(
        (
            "data_wait_ms",
            "h2d_pageable_host_ms",
            "forward_ms",
            "backward_ms",
            "optimizer_ms",
            "sync_wait_ms",
            "collective_ms",
            "rank_wait_ms",
            "other_ms",
        ),
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
GPU_SPLIT = metric_names(
    "gpu_compute_ms", "gpu_comm_alone_ms", "gpu_rank_wait_ms", "gpu_copy_alone_ms", "gpu_idle_ms"
)
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


def _stat(stat) -> dict:
    return {"median": round(stat.median, 3), "min": round(stat.min, 3), "max": round(stat.max, 3)}


def diagnosis_to_dict(
    d: Diagnosis, command: list[str] | None = None, env: dict | None = None
) -> dict:
    """``env``: this environment's versions, only when the script ran here (not --trace)."""
    p, facts = d.profile, d.profile.facts
    breakdown = {key: _stat(p.metrics[m]) for key, m in BREAKDOWN.items() if m in p.metrics}
    out: dict = {
        "schema_version": SCHEMA_VERSION,
        "torchpace": __version__,
        "verb": "doctor",
        "command": command or (facts.command if facts else None),
        "status": facts.status if facts else TRACE_STATUS,
        "error": facts.error if facts else None,
        "env": env,
        "steps_captured": p.steps,
        "whole_trace_as_one_step": p.synthetic_steps,
        "step_ms": _stat(p.metrics["wall_ms"]) if "wall_ms" in p.metrics else None,
        "samples_per_s": p.throughput.samples_per_s if p.throughput else None,
        "throughput": p.throughput.to_dict() if p.throughput else None,
        # the step without the profiler: the median of the unprofiled steps (compare, html)
        "unprofiled_step_ms": (
            p.throughput.step_ms_median if p.throughput and p.throughput.unprofiled else None
        ),
        "breakdown_ms": breakdown,
        # each row's share of the profiled steps' total time, in %: they add up to 100
        "breakdown_pct": shares(p.per_step, BREAKDOWN),
        "gpu": None,
        "memory": memory_summary(d),
        "communication": p.communication.to_dict() if p.communication else None,
        "device": {
            "index": p.device,
            "name": p.device_name,
            "capability": ".".join(map(str, p.capability)) if p.capability else None,
            "memory_bytes": p.memory_capacity,
        },
        "loaders": [dataclasses.asdict(x) for x in facts.loaders] if facts else [],
        "process": dataclasses.asdict(facts.process) if facts and facts.process else None,
        "probes": [dataclasses.asdict(x) for x in facts.probes] if facts else [],
        "verdict": NO_BOTTLENECK if d.healthy else f"{len(d.findings)} finding(s)",
        # the breakdown's rows of 10% of the step or more, each with the findings acting on
        # it; one with none is "unexplained" (doctor/coverage.py)
        "coverage": [c.to_dict() for c in coverage(p, d.findings)],
        # was the window disturbed by other work on the machine (doctor/disturbance.py)
        "window_check": d.window_check.to_dict() if d.window_check else None,
        "findings": [f.to_dict() for f in d.findings],
        "trace": d.trace_path,
        "trace_truncated": bool(facts and facts.trace_truncated),
        "open_trace": PERFETTO_HINT if d.trace_path else None,
        # step by step, for the charts of the HTML report and for `torchpace compare`
        "per_step": per_step(d),
        "steps_recorded": [_recorded(s) for s in facts.steps] if facts else [],
    }
    # FLOPs, MFU, the gap to the speed of light by cause, the per-op roofline (None: the
    # step's FLOPs are not known)
    sol = d.speed_of_light
    out["speed_of_light"] = sol.to_dict() if sol is not None else None
    if p.has_gpu:
        out["gpu"] = {m: _stat(p.metrics[m]) for m in GPU_METRICS if m in p.metrics}
        out["gpu"]["matmul_input_dtypes"] = p.matmul_dtypes
        out["gpu_split_pct"] = shares(p.per_step, {m: m for m in GPU_SPLIT})
    else:
        out["gpu_split_pct"] = None
    return out


def shares(steps, rows: dict[str, str]) -> dict[str, float]:
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


def per_step(d: Diagnosis) -> list[dict]:
    """Each profiled step's breakdown, device time and memory (those it really measured)."""
    out = []
    gpu = d.profile.has_gpu
    for m in d.profile.per_step:
        names = {**BREAKDOWN, **{n: n for n in ("gpu_busy_ms", *GPU_SPLIT) if gpu}}
        measured = {key: name for key, name in names.items() if name in m.measured()}
        step = {"wall_ms": round(m.wall_ms, 3)}
        step.update({key: round(getattr(m, name), 3) for key, name in measured.items()})
        step["memory"] = {
            device: {"allocated_end_bytes": mem.allocated_end, "peak_bytes": mem.peak}
            for device, mem in m.memory.items()
        }
        out.append(step)
    return out


def _recorded(s) -> dict:
    """A step the run facts hold (warm-up, window, reference, probe): time and memory."""
    return {
        "index": s.index,
        "phase": str(s.phase),
        "wall_ms": s.wall_ms,
        "data_wait_ms": s.data_wait_ms,
        "rss_bytes": s.rss_bytes,
        "cuda_allocated_bytes": s.cuda_allocated_bytes,
        "cuda_peak_bytes": s.cuda_peak_bytes,
    }


def env_summary() -> dict:
    """Versions of this environment (the one the script ran in), read without importing torch."""
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = None
    return {
        "python": platform.python_version(),
        "torch": torch_version,
        "platform": platform.platform(terse=True),
    }


def memory_summary(d: Diagnosis) -> dict:
    p = d.profile
    out: dict = {"growth": [dataclasses.asdict(g) for g in p.growth]}
    for device, peak in p.device_peaks().items():
        out[f"{device}_peak_bytes"] = int(peak)
    facts_peaks = (
        [s.cuda_peak_bytes for s in p.facts.window if s.cuda_peak_bytes] if p.facts else []
    )
    if facts_peaks and not any(k.startswith("cuda:") for k in out):
        out["cuda_peak_bytes"] = max(facts_peaks)  # the trace had no CUDA [memory] events
    rss = [s.rss_bytes for s in p.facts.window if s.rss_bytes] if p.facts else []
    if rss:
        out["host_rss_bytes"] = max(rss)
    capacity = p.memory_capacity or (p.process.cuda_total_memory_bytes if p.process else None)
    peak = out.get("cuda_peak_bytes") or max(
        (v for k, v in out.items() if k.startswith("cuda:") and k.endswith("_peak_bytes")),
        default=None,
    )
    oom = p.facts.memory.oom if p.facts else None
    if capacity and peak and oom is None:  # a failed run's earlier peak says nothing of room
        out["headroom_bytes"] = capacity - peak
    out.update(memory_details(d))
    return out
