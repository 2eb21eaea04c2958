"""`torchpace compare` on the terminal (rich): report/compare_rows.py's rows, drawn. What
is shown and in which order is decided there, once, for this and the HTML page alike."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from torchpace.printable import printable_fields
from torchpace.report.compare_rows import CompareRows, build

# The operator names' column at most (less on a narrow terminal): the numbers stay whole.
NAME_WIDTH = 44
TONE_STYLE = {"slower": "bold red", "faster": "bold green"}


def _signed(text: str, delta: float) -> Text:
    return Text(text, style="red" if delta > 0 else "green" if delta < 0 else "")


def _table(title: str | None, columns: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", box=None, padding=(0, 2), header_style="bold")
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    return table


def render(result: dict, console: Console | None = None) -> None:
    # paths and op names shown, never obeyed
    draw(build(printable_fields(result)), console or Console())


def draw(rows: CompareRows, console: Console) -> None:
    # one line each, never wrapped: a CI log keeps the shape a terminal shows
    def line(text: Text | str) -> None:
        console.print(text, soft_wrap=True)

    line(Text("torchpace compare", style="bold"))
    for side in rows.sides:
        facts = ", ".join(x for x in (side.status, side.device) if x)
        text = Text(f"  {side.name}  {side.path}")
        if facts:
            text.append(f"  ({facts})", style="dim")
        line(text)
    for warning in rows.warnings:
        line(Text(f"warning: {warning}", style="bold yellow"))
    summary = _table(None, [("", "left"), ("A", "right"), ("B", "right"), ("B/A", "right")])
    for row in rows.summary:
        summary.add_row(row.label, row.a, row.b, row.ratio)
    console.print(summary)
    line(Text(rows.verdict, style=TONE_STYLE.get(rows.tone, "bold")) + Text(rows.verdict_detail))
    if rows.phases:
        columns = [("phase", "left"), ("A", "right"), ("B", "right"), ("B-A", "right")]
        table = _table("per step, by phase (median ms)", columns)
        for p in rows.phases:
            label, a, b, delta = p.cells()
            table.add_row(label, a, b, _signed(delta, p.delta_ms))
        console.print(table)
    for f in rows.findings:
        mark, style = ("+", "red") if f.change == "appeared" else ("-", "green")
        line(Text(f"{mark} {f.code} {f.title} ({f.change} in B)", style=style))
    if rows.ops:
        columns = [(name, "right") for name in ("A", "B", "B-A", "calls A/B")]
        table = _table(rows.ops_title, [])
        # the numbers stay whole; a long kernel name gives way
        width = max(16, min(NAME_WIDTH, console.width - 48))
        table.add_column("name", overflow="ellipsis", no_wrap=True, max_width=width)
        for name, justify in columns:
            table.add_column(name, justify=justify, no_wrap=True)
        for op in rows.ops:
            name, a, b, delta, calls = op.cells()
            table.add_row(name, a, b, _signed(delta, op.delta_ms), calls)
        console.print(table)
        if rows.ops_more:
            line(Text(rows.ops_more_line, style="dim"))
    elif rows.ops_note:
        line(Text(f"operators not compared: {rows.ops_note}", style="dim"))
    if rows.gate:
        line(Text(rows.gate.line, style="bold red" if rows.gate.failed else "green"))
