"""Is every large row of the step breakdown explained? Each row taking 10% of the step or
more (its share of the profiled steps' total time, doctor/breakdown.py) is matched with the
findings that act on it; a row that none acts on is stated as "unexplained: N ms" in the
report rather than left for the reader to wonder about.

Which findings act on which row is a table (``EXPLAINS``): a finding about precision or
layout (TP311, TP312) acts on the forward and backward passes, one about the loader's
workers (TP101) on the data wait, one about syncs (TP201) on the sync wait... A row can be
named by a finding and still hold more time than its saving: the saving is the finding's
own estimate, the row the measurement.
"""

from __future__ import annotations

from torchpace.doctor.finding import Finding
from torchpace.doctor.profile import Profile
from torchpace.report.window_model import RowCoverage

# A row at least this share of the step must be explained.
MIN_ROW_SHARE = 0.10
# TP107: loader workers that take the cores slow the forward, backward and optimizer
COMPUTE = {"TP104", "TP107", "TP301", "TP304", "TP307", "TP308", "TP310", "TP311", "TP312",
           "TP314", "TP601"}  # fmt: skip
DISTRIBUTED = {"TP501", "TP502", "TP503", "TP505", "TP506", "TP507"}
# report key -> (StepMetrics field, the codes of the findings that act on that row)
EXPLAINS: dict[str, tuple[str, set[str]]] = {
    "data_wait_ms": ("part_data_wait_ms", {"TP101", "TP104", "TP106"}),
    "h2d_pageable_host_ms": ("part_h2d_ms", {"TP102", "TP103", "TP106"}),
    "forward_ms": ("part_forward_ms", COMPUTE | {"TP405"}),
    "backward_ms": ("part_backward_ms", COMPUTE | DISTRIBUTED | {"TP405"}),
    "optimizer_ms": ("part_optimizer_ms", {"TP313", "TP310", "TP601", "TP107"}),
    "sync_wait_ms": ("part_sync_ms", {"TP201", "TP103", "TP507"}),
    "collective_ms": ("part_collective_ms", DISTRIBUTED),
    "rank_wait_ms": ("part_rank_wait_ms", {"TP505"}),
    # after the backward and outside the optimizer: clipping, the scheduler, logging, waits
    # without a call; what the host does there is host work (TP310's host-work finding)
    "other_ms": ("part_other_ms", {"TP310", "TP201"}),
}


def coverage(profile: Profile, findings: list[Finding]) -> list[RowCoverage]:
    """The rows of 10% of the step or more, each with the findings that explain it."""
    steps = profile.per_step
    total = sum(m.wall_ms for m in steps)
    if not steps or total <= 0:
        return []
    codes = {f.code for f in findings}
    out = []
    for row, (name, acting) in EXPLAINS.items():
        ms = sum(getattr(m, name) for m in steps if name in m.measured())
        if ms / total < MIN_ROW_SHARE:
            continue
        out.append(
            RowCoverage(
                row=row,
                ms=round(ms / len(steps), 3),
                pct=round(100 * ms / total, 1),
                explained_by=tuple(sorted(codes & acting)),
                explained=bool(codes & acting),
            )
        )
    return out
