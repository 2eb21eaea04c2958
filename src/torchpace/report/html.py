"""The self-contained HTML report: one file that opens offline in any browser.

Drawn from the same data as the terminal and JSON reports (the doctor's DoctorReport, tune's
and compare's dicts), so that the three never disagree. Charts are plotly figures; plotly.js
is inlined once in the page's head, so the file needs no network (no CDN, no fonts, no
MathJax) and weighs about 5 MB. plotly is an optional extra (``torchpace[html]``): without
it the verbs say how to install it and write the other outputs as before.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from torchpace import run_files
from torchpace.atomic import write_text_atomic
from torchpace.output_paths import write_output
from torchpace.report import compare_rows
from torchpace.report.comms_html import communication_html
from torchpace.report.doctor_terminal import unexplained_line, window_warning
from torchpace.report.html_parts import (
    CSS,
    PHASE_COLOURS,
    HtmlUnavailable,
    figure,
    table,
)
from torchpace.report.html_parts import escape as _e
from torchpace.report.html_parts import plotly_modules as _plotly
from torchpace.report.model import GPU_BUSY, DoctorReport, GpuPart, Row, SpeedOfLightReport
from torchpace.report.ranks_html import cross_rank_html

REPORT_NAME = run_files.HTML_REPORT
# In every page's head: how a later run knows a file is its own to replace.
GENERATOR = "torchpace report"
# The device's split of each step (report/model.GpuPart): its colour here.
GPU_SPLIT_COLOURS = {
    GpuPart.COMPUTE: "#2e9e44",
    GpuPart.COMM_ALONE: "#8c564b",
    GpuPart.RANK_WAIT: "#e377c2",
    GpuPart.COPY_ALONE: "#d4a017",
    GpuPart.IDLE: "#cccccc",
}
STEP_PHASE_COLOURS = {
    "warmup": "#9e9e9e",
    "window": "#3f6ad8",
    "probe": "#d4a017",
    "settle": "#cccccc",
    "reference": "#2e9e44",
    "measured": "#17a2b8",
}
SEVERITY_COLOURS = {"high": "#d9534f", "medium": "#d4a017", "low": "#777777"}
MIB = 2**20


def is_replaceable(path: Path) -> bool:
    """A path an HTML report may be written to: new, or an earlier torchpace report (never
    another file of the user's)."""
    path = Path(path)
    if not path.exists():
        return True
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return GENERATOR in f.read(4096)
    except OSError:
        return False


def write_html(text: str, path: Path) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def write_pages(draw: Callable[[], str], paths: list[tuple[str, Path | None]], say) -> None:
    """The page ``draw`` makes, written at each of ``paths``: (the flag that named it, the
    path; None skipped), the run folder's report.html and --html PATH, each through
    output_paths.write_output (a folder made, a failure said in a line). Without plotly, one
    line through ``say`` that says how to get it; the verb's other outputs are written as
    usual."""
    paths = [(flag, p) for flag, p in paths if p is not None]
    if not paths:
        return
    try:
        text = draw()
    except HtmlUnavailable as e:
        say(f"no {REPORT_NAME}: {e}")
        return
    for flag, path in paths:  # write_output makes the folder: the page is one atomic write
        write_output(flag, path, lambda p: write_text_atomic(p, text), say)


# --- the page ---------------------------------------------------------------------------
def page(title: str, sections: list[str]) -> str:
    _, _, get_plotlyjs = _plotly()
    body = "\n".join(sections)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<meta name='generator' content='{GENERATOR}'>"
        f"<title>{_e(title)}</title>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<style>{CSS}</style>"
        # plotly.js inline, once: the page works offline
        f"<script type='text/javascript'>{get_plotlyjs()}</script>"
        f"</head><body>\n{body}\n</body></html>\n"
    )


def _ms(value) -> str:
    return "-" if value is None else f"{value:.2f}"


def _mib(value) -> str:
    return "-" if value is None else f"{value / MIB:,.0f} MiB"


