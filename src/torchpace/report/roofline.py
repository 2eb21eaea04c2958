"""The speed of light (the report's ``speed_of_light``, doctor/speed_of_light.py) drawn: the
MFU line, the gap by cause and the per-op roofline table in the terminal; the roofline
plot and the gap's bar for the HTML page (report/html.py calls these)."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from torchpace.env.peak import rate_text
from torchpace.report.model import SpeedOfLightReport

TERMINAL_OPS = 8


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def flops_text(n: float | None) -> str:
    return rate_text(n, "FLOP")


def headline(sol: SpeedOfLightReport) -> str:
    """One sentence: the work, the peak, the ideal step, the measured one, the MFU."""
    split = ""
    if sol.flops_forward is not None:
        split = (
            f" (forward {flops_text(sol.flops_forward)}, backward {flops_text(sol.flops_backward)})"
        )
    where = sol.peak_source
    if sol.peak_flop_per_s is None:
        return f"{flops_text(sol.flops_per_step)}/step{split}; no peak known for the device"
    sheet = ""
    if sol.mfu_datasheet is not None and sol.peak_source != "datasheet":
        sheet_rate = rate_text(sol.datasheet_flop_per_s)
        sheet = f", {_pct(sol.mfu_datasheet)} of the datasheet's {sheet_rate}"
    return (
        f"{flops_text(sol.flops_per_step)}/step{split} at the peak "
        f"{rate_text(sol.peak_flop_per_s)} ({where}) is {sol.ideal_ms:.3g} ms; "
        f"the {sol.step_source} step takes {sol.step_ms:.3g} ms: "
        f"{rate_text(sol.achieved_flop_per_s)}, MFU {_pct(sol.mfu)}{sheet}"
    )


def gap_line(sol: SpeedOfLightReport) -> str | None:
    rows = sorted(sol.gap, key=lambda g: -g.ms)
    if not rows:
        return None
    total = sum(g.ms for g in rows)
    parts = " · ".join(f"{g.cause} {g.ms:.3g} ms" for g in rows)
    return f"the gap to it, {total:.3g} ms: {parts}"


def _si(x: float | None) -> str:
    return rate_text(x, "").replace(" ", "") if x else "-"


def module_rows(sol: SpeedOfLightReport, limit: int = 6) -> list[list[str]]:
    """The model's children (one level below the model) by FLOPs: name, forward, backward,
    share of the step's FLOPs."""
    total = sol.flops_per_step or 1.0
    children = [m for m in sol.modules if m.name.count(".") == 1]
    children.sort(key=lambda m: -(m.flops_forward + m.flops_backward))
    return [
        [
            m.name,
            flops_text(m.flops_forward),
            flops_text(m.flops_backward),
            f"{100 * (m.flops_forward + m.flops_backward) / total:.1f}%",
        ]
        for m in children[:limit]
    ]


MODULE_HEADER = ["module", "forward", "backward", "of the FLOPs"]


def op_rows(sol: SpeedOfLightReport, limit: int | None = None) -> list[list[str]]:
    """op, calls, ms/step, % of the profiled step, FLOP/s, bytes/s, FLOP/byte, bound, % of
    its roofline (its time at the roofline over its time)."""
    step = sol.profiled_step_ms or 1.0
    rows = []
    for o in sol.ops[:limit]:
        roof = o.floor_ms / o.ms if o.floor_ms and o.ms > 0 else None
        rows.append(
            [
                o.name.removeprefix("aten::"),
                f"{o.calls:g}",
                f"{o.ms:.3g}",
                f"{100 * o.ms / step:.1f}%",
                _si(o.flop_per_s),
                _si(o.bytes_per_s),
                f"{o.intensity:.3g}" if o.intensity else "-",
                o.bound,
                _pct(roof),
            ]
        )
    return rows


OP_HEADER = ["op (aten::)", "calls", "ms", "% step", "FLOP/s", "B/s", "FLOP/B", "bound", "% roof"]


