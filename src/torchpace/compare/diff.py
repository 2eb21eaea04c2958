"""Two doctor reports side by side: step time and throughput with their ratio, the
breakdown's deltas per phase, GPU busy, peak memory, the findings that appeared or went
away, and (from the traces) the operators and kernels whose time changed most.

The step times compared are the unprofiled reference steps when both runs have enough of
them (the profiler's own overhead left out), else the profiled steps. Whether B is slower
"beyond the noise" is judged on the medians: the noise of a median is estimated from the
spread of each run's own steps (``median_noise_pct``); a slowdown counts when it is more
than twice that. Run-to-run variation of the machine (another job on it, a different
node) is not in that estimate: `compare A A2` of two runs of the same script measures it.
"""

from __future__ import annotations

import math
import statistics

from torchpace._version import __version__
from torchpace.compare.ops import op_deltas, op_totals
from torchpace.compare.sides import Side
from torchpace.report.model import GPU_BUSY, TRACE_STATUS, DoctorReport, Row
from torchpace.stats import median_standard_error

# The compare report's layout version (docs/schemas/compare_report.schema.json).
SCHEMA_VERSION = 2  # 2: the doctor's forward_ms is the forward alone (doctor schema 2)
# Fewer reference steps than this on either side: compare the profiled steps instead.
MIN_REFERENCE_STEPS = 3
# A slowdown counts as real when it exceeds this many standard errors of the difference.
NOISE_SIGMAS = 2.0
# A side's status when its window was whole: a capture that measured every step it was asked
# for, or a bare trace (no run facts: nothing says it was cut short). Any other status
# (timeout, script-exited, script-raised, interrupted, running) means its steps stopped
# early: their times are not the job's, so the gate refuses to pass on them.
FINISHED_STATUSES = ("complete", TRACE_STATUS)


def step_times(report: DoctorReport, reference: bool) -> list[float]:
    if reference:
        return [s.wall_ms for s in report.steps_recorded if s.phase == "reference"]
    return [s.wall_ms for s in report.per_step]


def _has_reference(report: DoctorReport) -> bool:
    return sum(s.phase == "reference" for s in report.steps_recorded) >= MIN_REFERENCE_STEPS


def median_noise_pct(times: list[float]) -> float:
    """The standard error of the median of ``times``, in % of it (0 for fewer than 2): from
    the steps' robust spread (stats.median_standard_error), which a GC pause does not inflate."""
    if len(times) < 2:
        return 0.0
    return 100 * median_standard_error(times) / statistics.median(times)


def _side_summary(side: Side, times: list[float]) -> dict:
    r = side.report
    step = statistics.median(times) if times else None
    busy = r.gpu.stats[GPU_BUSY].median if r.gpu and GPU_BUSY in r.gpu.stats else None
    loader = r.largest_loader()
    batch = loader.batch_size if loader else None
    return {
        "path": str(side.path),
        "command": list(r.command) if r.command is not None else None,
        "status": r.status,
        "finished": finished(r),
        "device": device_of(r),
        "torch": r.env.torch if r.env else None,
        "steps": len(times),
        "step_ms": round(step, 3) if step else None,
        "samples_per_s": round(batch * 1000 / step, 1) if batch and step else None,
        "gpu_busy_pct": round(100 * min(busy / step, 1.0), 1)
        if busy is not None and step
        else None,
        "peak_memory": _peaks(r),
        "trace": str(side.trace) if side.trace else None,
    }


def _peaks(report: DoctorReport) -> dict[str, int]:
    """Each device's peak and the host's resident memory, named as the JSON names them
    without "_bytes" ("cuda:0_peak", "host_rss")."""
    memory = report.memory
    peaks = {f"{device}_peak": v for device, v in memory.peaks.items()}
    if memory.host_rss_bytes is not None:
        peaks["host_rss"] = memory.host_rss_bytes
    return peaks


def finished(report: DoctorReport) -> bool:
    """Did the run measure every step of its window (see FINISHED_STATUSES)? A report with
    no status (written before it had one) reads as a trace's, and counts as finished."""
    return report.status in FINISHED_STATUSES


def device_of(report: DoctorReport) -> str | None:
    """Where the run's steps ran, from its own facts: the GPU's name, "CPU" with its usable
    cores when known; None when the report does not say."""
    if report.device.name:
        return str(report.device.name)
    process = report.process
    if report.gpu or (process is not None and process.device == "cuda"):
        return "a GPU"
    if process is not None and process.device == "cpu":
        cores = process.usable_cpus
        return f"CPU ({cores} usable cores)" if cores else "CPU"
    return "CPU" if report.status == TRACE_STATUS else None


def warnings(sa: dict, sb: dict) -> list[str]:
    """What makes the two sides' numbers compare something else than the change: a side
    that stopped before its window ended, different devices, different torch versions."""
    out = []
    for name, side in (("A", sa), ("B", sb)):
        if not side["finished"]:
            out.append(
                f"{name} did not finish its window (status {side['status']}): its steps "
                "stopped early, so its step time is not its run's; run it again to the end"
            )
    if sa["device"] and sb["device"] and sa["device"] != sb["device"]:
        out.append(
            f"A ran on {sa['device']} and B on {sb['device']}: the difference is the "
            "machines', not only the change's; compare runs on the same device"
        )
    if sa["torch"] and sb["torch"] and sa["torch"] != sb["torch"]:
        out.append(f"A ran with torch {sa['torch']} and B with torch {sb['torch']}")
    return out