# --- the doctor -------------------------------------------------------------------------
def doctor_html(report: DoctorReport) -> str:
    """The doctor's report as a page."""
    go, _, _ = _plotly()
    sections = [_doctor_header(report)]
    warning = window_warning(report.window_check)
    if warning:
        sections.append(f"<p class='warn'><b>{_e(warning)}</b></p>")
    if report.per_step:
        sections.append("<h2>Where each step's time goes</h2>")
        sections.append(figure(step_breakdown_figure(go, report)))
        if any(GPU_BUSY in s.parts for s in report.per_step):
            sections.append(figure(gpu_figure(go, report)))
    cross = report.cross_rank
    if cross is not None:
        sections += cross_rank_html(go, cross, report.findings)
    if report.communication is not None:
        # a job's report is its lowest rank's diagnosis: its communication is that rank's
        whose = cross.ranks[0].rank if cross is not None and cross.ranks else None
        sections += communication_html(report.communication, whose)
    memory = memory_figure(go, report)
    if memory is not None:
        sections.append("<h2>Memory over the run</h2>")
        sections.append(figure(memory))
    if report.steps_recorded:
        sections.append("<h2>Every step timed</h2>")
        sections.append(figure(recorded_steps_figure(go, report)))
    sections += speed_of_light_html(go, report.speed_of_light)
    sections.append("<h2>Findings, most important first</h2>")
    unexplained = unexplained_line(report.coverage)
    if unexplained:
        sections.append(f"<p class='warn'>{_e(unexplained)}</p>")
    sections.append(findings_html(report))
    sections.append("<h2>Environment</h2>")
    sections.append(environment_html(report))
    return page("torchpace doctor", sections)


def speed_of_light_html(go, sol: SpeedOfLightReport | None) -> list[str]:
    """The MFU, the gap by cause, the roofline plot and the per-op table."""
    from torchpace.report import roofline

    if sol is None:
        return []
    out = [
        "<h2>The speed of light: FLOPs, MFU and the roofline</h2>",
        f"<p>{_e(roofline.headline(sol))}</p>",
    ]
    if sol.gap:
        out.append(figure(roofline.gap_figure(go, sol)))
    if any(o.intensity and o.flop_per_s for o in sol.ops):
        out.append(figure(roofline.roofline_figure(go, sol)))
    if sol.ops:
        out.append(table(roofline.OP_HEADER, roofline.op_rows(sol), numeric={1, 2, 3, 4, 5, 6, 8}))
    modules = roofline.module_rows(sol, limit=20)
    if modules:
        out.append(table(roofline.MODULE_HEADER, modules, numeric={1, 2, 3}))
    out += [f"<p class='mono'>note: {_e(n)}</p>" for n in sol.notes]
    return out


def _doctor_header(report: DoctorReport) -> str:
    lines = ["<h1>torchpace doctor</h1>"]
    if report.command:
        lines.append(f"<p class='mono'>{_e(' '.join(report.command))}</p>")
    step = report.step_ms
    if step:
        speed = f", {report.samples_per_s:g} samples/s" if report.samples_per_s else ""
        ref = _unprofiled_step_ms(report)
        ref = f"; {ref:.1f} ms without the profiler" if ref else ""
        lines.append(
            f"<p>{report.steps_captured} steps profiled: <b>{step.median:.1f} ms</b> "
            f"median ({step.min:.1f}-{step.max:.1f}){_e(speed)}{_e(ref)}</p>"
        )
    if not report.complete:
        lines.append(f"<p class='slower'>status: {_e(report.status)}</p>")
    if report.error:
        lines.append(f"<pre>{_e(report.error)}</pre>")
    return "\n".join(lines)


def _unprofiled_step_ms(report: DoctorReport) -> float | None:
    """The median step of the unprofiled steps after the window, when there were some."""
    throughput = report.throughput
    return throughput.step_ms_median if throughput and throughput.unprofiled else None


def _step_labels(report: DoctorReport) -> list[str]:
    window = [s.index for s in report.steps_recorded if s.phase == "window"]
    if len(window) == len(report.per_step):
        return [f"step {i}" for i in window]
    return [f"step {i + 1}" for i in range(len(report.per_step))]


def step_breakdown_figure(go, report: DoctorReport):
    steps = report.per_step
    labels = _step_labels(report)
    fig = go.Figure()
    for row in Row:
        values = [s.parts.get(row.value, 0.0) for s in steps]
        if not any(values):
            continue
        fig.add_bar(name=row.label, x=labels, y=values, marker_color=PHASE_COLOURS[row])
    fig.add_scatter(
        name="step wall time",
        x=labels,
        y=[s.wall_ms for s in steps],
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 28, "color": "#222"},
    )
    ref = _unprofiled_step_ms(report)
    if ref:
        fig.add_hline(y=ref, line_dash="dot", annotation_text=f"without the profiler: {ref:.1f} ms")
    fig.update_layout(barmode="stack", title="per-step time split (profiled steps)")
    fig.update_yaxes(title="ms")
    return fig


