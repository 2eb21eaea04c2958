"""The memory part of the doctor's report (report/model.DoctorReport.memory): growth, the
split at the peak, the batch headroom, the allocation timeline and an out-of-memory's ways
out, as the doctor built them (doctor/memory.py, doctor/memory_result.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from torchpace.facts.memory import MemoryFacts, OutOfMemory, SiteBytes
from torchpace.report.fields import known


@dataclass(frozen=True)
class Growth:
    """Memory growth (doctor/profile.py): a least-squares line through the allocated bytes
    at the end of each step."""

    source: str  # where the numbers come from, e.g. "trace cpu" or "run facts cuda"
    bytes_per_step: float
    r2: float  # how well the line fits
    rising_share: float  # share of step-to-step changes that are increases
    first: float
    last: float
    steps: int

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class PeakSplitReport:
    """The split at the peak (doctor/memory.PeakSplit), with how each number was obtained."""

    step: int  # the step (index in the run) whose peak this is
    device: str  # "cpu", "cuda"
    peak: int  # all live tensors at the step's peak
    peak_how: str
    capacity: int | None  # the memory there is (see capacity_kind)
    parts: dict[str, int]  # parameters, gradients, optimizer_state, activations, rest
    capacity_kind: str | None
    outside: int  # what the limit counted besides the step's tensors at the peak
    moment: str  # when in the step the parts were taken
    other_parts: dict[str, int] | None  # the parts at the step's other moment
    usable_bytes: int | None  # capacity - outside: what the step's tensors can use
    pct_of_capacity: dict[str, float] | None
    pct_of_usable: dict[str, float] | None
    capacity_text: str | None  # the capacity in words: "the 2.00 GiB RLIMIT_AS"
    how: dict[str, str]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PeakSplitReport:
        return known(cls, d)


@dataclass(frozen=True)
class BatchHeadroom:
    """The largest batch estimated to fit (doctor/memory.batch_headroom): an estimate that
    tune's batch-size finder checks, never a promise."""

    batch_size: int
    largest_batch_estimate: int  # with 10% of the usable memory kept free
    largest_batch_at_limit: int  # with all of it: what tune's batch-size finder checks
    fixed_bytes: int  # parameters, gradients, optimizer state: what does not scale
    per_sample_bytes: int  # activations and the rest, per sample
    usable_bytes: int
    capacity_bytes: int | None
    capacity_kind: str | None
    capacity_text: str | None
    how: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BatchHeadroom:
        return known(cls, d)


@dataclass(frozen=True)
class TimelineStep:
    start_ms: float
    end_ms: float
    backward_start_ms: float | None


@dataclass(frozen=True)
class Timeline:
    """The main device's allocated bytes over the window: (ms from its start, bytes)."""

    device: str
    unit: str
    points: tuple[tuple[float, float], ...]
    steps: tuple[TimelineStep, ...]

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "unit": self.unit,
            "points": [list(p) for p in self.points],
            "steps": [dataclasses.asdict(s) for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: dict) -> Timeline:
        return cls(
            d["device"],
            d["unit"],
            tuple(tuple(p) for p in d.get("points", [])),
            tuple(known(TimelineStep, s) for s in d.get("steps", [])),
        )


@dataclass(frozen=True)
class WayOut:
    """One way out of an out-of-memory failure, with what it frees."""

    name: str
    frees_bytes: int
    how: str  # what the estimate assumes
    cost: str  # what it costs in time or semantics
    knob: str | None = None  # the tune knob that tries it

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class OutOfMemoryReport:
    """A run that ran out of memory: the state at the failure (the run facts'), the bytes
    missing for the failed request and the ranked ways out."""

    failure: OutOfMemory
    shortfall_bytes: int | None
    ways_out: tuple[WayOut, ...]

    def to_dict(self) -> dict:
        return {
            **dataclasses.asdict(self.failure),
            "shortfall_bytes": self.shortfall_bytes,
            "ways_out": [w.to_dict() for w in self.ways_out],
        }

    @classmethod
    def from_dict(cls, d: dict) -> OutOfMemoryReport:
        failure = {k: v for k, v in d.items() if k not in ("shortfall_bytes", "ways_out")}
        return cls(
            MemoryFacts.from_dict({"oom": failure}).oom,
            d.get("shortfall_bytes"),
            tuple(known(WayOut, w) for w in d.get("ways_out", [])),
        )


PEAK_SUFFIX = "_peak_bytes"


@dataclass(frozen=True)
class MemoryReport:
    growth: tuple[Growth, ...] = ()
    # device ("cpu", "cuda:0"; "cuda" from the run facts) -> the most bytes allocated in a
    # profiled step; written as "<device>_peak_bytes"
    peaks: dict[str, int] = field(default_factory=dict)
    host_rss_bytes: int | None = None  # the whole process's, the most at a step's end
    headroom_bytes: int | None = None  # CUDA: the device's memory less the peak
    split_at_peak: PeakSplitReport | None = None
    top_sites: tuple[SiteBytes, ...] = ()  # the peak's activations by the user's line
    timeline: Timeline | None = None
    # with a split, and only then: what checkpointing each block would free, and (for a run
    # that did not run out of memory) the batch headroom
    checkpointing_frees_bytes: int | None = None
    batch_headroom: BatchHeadroom | None = None
    activations_unmeasured: str | None = None  # why activations were not measured
    out_of_memory: OutOfMemoryReport | None = None

    def to_dict(self) -> dict:
        out: dict = {"growth": [g.to_dict() for g in self.growth]}
        out.update({f"{device}{PEAK_SUFFIX}": v for device, v in self.peaks.items()})
        if self.host_rss_bytes is not None:
            out["host_rss_bytes"] = self.host_rss_bytes
        if self.headroom_bytes is not None:
            out["headroom_bytes"] = self.headroom_bytes
        out["split_at_peak"] = self.split_at_peak.to_dict() if self.split_at_peak else None
        out["top_sites"] = [dataclasses.asdict(s) for s in self.top_sites]
        out["timeline"] = self.timeline.to_dict() if self.timeline else None
        if self.split_at_peak is not None:
            out["checkpointing_frees_bytes"] = self.checkpointing_frees_bytes
            if self.out_of_memory is None:  # a failed run's earlier peak says nothing of room
                out["batch_headroom"] = self.batch_headroom and self.batch_headroom.to_dict()
        if self.activations_unmeasured:
            out["activations_unmeasured"] = self.activations_unmeasured
        if self.out_of_memory is not None:
            out["out_of_memory"] = self.out_of_memory.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> MemoryReport:
        split, room, oom = d.get("split_at_peak"), d.get("batch_headroom"), d.get("out_of_memory")
        return cls(
            growth=tuple(known(Growth, g) for g in d.get("growth", [])),
            peaks={k.removesuffix(PEAK_SUFFIX): v for k, v in d.items() if k.endswith(PEAK_SUFFIX)},
            host_rss_bytes=d.get("host_rss_bytes"),
            headroom_bytes=d.get("headroom_bytes"),
            split_at_peak=PeakSplitReport.from_dict(split) if split else None,
            top_sites=tuple(known(SiteBytes, s) for s in d.get("top_sites", [])),
            timeline=Timeline.from_dict(d["timeline"]) if d.get("timeline") else None,
            checkpointing_frees_bytes=d.get("checkpointing_frees_bytes"),
            batch_headroom=BatchHeadroom.from_dict(room) if room else None,
            activations_unmeasured=d.get("activations_unmeasured"),
            out_of_memory=OutOfMemoryReport.from_dict(oom) if oom else None,
        )
