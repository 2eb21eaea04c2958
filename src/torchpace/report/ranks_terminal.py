"""The cross-rank section of the doctor's terminal report (``--trace DIR``), drawn from the
report's CrossRank (report/model.py; doctor/ranks.py computes it)."""

from __future__ import annotations

import statistics

from rich.console import Console
from rich.table import Table

from torchpace.report.model import CrossRank


def _share(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def render_cross_rank(cross: CrossRank, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=f"{len(cross.ranks)} ranks, {cross.steps_compared} steps compared")
    for column in ("rank", "median step", "own work", "in collectives", "of it waiting",
                   "all-reduces", "comm share of GPU", "comm overlapped"):  # fmt: skip
        table.add_column(column, justify="right")
    waits = cross.rank_wait_per_step or [() for _ in cross.ranks]
    for r, wait in zip(cross.ranks, waits, strict=False):
        table.add_row(
            str(r.rank),
            f"{r.median_step_ms:.1f} ms",
            f"{r.work_ms:.1f} ms",
            f"{r.collective_ms:.1f} ms ({r.collective_on})",
            f"{statistics.median(wait):.1f} ms" if wait else "-",
            f"{r.allreduce_calls:g}",
            _share(r.comm_share_of_gpu),
            _share(r.comm_overlap),
        )
    console.print(table)
    if cross.collective_skew:
        console.print(_skew_table(cross))
    if cross.straggler is not None:
        console.print(
            f"[bold yellow]straggler: rank {cross.straggler}[/bold yellow]: its own work takes "
            f"{cross.straggler_excess_ms:.1f} ms per step more than the least-loaded rank's; "
            f"the other ranks wait {cross.wait_ms_per_step:.1f} ms per step for it inside "
            "their collectives"
        )
    else:
        console.print(
            f"no straggler: the ranks' own work per step differs by "
            f"{cross.straggler_excess_ms:.1f} ms at most"
        )


def _skew_table(cross: CrossRank) -> Table:
    """Each collective kind's time on the mean rank, split into the wait for the last rank
    to arrive and the transfer (doctor/skew.py: each call aligned on its end across ranks)."""
    table = Table(
        title="collectives: waiting for the last rank vs transfer (calls aligned on their ends)"
    )
    for column in ("collective", "calls/step", "time/step", "waiting", "transfer",
                   "last to arrive"):  # fmt: skip
        table.add_column(column, justify="right")
    for c in cross.collective_skew:
        if c.slowest_rank is not None:
            last = f"rank {c.slowest_rank} ({100 * c.slowest_share:.0f}% of the wait)"
        else:
            last = "changes: imbalance" if c.wait_ms_per_step > 0 else "-"
        table.add_row(
            c.kind,
            f"{c.calls_per_step:g}",
            f"{c.ms_per_step:.2f} ms",
            f"{c.wait_ms_per_step:.2f} ms",
            f"{c.transfer_ms_per_step:.2f} ms",
            last,
        )
    return table