def gpu_figure(go, report: DoctorReport):
    """What the device did in each step: compute, communication alone, copies alone and
    idle, which add up to the step (doctor/breakdown.py)."""
    steps = report.per_step
    labels = _step_labels(report)
    fig = go.Figure()
    for part in GpuPart:
        values = [s.parts.get(part.value, 0.0) for s in steps]
        if any(values):
            fig.add_bar(name=part.label, x=labels, y=values, marker_color=GPU_SPLIT_COLOURS[part])
    fig.update_layout(barmode="stack", title="what the GPU did in each step")
    fig.update_yaxes(title="ms")
    return fig


def memory_figure(go, report: DoctorReport):
    """Allocated and peak bytes per device in each profiled step (from the trace), and the
    host's resident memory and CUDA peak in every recorded step (from the run facts)."""
    fig = go.Figure()
    steps = report.per_step
    labels = _step_labels(report) if steps else []
    devices = sorted({d for s in steps for d in s.memory})
    for device in devices:
        for key, what in (("allocated_end_bytes", "allocated"), ("peak_bytes", "peak")):
            values = [getattr(s.memory.get(device), key, None) for s in steps]
            if any(v is not None for v in values):
                fig.add_scatter(
                    name=f"{device} {what} (trace)",
                    x=labels,
                    y=[None if v is None else v / MIB for v in values],
                    mode="lines+markers",
                )
    recorded = report.steps_recorded
    for key, what in (("rss_bytes", "host RSS"), ("cuda_peak_bytes", "CUDA peak")):
        points = [(f"step {s.index}", getattr(s, key)) for s in recorded if getattr(s, key)]
        if points:
            fig.add_scatter(
                name=f"{what} (every step)",
                x=[p[0] for p in points],
                y=[p[1] / MIB for p in points],
                mode="lines+markers",
            )
    if not fig.data:
        return None
    fig.update_layout(title="memory per step")
    fig.update_yaxes(title="MiB")
    return fig


def recorded_steps_figure(go, report: DoctorReport):
    fig = go.Figure()
    recorded = report.steps_recorded
    for phase, colour in STEP_PHASE_COLOURS.items():
        steps = [s for s in recorded if s.phase == phase]
        if steps:
            fig.add_bar(
                name=phase,
                x=[f"step {s.index}" for s in steps],
                y=[s.wall_ms for s in steps],
                marker_color=colour,
            )
    fig.update_layout(title="wall time of every step, by what it was for", barmode="overlay")
    fig.update_yaxes(title="ms")
    return fig


def findings_html(report: DoctorReport) -> str:
    findings = report.findings
    if not findings:
        return f"<p class='ok'>&#10003; {_e(report.verdict)}</p>"
    parts = []
    for f in findings:
        colour = SEVERITY_COLOURS.get(f.severity, "#777")
        saving = "saving not estimated" if f.saving_ms is None else f"{f.saving_ms:.1f} ms"
        if f.saving_pct is not None:
            saving += f" ({f.saving_pct:.0f}% of the step)"
        if f.ends_job:  # its cost is the job, not ms per step
            saving = f.ends_job
        evidence = ", ".join(f"{k}={v}" for k, v in f.evidence.items())
        rows = [
            f"<div class='finding' style='border-left-color:{colour}'>",
            f"<span class='badge' style='background:{colour}'>{_e(f.severity)}</span>"
            f"<b>{_e(f.code)} {_e(f.title)}</b> &mdash; <b>{_e(saving)}</b>",
            f"<p>{_e(f.detail)}</p>",
        ]
        if f.location:
            rows.append(f"<p>at <code>{_e(f.location)}</code></p>")
        rows.append(f"<p><b>fix:</b> {_e(f.fix)}</p>")
        knob = f"; tune knob: <code>{_e(f.knob)}</code>" if f.knob else ""
        rows.append(f"<p class='muted'>evidence: <code>{_e(evidence)}</code>{knob}</p>")
        rows += [f"<p class='muted'>note: {_e(n)}</p>" for n in f.notes]
        rows.append("</div>")
        parts.append("\n".join(rows))
    return "\n".join(parts)


