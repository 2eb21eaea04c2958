"""The cross-rank section of the doctor's terminal report (``--trace DIR``), drawn from the
report's CrossRank (report/model.py; doctor/ranks.py computes it). Its columns, rows and
words are the page's too (report/ranks_html.py)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from torchpace.report.model import CrossRank

RANK_COLUMNS = ("rank", "median step", "own work", "in collectives", "of it waiting",
                "all-reduces", "comm share of GPU", "comm overlapped")  # fmt: skip
SKEW_COLUMNS = ("collective", "calls/step", "time/step", "waiting", "transfer",
                "last to arrive")  # fmt: skip
SKEW_TITLE = "collectives: waiting for the last rank vs transfer (calls aligned on their ends)"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def ranks_title(cross: CrossRank) -> str:
    return f"{len(cross.ranks)} ranks, {cross.steps_compared} steps compared"


def rank_rows(cross: CrossRank) -> list[list[str]]:
    """One row per rank, in RANK_COLUMNS."""
    return [
        [
            str(r.rank),
            f"{r.median_step_ms:.1f} ms",
            f"{r.work_ms:.1f} ms",
            f"{r.collective_ms:.1f} ms ({r.collective_on})",
            "-" if wait is None else f"{wait:.1f} ms",
            f"{r.allreduce_calls:g}",
            _share(r.comm_share_of_gpu),
            _share(r.comm_overlap),
        ]
        for r, wait in zip(cross.ranks, cross.median_wait_ms(), strict=False)
    ]


def skew_rows(cross: CrossRank) -> list[list[str]]:
    """Each collective kind's time on the mean rank, split into the wait for the last rank
    to arrive and the transfer (doctor/skew.py: each call aligned on its end across ranks),
    in SKEW_COLUMNS."""
    rows = []
    for c in cross.collective_skew:
        if c.slowest_rank is not None:
            last = f"rank {c.slowest_rank} ({100 * c.slowest_share:.0f}% of the wait)"
        else:
            last = "changes: imbalance" if c.wait_ms_per_step > 0 else "-"
        rows.append(
            [
                c.kind,
                f"{c.calls_per_step:g}",
                f"{c.ms_per_step:.2f} ms",
                f"{c.wait_ms_per_step:.2f} ms",
                f"{c.transfer_ms_per_step:.2f} ms",
                last,
            ]
        )
    return rows


def straggler_verdict(cross: CrossRank) -> tuple[str, str]:
    """The straggler rule's verdict and its figures, in words."""
    if cross.straggler is not None:
        return (
            f"straggler: rank {cross.straggler}",
            f"its own work takes {cross.straggler_excess_ms:.1f} ms per step more than the "
            f"least-loaded rank's; the other ranks wait {cross.wait_ms_per_step:.1f} ms per "
            "step for it inside their collectives",
        )
    return (
        "no straggler",
        f"the ranks' own work per step differs by {cross.straggler_excess_ms:.1f} ms at most",
    )


def render_cross_rank(cross: CrossRank, console: Console | None = None) -> None:
    console = console or Console()
    console.print(_table(ranks_title(cross), RANK_COLUMNS, rank_rows(cross)))
    if cross.collective_skew:
        console.print(_table(SKEW_TITLE, SKEW_COLUMNS, skew_rows(cross)))
    verdict, detail = straggler_verdict(cross)
    if cross.straggler is not None:
        verdict = f"[bold yellow]{verdict}[/bold yellow]"
    console.print(f"{verdict}: {detail}")


def _table(title: str, columns: tuple[str, ...], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, justify="right")
    for row in rows:
        table.add_row(*row)
    return table
