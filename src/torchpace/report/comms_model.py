"""The communication part of the doctor's report: the collectives by kind and message size
and the host blocked behind them. doctor/comms.py builds these types directly from the trace
(full precision: its checks price them), comms_terminal.py and comms_html.py draw them, and
``to_dict`` rounds them for the JSON."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from torchpace.report.fields import known


@dataclass(frozen=True)
class CollectiveReport:
    """All calls of one collective kind and message size, per profiled step (doctor/comms.py)."""

    kind: str
    size_bytes: int | None
    ranks: int | None
    calls_per_step: float
    ms_per_step: float
    exposed_ms_per_step: float  # no compute kernel beside it
    overlapped_ms_per_step: float
    algbw_gbps: float | None  # nccl-tests' algorithm bandwidth, median over the calls
    busbw_gbps: float | None  # and bus bandwidth (comparable with the link's peak)

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "size_bytes": self.size_bytes,
            "ranks": self.ranks,
            "calls_per_step": round(self.calls_per_step, 2),
            "ms_per_step": round(self.ms_per_step, 3),
            "exposed_ms_per_step": round(self.exposed_ms_per_step, 3),
            "overlapped_ms_per_step": round(self.overlapped_ms_per_step, 3),
            "algbw_gbps": _round(self.algbw_gbps, 2),
            "busbw_gbps": _round(self.busbw_gbps, 2),
        }


@dataclass(frozen=True)
class HostBlockReport:
    """The host blocked in a sync or copy while the device ran communication."""

    label: str | None  # the innermost record_function around the blocking call
    call: str  # "cudaStreamSynchronize", "aten::item"...
    # the blocked time per step, less what the device spent only communicating in it (the
    # exposed communication, priced by TP506): the wait the host adds on its own
    ms_per_step: float
    behind: str  # the collective kind the device was running

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "ms_per_step": round(self.ms_per_step, 3)}


@dataclass(frozen=True)
class CommunicationReport:
    """The trace's collectives by kind and size, and the host blocked behind them."""

    ms_per_step: float
    exposed_ms_per_step: float
    overlapped_ms_per_step: float
    host_blocked_ms_per_step: float
    link: str | None
    link_peak_gbps: float | None
    collectives: tuple[CollectiveReport, ...]  # most time first
    host_blocked: tuple[HostBlockReport, ...]  # most time first

    def to_dict(self) -> dict:
        return {
            "ms_per_step": round(self.ms_per_step, 3),
            "exposed_ms_per_step": round(self.exposed_ms_per_step, 3),
            "overlapped_ms_per_step": round(self.overlapped_ms_per_step, 3),
            "host_blocked_ms_per_step": round(self.host_blocked_ms_per_step, 3),
            "link": self.link,
            "link_peak_gbps": self.link_peak_gbps,
            "collectives": [c.to_dict() for c in self.collectives],
            "host_blocked": [b.to_dict() for b in self.host_blocked],
        }

    @classmethod
    def from_dict(cls, d: dict) -> CommunicationReport:
        return known(
            cls,
            d,
            collectives=tuple(known(CollectiveReport, c) for c in d.get("collectives") or ()),
            host_blocked=tuple(known(HostBlockReport, b) for b in d.get("host_blocked") or ()),
        )


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)
