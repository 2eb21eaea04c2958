"""The communication section of the doctor's terminal report: the collectives by kind and
message size (the report's CommunicationReport, from doctor/comms.py), the way nccl-tests
prints them. Its columns, rows and lines are the page's too (report/comms_html.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torchpace.report.comms_model import CollectiveReport, CommunicationReport, HostBlockReport

# The report stays on one screen: the collectives taking the most time per step.
MAX_ROWS = 6
COLLECTIVE_COLUMNS = ("collective", "size", "ranks", "calls/step", "ms/step", "exposed",
                      "algbw GB/s", "busbw GB/s")  # fmt: skip
# The host-blocked lines shown: the most time first.
MAX_HOST_BLOCKED = 3


def _size(nbytes: int | None) -> str:
    if not nbytes:
        return "-"
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def _gbps(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def communication_title(comm: CommunicationReport) -> str:
    return (
        f"collectives: {comm.ms_per_step:.1f} ms per step on the device, "
        f"{comm.exposed_ms_per_step:.1f} ms of it exposed (no compute beside it)"
    )


def collective_row(row: CollectiveReport) -> list[str]:
    """One kind and size, in COLLECTIVE_COLUMNS."""
    return [
        row.kind,
        _size(row.size_bytes),
        str(row.ranks or "-"),
        f"{row.calls_per_step:g}",
        f"{row.ms_per_step:.2f}",
        f"{row.exposed_ms_per_step:.2f}",
        _gbps(row.algbw_gbps),
        _gbps(row.busbw_gbps),
    ]


def link_line(comm: CommunicationReport) -> str | None:
    """What busbw compares with, when the link is known."""
    if not comm.link_peak_gbps:
        return None
    return (
        f"busbw is comparable with the link's peak: {comm.link} "
        f"{comm.link_peak_gbps:.0f} GB/s per direction, if the ranks share a node"
    )


def host_blocked_line(block: HostBlockReport) -> str:
    where = f"in {block.label}" if block.label else "on the loop's thread"
    return (
        f"host blocked {where}: {block.ms_per_step:.1f} ms per step in "
        f"{block.call}, behind {block.behind}"
    )


def render_communication(comm: CommunicationReport, console: Console) -> None:
    table = Table(title=communication_title(comm))
    for column in COLLECTIVE_COLUMNS:
        table.add_column(column, justify="left" if column == "collective" else "right")
    for row in comm.collectives[:MAX_ROWS]:
        table.add_row(*collective_row(row))
    console.print(table)
    rest = len(comm.collectives) - MAX_ROWS
    if rest > 0:
        console.print(f"[dim]{rest} more in the JSON report (communication.collectives)[/dim]")
    link = link_line(comm)
    if link:
        console.print(f"[dim]{link}[/dim]")
    for block in comm.host_blocked[:MAX_HOST_BLOCKED]:
        console.print(host_blocked_line(block))
