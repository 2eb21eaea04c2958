"""How far to trust the profiled window, and what the findings explain: the doctor's window
check (doctor/disturbance.py) and the breakdown's coverage (doctor/coverage.py), as the
report holds them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torchpace.report.fields import known


@dataclass(frozen=True)
class RowCoverage:
    """A breakdown row of 10% of the step or more, with the codes of the findings acting on
    it (doctor/coverage.py); a row none acts on is unexplained, and the report says so."""

    row: str  # the breakdown's key ("forward_ms")
    ms: float  # mean per step
    pct: float  # share of the profiled steps' total time
    explained_by: tuple[str, ...]
    explained: bool

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "explained_by": list(self.explained_by)}

    @classmethod
    def from_dict(cls, d: dict) -> RowCoverage:
        return known(cls, d, explained_by=tuple(d.get("explained_by") or ()))


@dataclass(frozen=True)
class WindowCheckReport:
    """Was the profiled window disturbed by other work on the machine
    (doctor/disturbance.py)."""

    window_step_ms: float | None  # median of the profiled steps
    unprofiled_step_ms: float | None  # median of the unprofiled steps after the window
    slowdown: float | None  # their ratio
    other_cores: float | None  # cores' worth of other processes' CPU time in the window
    other_cores_unprofiled: float | None  # ...during the unprofiled steps
    cores: int | None  # the cores this process may use
    load_1m: float | None
    reasons: tuple[str, ...]  # why it is disturbed; empty if not
    # the first run's check, when the live doctor ran the script once more
    remeasured_from: dict | None
    disturbed: bool
    advice: str | None

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "reasons": list(self.reasons)}

    @classmethod
    def from_dict(cls, d: dict) -> WindowCheckReport:
        return known(cls, d, reasons=tuple(d.get("reasons") or ()))