def environment_html(report: DoctorReport) -> str:
    rows = []
    for key, value in (report.env.to_dict() if report.env else {}).items():
        rows.append([key, value])
    device = report.device
    if device.name:
        rows.append(["device", f"{device.name} (sm {device.capability})"])
        rows.append(["device memory", _mib(device.memory_bytes)])
    process = report.process
    for key in (
        "device",
        "intra_op_threads",
        "usable_cpus",
        "physical_cores",
        "tf32_matmul",
        "cudnn_benchmark",
        "anomaly_detection",
        "allocator",
    ):
        if process is not None and hasattr(process, key):
            rows.append([key.replace("_", " "), getattr(process, key)])
    parts = [table(None, rows)] if rows else ["<p class='muted'>no run facts (a trace alone)</p>"]
    loaders = report.loaders
    if loaders:
        parts.append("<h3>DataLoaders</h3>")
        parts.append(
            table(
                ["built at", "workers", "pin_memory", "persistent", "batch", "batches seen"],
                [
                    [
                        x.location,
                        x.num_workers,
                        x.pin_memory,
                        x.persistent_workers,
                        x.batch_size,
                        x.batches_seen,
                    ]
                    for x in loaders
                ],
                numeric={1, 4, 5},
            )
        )
    if report.trace:
        parts.append(
            f"<p class='muted'>trace: <code>{_e(report.trace)}</code> &mdash; "
            f"{_e(report.open_trace)}</p>"
        )
    return "\n".join(parts)


# --- tune -------------------------------------------------------------------------------
def tune_html(report: dict) -> str:
    """tune's report (tune/report.py's dict) as a page: the ladder and every knob."""
    go, _, _ = _plotly()
    sections = ["<h1>torchpace tune</h1>", f"<p class='mono'>{_e(' '.join(report['command']))}</p>"]
    fidelity = report.get("fidelity") or {}
    if fidelity.get("ratio") is not None:
        limit = f"the {fidelity['limit_pct']:.0f}% limit"
        if fidelity.get("inconclusive"):  # out of bounds by the median, not beyond the noise
            state = f"inconclusive: outside {limit} by the median, not beyond the machine's noise"
        else:
            state = f"{'within' if fidelity['ok'] else '<b>outside</b>'} {limit}"
        sections.append(
            f"<p>fidelity: trials time this script at {fidelity['ratio']:.3f}&times; its plain "
            f"speed ({state})</p>"
        )
    run_check = report.get("run_check") or {}
    if run_check.get("speedup") is not None:  # tune/run_check.py
        runs = zip(run_check["plain_ms"], run_check["tuned_ms"], strict=True)
        pairs = ", ".join(f"{p / t:.2f}&times;" for p, t in runs)
        sections.append(
            f"<p>as <code>torchpace run</code> runs it: {run_check['speedup']:.2f}&times; over "
            f"the script as it is (alternated pairs: {pairs})</p>"
        )
    sections += _ladder_sections(go, report)
    sections.append("<h2>Every knob</h2>")
    order = ["kept", "undecided", "rejected", "could-not-apply", "not-applicable", "not-tried"]
    knobs = sorted(report.get("knobs") or [], key=lambda k: order.index(k["status"]))
    rows = []
    for k in knobs:
        gain = "" if k.get("gain_pct") is None else f"{k['gain_pct']:+.1f}%"
        value = "" if k.get("value") is None else k["value"]
        rows.append(
            [
                k["knob"] + (" *" if k["changes_numerics"] else ""),
                k["status"],
                value,
                gain,
                k["reason"],
            ]
        )
    sections.append(table(["knob", "status", "value", "gain", "why"], rows, numeric={3}))
    sections.append(
        "<p class='muted'>* can change what the program computes (the loss check compared it)</p>"
    )
    if report.get("stopped"):
        limit = report.get("stopped_by") or report["stopped"]
        sections.append(f"<p class='slower'>stopped early: {_e(limit)}</p>")
    return page("torchpace tune", sections)


def _ladder_sections(go, report: dict) -> list[str]:
    """tune's page: the statistics, the final check and the ladder (chart and table)."""
    ladder = report.get("ladder") or []
    if not ladder:
        return []
    sections = []
    noise = report.get("noise_pct")
    if report.get("statistics"):  # the terminal's paragraph, word for word
        sections.append(f"<p>statistics: {_e(report['statistics'])}</p>")
    elif noise is not None:
        sections.append(
            f"<p>noise: the baseline's back-to-back runs differ by {noise:.1f}%; each "
            "change ran in pairs with the reference next to it, kept when two pairs each "
            f"gained over {report['noise_threshold_pct']:.1f}% or when the 90% lower "
            "bound of its mean paired gain was above 3%</p>"
        )
    if report.get("final_speedup") and report.get("best"):
        speedup = (report.get("figures") or {}).get("speedup", report["final_speedup"])
        sections.append(
            f"<p>final check, paired with the baseline (the ladder's last row): "
            f"<b>{speedup:.2f}&times;</b></p>"
        )
    sections.append("<h2>The ladder: each kept change, cumulatively</h2>")
    sections.append(figure(ladder_figure(go, ladder)))
    sections += [f"<p>{_e(line)}</p>" for line in _tune_speed_of_light(report)]
    sections.append(
        table(
            ["configuration", "ms/step", "samples/s", "speedup", "peak memory", "numerics"],
            [
                [
                    r["label"],
                    _ms(r["median_ms"]),
                    "-" if r["samples_per_s"] is None else f"{r['samples_per_s']:,.1f}",
                    f"{r['speedup']:.2f}x",
                    _mib(r["peak_bytes"]),
                    "changed" if r["changes_numerics"] else "same",
                ]
                for r in ladder
            ],
            numeric={1, 2, 3, 4},
        )
    )
    return sections


