"""`torchpace compare` on the terminal (rich), from the dict its JSON holds."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from torchpace.printable import printable_fields

# Rows of the operator table shown (the JSON keeps more).
SHOWN_OPS = 10
# The operator names' column at most (less on a narrow terminal): the numbers stay whole.
NAME_WIDTH = 44
VERDICT_STYLE = {"B is slower": "bold red", "B is faster": "bold green"}
MIB = 2**20


def _num(value, fmt: str = "{:.2f}") -> str:
    return "-" if value is None else fmt.format(value)


def _signed(delta: float, unit: str = "ms") -> Text:
    style = "red" if delta > 0 else "green" if delta < 0 else ""
    return Text(f"{delta:+.2f} {unit}", style=style)


def render(result: dict, console: Console | None = None) -> None:
    console = console or Console()
    result = printable_fields(result)  # paths and op names shown, never obeyed
    a, b = result["a"], result["b"]
    console.print(Text("torchpace compare", style="bold"))
    for name, side in (("A", a), ("B", b)):
        facts = ", ".join(str(x) for x in (side.get("status"), side.get("device")) if x)
        line = Text(f"  {name}  {side['path']}")
        if facts:
            line.append(f"  ({facts})", style="dim")
        console.print(line)
    for warning in result.get("warnings") or []:
        console.print(Text(f"warning: {warning}", style="bold yellow"))
    summary = Table(box=None, padding=(0, 2), header_style="bold")
    for name, justify in (("", "left"), ("A", "right"), ("B", "right"), ("B/A", "right")):
        summary.add_column(name, justify=justify)
    ratio = result["step_ratio"]
    summary.add_row(
        "step ms (median)", _num(a["step_ms"]), _num(b["step_ms"]), _num(ratio, "{:.3f}x")
    )
    if a["samples_per_s"] or b["samples_per_s"]:  # a bare trace knows no batch size
        summary.add_row(
            "samples/s",
            _num(a["samples_per_s"], "{:,.1f}"),
            _num(b["samples_per_s"], "{:,.1f}"),
            _num(result["throughput_ratio"], "{:.3f}x"),
        )
    if a["gpu_busy_pct"] is not None or b["gpu_busy_pct"] is not None:
        summary.add_row(
            "GPU busy", _num(a["gpu_busy_pct"], "{:.0f}%"), _num(b["gpu_busy_pct"], "{:.0f}%"), ""
        )
    for key in sorted(set(a["peak_memory"]) | set(b["peak_memory"])):
        va, vb = a["peak_memory"].get(key), b["peak_memory"].get(key)
        summary.add_row(
            key.replace("_", " "),
            _num(va and va / MIB, "{:,.0f} MiB"),
            _num(vb and vb / MIB, "{:,.0f} MiB"),
            _num(vb / va if va and vb else None, "{:.3f}x"),
        )
    console.print(summary)
    verdict = result["verdict"]
    noise = result["noise_pct"]
    detail = ""
    if result["slowdown_pct"] is not None:
        detail = (
            f" ({result['slowdown_pct']:+.1f}% step time; noise of the medians "
            f"±{2 * noise:.1f}%, {a['steps']} and {b['steps']} {result['steps_compared']})"
        )
    console.print(Text(verdict, style=VERDICT_STYLE.get(verdict, "bold")) + Text(detail))
    if result["breakdown"]:
        table = Table(
            title="per step, by phase (median ms)",
            title_justify="left",
            box=None,
            padding=(0, 2),
            header_style="bold",
        )
        for name, justify in (("phase", "left"), ("A", "right"), ("B", "right"), ("B-A", "right")):
            table.add_column(name, justify=justify, no_wrap=True)
        for row in result["breakdown"]:
            if not row["a_ms"] and not row["b_ms"]:
                continue
            table.add_row(
                row["label"], f"{row['a_ms']:.2f}", f"{row['b_ms']:.2f}", _signed(row["delta_ms"])
            )
        console.print(table)
    findings = result["findings"]
    for what, style, mark in (("appeared", "red", "+"), ("gone", "green", "-")):
        for f in findings[what]:
            console.print(Text(f"{mark} {f['code']} {f['title']} ({what} in B)", style=style))
    ops = result["ops"]
    if ops["rows"]:
        unit = "device" if ops["kind"] == "kernel" else "host, inclusive"
        table = Table(
            title=f"{ops['kind']}s whose time per step changed most ({unit} ms)",
            title_justify="left",
            box=None,
            padding=(0, 2),
            header_style="bold",
        )
        # the numbers stay whole; a long kernel name gives way
        width = max(16, min(NAME_WIDTH, console.width - 48))
        table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=width)
        for name in ("A", "B", "B-A", "calls A/B"):
            table.add_column(name, justify="right", no_wrap=True)
        for row in ops["rows"][:SHOWN_OPS]:
            table.add_row(
                row["name"],
                f"{row['a_ms_per_step']:.3f}",
                f"{row['b_ms_per_step']:.3f}",
                _signed(row["delta_ms_per_step"]),
                f"{row['a_count_per_step']:g}/{row['b_count_per_step']:g}",
            )
        console.print(table)
    elif ops["note"]:
        console.print(f"[dim]operators not compared: {ops['note']}[/dim]")
    gate = result["gate"]
    if gate:
        style = "bold red" if gate["failed"] else "green"
        word = "FAILED" if gate["failed"] else "passed"
        console.print(
            Text(
                f"gate --fail-if-slower {gate['fail_if_slower_pct']:g}: {word}: {gate['reason']}",
                style=style,
            )
        )