def terminal(sol: SpeedOfLightReport | None) -> Group | None:
    if sol is None:
        return None
    parts: list = [Text.from_markup(f"[bold]Speed of light[/bold]: {headline(sol)}")]
    gap = gap_line(sol)
    if gap:
        parts.append(Text(gap))
    modules = module_rows(sol, limit=4)
    if modules:
        parts.append(Text("by module: " + " · ".join(f"{m[0]} {m[3]}" for m in modules)))
    if sol.ops:
        table = Table(
            show_header=True, header_style="bold", box=None, pad_edge=False, padding=(0, 1, 0, 0)
        )
        table.add_column(OP_HEADER[0], no_wrap=True, max_width=20, overflow="ellipsis")
        for i, h in enumerate(OP_HEADER[1:], start=1):
            table.add_column(h, justify="left" if i == 7 else "right", no_wrap=True)
        for row in op_rows(sol, TERMINAL_OPS):
            table.add_row(escape(row[0]), *row[1:])  # an op's name from the trace is not markup
        parts.append(table)
    for note in sol.notes:
        parts.append(Text(f"note: {note}", style="dim"))
    return Group(*parts)


# --- HTML ------------------------------------------------------------------------------------
def roofline_figure(go, sol: SpeedOfLightReport):
    """Each op at its arithmetic intensity (x) and achieved FLOP/s (y), under the roofline:
    min(peak FLOP/s, intensity x bandwidth), log-log."""
    ops = [o for o in sol.ops if o.intensity and o.flop_per_s]
    fig = go.Figure()
    peak, bandwidth = sol.peak_flop_per_s, sol.peak_bandwidth
    if peak and bandwidth:
        xs = [o.intensity for o in ops] or [1.0]
        lo, hi = min(min(xs) / 4, peak / bandwidth / 10), max(max(xs) * 4, peak / bandwidth * 10)
        ridge = peak / bandwidth
        fig.add_trace(
            go.Scatter(
                x=[lo, ridge, hi],
                y=[lo * bandwidth, peak, peak],
                mode="lines",
                name="roofline (measured peak)",
                line={"color": "#444"},
            )
        )
    fig.add_trace(
        go.Scatter(
            x=[o.intensity for o in ops],
            y=[o.flop_per_s for o in ops],
            mode="markers+text",
            text=[o.name.removeprefix("aten::") for o in ops],
            textposition="top center",
            marker={"size": [max(6, min(40, 40 * o.ms / (sol.step_ms or 1))) for o in ops]},
            name="ops (size: share of the step)",
        )
    )
    fig.update_layout(
        title="Roofline: each counted op's FLOP/s against its FLOPs per byte",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/byte)"},
        yaxis={"type": "log", "title": "FLOP/s"},
    )
    return fig


def gap_figure(go, sol: SpeedOfLightReport):
    """The step as one bar: the ideal step, then each cause of the gap."""
    rows = [("at peak", sol.ideal_ms or 0.0), *((g.cause, g.ms) for g in sol.gap)]
    fig = go.Figure()
    for name, ms in rows:
        fig.add_trace(go.Bar(y=["step"], x=[ms], name=name, orientation="h"))
    fig.update_layout(
        barmode="stack",
        title="The step: its FLOPs at peak, then the gap by cause",
        xaxis={"title": "ms"},
    )
    return fig


def tune_lines(sol: dict | None) -> list[str]:
    """tune's ladder in units of the speed of light (tune_report.json's speed_of_light)."""
    if not sol:
        return []
    steps = " · ".join(
        f"{r['label']} {100 * r['fraction']:.1f}%" for r in sol["rungs"] if r["fraction"]
    )
    line = (
        f"speed of light: {rate_text(sol['flops_per_step'], 'FLOP')}/step at "
        f"{rate_text(sol['peak_flop_per_s'])} ({sol['peak_source']}) is {sol['ideal_ms']:.3g} ms"
    )
    out = [f"{line}; each rung's MFU: {steps}" if steps else line]  # no figures, no label
    if sol["final_fraction"] is not None:
        out.append(
            f"after tune the job runs at {100 * sol['final_fraction']:.1f}% of the peak; "
            f"{100 * sol['headroom']:.1f}% is left (`torchpace doctor` on the tuned script "
            "splits it by cause)"
        )
    return out
