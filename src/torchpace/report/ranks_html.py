"""The cross-rank section of the doctor's page (``--trace DIR``, ``launch --doctor``): the
terminal's cross-rank tables and words (report/ranks_terminal.py), a chart of each rank's
step, and the job's findings. Drawn from the report's CrossRank, as the terminal is."""

from __future__ import annotations

from torchpace.catalog import FAMILIES, get
from torchpace.report.html_parts import PHASE_COLOURS, figure, table
from torchpace.report.html_parts import escape as _e
from torchpace.report.model import CrossRank, ReportedFinding, Row
from torchpace.report.ranks_terminal import (
    RANK_COLUMNS,
    SKEW_COLUMNS,
    SKEW_TITLE,
    rank_rows,
    ranks_title,
    skew_rows,
    straggler_verdict,
)

HEADING = "The job across ranks"
DISTRIBUTED = FAMILIES["5"]
# The part of a rank's step outside collectives: its own compute, whatever it is.
OWN_WORK_COLOUR = "#3f6ad8"


def cross_rank_html(go, cross: CrossRank, findings: tuple[ReportedFinding, ...]) -> list[str]:
    """The section: each rank's step (the straggler's row set apart), the collectives'
    wait for the last rank vs their transfer, the straggler verdict and the findings of the
    distributed family (TP5xx: the job's, from doctor/ranks.py, and the lowest rank's)."""
    verdict, detail = straggler_verdict(cross)
    straggler_rows = {i for i, r in enumerate(cross.ranks) if r.rank == cross.straggler}
    out = [
        f"<h2>{_e(HEADING)}</h2>",
        f"<p>{_e(ranks_title(cross))}</p>",
        figure(rank_step_figure(go, cross)),
        table(
            list(RANK_COLUMNS),
            rank_rows(cross),
            numeric=set(range(len(RANK_COLUMNS))),
            highlight=straggler_rows,
        ),
    ]
    if cross.collective_skew:
        out.append(f"<h3>{_e(SKEW_TITLE)}</h3>")
        out.append(table(list(SKEW_COLUMNS), skew_rows(cross), numeric={1, 2, 3, 4}))
    tone = "slower" if cross.straggler is not None else "muted"
    out.append(f"<p class='{tone}'><b>{_e(verdict)}</b>: {_e(detail)}</p>")
    job = [f for f in findings if get(f.code).family == DISTRIBUTED]
    if job:
        out.append("<h3>Distributed findings (each in full under Findings)</h3>")
        out.append(_findings_table(job))
    return out


def rank_step_figure(go, cross: CrossRank):
    """Each rank's median step: its own work and its time in collectives, stacked, with the
    median step itself as a mark (medians of each part: they need not add up exactly)."""
    labels = [
        f"rank {r.rank}" + (" (straggler)" if r.rank == cross.straggler else "")
        for r in cross.ranks
    ]
    fig = go.Figure()
    fig.add_bar(
        name="own work", x=labels, y=[r.work_ms for r in cross.ranks], marker_color=OWN_WORK_COLOUR
    )
    fig.add_bar(
        name="in collectives",
        x=labels,
        y=[r.collective_ms for r in cross.ranks],
        marker_color=PHASE_COLOURS[Row.COLLECTIVE],
    )
    fig.add_scatter(
        name="median step",
        x=labels,
        y=[r.median_step_ms for r in cross.ranks],
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 28, "color": "#222"},
    )
    fig.update_layout(barmode="stack", title="each rank's median step: own work and collectives")
    fig.update_yaxes(title="ms")
    return fig


def _findings_table(findings: list[ReportedFinding]) -> str:
    rows = [
        [
            f.code,
            f.severity,
            f.title,
            "-" if f.saving_ms is None else f"{f.saving_ms:.1f} ms",
            f.detail,
        ]
        for f in findings
    ]
    return table(["code", "severity", "title", "saving per step", "what"], rows, numeric={3})