def _tune_speed_of_light(report: dict) -> list[str]:
    from torchpace.report.roofline import tune_lines

    return tune_lines(report.get("speed_of_light"))


def ladder_figure(go, ladder: list[dict]):
    per_sample = all(r.get("samples_per_s") for r in ladder)
    fig = go.Figure()
    fig.add_bar(
        x=[r["label"] for r in ladder],
        y=[r["samples_per_s"] if per_sample else r["median_ms"] for r in ladder],
        text=[f"{r['speedup']:.2f}x" for r in ladder],
        textposition="outside",
        marker_color=["#9e9e9e", *["#2e9e44"] * (len(ladder) - 1)],
    )
    fig.update_layout(
        title="samples/s per kept change" if per_sample else "ms/step per kept change",
        showlegend=False,
    )
    fig.update_yaxes(title="samples/s" if per_sample else "ms/step")
    return fig


# --- compare ----------------------------------------------------------------------------
def compare_html(result: dict) -> str:
    """`torchpace compare`'s result (compare/diff.py's dict) as a page: report/compare_rows.py's
    rows, in the terminal's order, with a chart beside the phases and the operators."""
    go, _, _ = _plotly()
    rows = compare_rows.build(result)
    sides = [[s.name, s.path, s.status or "-", s.device or "-", s.command] for s in rows.sides]
    sections = [
        "<h1>torchpace compare</h1>",
        table(["", "path", "status", "device", "command"], sides),
        *(f"<p class='slower'>warning: {_e(w)}</p>" for w in rows.warnings),
        table(
            ["", "A", "B", "B/A"],
            [[r.label, r.a, r.b, r.ratio] for r in rows.summary],
            numeric={1, 2, 3},
        ),
        f"<p class='{rows.tone}'><b>{_e(rows.verdict)}</b>{_e(rows.verdict_detail)}</p>",
    ]
    if rows.phases:
        sections.append("<h2>Per step, by phase (median ms)</h2>")
        fig = go.Figure()
        for side, key in (("A", "a_ms"), ("B", "b_ms")):
            fig.add_bar(name=side, x=[p.label for p in rows.phases],
                        y=[getattr(p, key) for p in rows.phases])  # fmt: skip
        fig.update_layout(barmode="group", title="median ms per step, by phase")
        fig.update_yaxes(title="ms")
        sections.append(figure(fig))
        cells = [list(p.cells()) for p in rows.phases]
        sections.append(table(["phase", "A", "B", "B-A"], cells, numeric={1, 2, 3}))
    if rows.findings:
        sections.append("<h2>Findings</h2>")
        cells = [[f.change, f.code, f.title, f.severity, f.location] for f in rows.findings]
        sections.append(table(["", "code", "title", "severity", "location"], cells))
    if rows.ops:
        sections.append(f"<h2>{_e(rows.ops_title)}</h2>")
        top = rows.ops[::-1]
        fig = go.Figure()
        fig.add_bar(
            orientation="h",
            y=[op.name[:60] for op in top],
            x=[op.delta_ms for op in top],
            marker_color=["#d9534f" if op.delta_ms > 0 else "#2e9e44" for op in top],
        )
        fig.update_layout(title="B - A, ms per step", showlegend=False)
        sections.append(figure(fig))
        cells = [list(op.cells()) for op in rows.ops]
        sections.append(table(["name", "A", "B", "B-A", "calls A/B"], cells, numeric={1, 2, 3, 4}))
        if rows.ops_more:
            sections.append(f"<p class='muted'>{_e(rows.ops_more_line)}</p>")
    elif rows.ops_note:
        sections.append(f"<p class='muted'>operators not compared: {_e(rows.ops_note)}</p>")
    if rows.gate:
        tone = "slower" if rows.gate.failed else "faster"
        sections.append(f"<p class='{tone}'>{_e(rows.gate.line)}</p>")
    return page("torchpace compare", sections)
