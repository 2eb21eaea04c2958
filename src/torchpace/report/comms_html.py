"""The communication section of the doctor's page: the collectives by kind and message
size with their algbw and busbw (the report's CommunicationReport, from doctor/comms.py),
in the terminal's columns and words (report/comms_terminal.py). Every row, not the
terminal's first few: a page has room for them."""

from __future__ import annotations

from torchpace.report.comms_model import CommunicationReport
from torchpace.report.comms_terminal import (
    COLLECTIVE_COLUMNS,
    collective_row,
    communication_title,
    host_blocked_line,
    link_line,
)
from torchpace.report.html_parts import escape as _e
from torchpace.report.html_parts import table

HEADING = "Communication"


def communication_html(comm: CommunicationReport, rank: int | None = None) -> list[str]:
    """The section; ``rank``: whose trace it is read from, in a job's report (the lowest
    rank's: the one the doctor diagnosed in full)."""
    whose = f" (rank {rank}'s trace)" if rank is not None else ""
    out = [
        f"<h2>{_e(HEADING + whose)}</h2>",
        f"<p>{_e(communication_title(comm))}</p>",
        table(
            list(COLLECTIVE_COLUMNS),
            [collective_row(row) for row in comm.collectives],
            numeric=set(range(1, len(COLLECTIVE_COLUMNS))),
        ),
    ]
    link = link_line(comm)
    if link:
        out.append(f"<p class='muted'>{_e(link)}</p>")
    out += [f"<p>{_e(host_blocked_line(block))}</p>" for block in comm.host_blocked]
    return out