def _findings(a: DoctorReport, b: DoctorReport) -> dict:
    def by_code(report):
        return {f.code: f for f in report.findings}

    fa, fb = by_code(a), by_code(b)

    def brief(f):
        return {
            "code": f.code,
            "title": f.title,
            "severity": f.severity,
            "saving_ms": f.saving_ms,
            "location": f.location,
        }

    return {
        "appeared": [brief(fb[c]) for c in fb if c not in fa],
        "gone": [brief(fa[c]) for c in fa if c not in fb],
        "both": [brief(fb[c]) for c in fb if c in fa],
    }


def _breakdown(a: DoctorReport, b: DoctorReport) -> list[dict]:
    rows = []
    for row in Row:
        sa, sb = a.breakdown_ms.get(row), b.breakdown_ms.get(row)
        if sa is None and sb is None:
            continue
        a_ms = sa.median if sa else 0.0
        b_ms = sb.median if sb else 0.0
        rows.append(
            {
                "phase": row.value,
                "label": row.label,
                "a_ms": a_ms,
                "b_ms": b_ms,
                "delta_ms": round(b_ms - a_ms, 3),
            }
        )
    return rows


def _ops(a: Side, b: Side) -> dict:
    if a.trace is None or b.trace is None:
        missing = a.path if a.trace is None else b.path
        return {"kind": None, "rows": [], "note": f"no trace beside {missing}"}
    from torchpace.trace import TraceError

    try:
        ta, tb = op_totals(a.trace, a.model), op_totals(b.trace, b.model)
    except TraceError as e:  # a report's own numbers still compare; its trace beside it not
        return {"kind": None, "rows": [], "note": str(e)}
    if ta.kind != tb.kind:
        return {
            "kind": None,
            "rows": [],
            "note": "one trace has GPU work and the other none: nothing to match",
        }
    return {"kind": ta.kind, "rows": op_deltas(ta, tb), "note": None}


def compare(a: Side, b: Side, fail_if_slower_pct: float | None = None) -> dict:
    reference = _has_reference(a.report) and _has_reference(b.report)
    times_a, times_b = step_times(a.report, reference), step_times(b.report, reference)
    sa, sb = _side_summary(a, times_a), _side_summary(b, times_b)
    out: dict = {
        "schema_version": SCHEMA_VERSION,
        "verb": "compare",
        "torchpace": __version__,
        "steps_compared": "unprofiled reference steps" if reference else "profiled steps",
        "a": sa,
        "b": sb,
        "step_ratio": None,
        "slowdown_pct": None,
        "throughput_ratio": None,
        "noise_pct": None,
        "verdict": "not comparable: a side has no step",
        "breakdown": _breakdown(a.report, b.report),
        "findings": _findings(a.report, b.report),
        "ops": _ops(a, b),
        "gate": None,
        "warnings": warnings(sa, sb),
    }
    if sa["step_ms"] and sb["step_ms"]:
        ratio = sb["step_ms"] / sa["step_ms"]
        noise = math.hypot(median_noise_pct(times_a), median_noise_pct(times_b))
        threshold = NOISE_SIGMAS * noise
        slowdown = 100 * (ratio - 1)
        out["step_ratio"] = round(ratio, 4)
        out["slowdown_pct"] = round(slowdown, 2)
        out["noise_pct"] = round(noise, 2)
        if sa["samples_per_s"] and sb["samples_per_s"]:
            out["throughput_ratio"] = round(sb["samples_per_s"] / sa["samples_per_s"], 4)
        if abs(slowdown) <= threshold:
            out["verdict"] = "within the noise"
        else:
            out["verdict"] = "B is slower" if slowdown > 0 else "B is faster"
    if fail_if_slower_pct is not None:
        out["gate"] = gate(out, fail_if_slower_pct)
    return out


def gate(result: dict, pct: float) -> dict:
    """--fail-if-slower PCT: failed when B's step is more than PCT % slower than A's and
    the slowdown is beyond the noise, or when either side did not finish its window (its
    steps are not its run's: a run that timed out can look faster than it is)."""
    slowdown, noise = result["slowdown_pct"], result["noise_pct"]
    cut = [f"{n} ({result[k]['status']})" for n, k in (("A", "a"), ("B", "b"))
           if not result[k]["finished"]]  # fmt: skip
    if cut:
        return {
            "fail_if_slower_pct": pct,
            "failed": True,
            "reason": f"{' and '.join(cut)} did not finish {'its' if len(cut) == 1 else 'their'} "
            "window: nothing to judge; run again until the doctor reports status complete",
        }
    if slowdown is None:
        return {
            "fail_if_slower_pct": pct,
            "failed": True,
            "reason": "a side has no measured step: nothing to compare",
        }
    threshold = NOISE_SIGMAS * noise
    if slowdown <= pct:
        why = f"B is {slowdown:+.1f}% against A, within the allowed {pct:g}%"
        return {"fail_if_slower_pct": pct, "failed": False, "reason": why}
    if slowdown <= threshold:
        why = (
            f"B is {slowdown:+.1f}% slower, beyond the allowed {pct:g}% but within the "
            f"noise of these runs (±{threshold:.1f}%): take more steps (--steps) to decide"
        )
        return {"fail_if_slower_pct": pct, "failed": False, "reason": why}
    why = (
        f"B is {slowdown:.1f}% slower than A: beyond the allowed {pct:g}% and the noise "
        f"(±{threshold:.1f}%)"
    )
    return {"fail_if_slower_pct": pct, "failed": True, "reason": why}
