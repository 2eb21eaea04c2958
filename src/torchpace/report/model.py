"""The doctor's report as typed data: built once by the doctor (doctor/result.py), drawn by
the terminal, JSON and HTML renderers, read back from a saved doctor_report.json by compare
and by tune's batch-size check.

It lives in report/, below the doctor, so that the renderers read it without importing the
doctor. ``to_dict`` writes the JSON of docs/schemas/doctor_report.schema.json (a test holds
every field here to a property there, and back); ``from_dict`` reads it back, including
reports written by earlier torchpace versions (a key they lack reads as None).

The breakdown's rows and the device's split are named here once (``Row``, ``GpuPart``), with
the words the renderers print; each renderer keeps only its own colours.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from enum import Enum
from typing import Any

from torchpace.facts.flops import ModuleWork
from torchpace.facts.run import LoaderFacts, ProbeResult, ProcessState, Status
from torchpace.report.comms_model import CommunicationReport
from torchpace.report.fields import enum_keyed, known, str_keyed
from torchpace.report.memory_model import MemoryReport
from torchpace.report.window_model import RowCoverage, WindowCheckReport

# The version of the JSON layout (docs/schemas/doctor_report.schema.json): raised when a key
# is renamed, removed or changes meaning; a new key keeps it. 2: breakdown_ms.forward_ms is
# the forward alone (it was "forward + other"; the rest is other_ms now).
SCHEMA_VERSION = 2
VERB = "doctor"
# The status of a report on a --trace file, where no run took place.
TRACE_STATUS = "trace"
NO_BOTTLENECK = "no significant bottleneck found"
PERFETTO_HINT = "open https://ui.perfetto.dev and drag the trace file in (or chrome://tracing)"


class Row(str, Enum):
    """The step breakdown's rows, in the order of a step (the report's keys; the first six
    since schema_version 1). Every ms of a step is in exactly one row: they add up to it."""

    DATA_WAIT = "data_wait_ms"
    H2D_PAGEABLE = "h2d_pageable_host_ms"
    FORWARD = "forward_ms"
    BACKWARD = "backward_ms"
    OPTIMIZER = "optimizer_ms"
    SYNC_WAIT = "sync_wait_ms"
    COLLECTIVE = "collective_ms"
    RANK_WAIT = "rank_wait_ms"
    OTHER = "other_ms"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        return ROW_LABELS[self]


ROW_LABELS = {
    Row.DATA_WAIT: "data wait",
    Row.H2D_PAGEABLE: "H2D copy (host blocked)",
    Row.FORWARD: "forward",
    Row.BACKWARD: "backward",
    Row.OPTIMIZER: "optimizer",
    Row.SYNC_WAIT: "sync wait",
    Row.COLLECTIVE: "collectives",
    Row.RANK_WAIT: "waiting for other ranks",
    Row.OTHER: "other (unattributed)",
}


class GpuPart(str, Enum):
    """The device's timeline in a step (GPU runs), split so that the parts add up to it."""

    COMPUTE = "gpu_compute_ms"
    COMM_ALONE = "gpu_comm_alone_ms"
    RANK_WAIT = "gpu_rank_wait_ms"
    COPY_ALONE = "gpu_copy_alone_ms"
    IDLE = "gpu_idle_ms"

    def __str__(self) -> str:
        return self.value

    @property
    def label(self) -> str:
        return GPU_PART_LABELS[self]


GPU_PART_LABELS = {
    GpuPart.COMPUTE: "compute",
    GpuPart.COMM_ALONE: "communication alone",
    GpuPart.RANK_WAIT: "waiting for other ranks",
    GpuPart.COPY_ALONE: "copies alone",
    GpuPart.IDLE: "idle",
}
GPU_BUSY = "gpu_busy_ms"  # a per-step number beside the split (busy = the step less idle)


# --- the parts ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """A per-step number over the profiled steps."""

    median: float
    min: float
    max: float

    @classmethod
    def of(cls, stat) -> Stat:
        """From the profile's Stat (doctor/profile.py), rounded to the µs."""
        return cls(round(stat.median, 3), round(stat.min, 3), round(stat.max, 3))

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Stat:
        return cls(d["median"], d["min"], d["max"])


@dataclass(frozen=True)
class Env:
    """The versions of the environment the script ran in (not for --trace)."""

    python: str
    torch: str | None
    platform: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Device:
    index: int | None
    name: str | None
    capability: str | None  # "9.0"
    memory_bytes: int | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Throughput:
    """The headline figure (doctor/throughput.py): samples/s over the unprofiled steps after
    the window, with the spread of those steps."""

    source: str  # doctor/throughput.UNPROFILED or PROFILED
    steps: int
    seconds: float  # the steps' total wall time
    step_ms_mean: float  # seconds / steps: the step that the throughput implies
    data_wait_ms_mean: float
    samples: int | None  # in those steps; None when no loader batch was seen
    samples_per_s: float | None
    # the spread: per-step quantiles, and the throughput of each half of the steps (a
    # loop still speeding up or slowing down shows as two different halves)
    step_ms_p10: float
    step_ms_median: float
    step_ms_p90: float
    step_ms_min: float
    step_ms_max: float
    first_half_samples_per_s: float | None
    second_half_samples_per_s: float | None
    unprofiled: bool  # source is the unprofiled steps (the profiler slowed none of them)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Throughput:
        return known(cls, d)


@dataclass(frozen=True)
class GpuReport:
    """Per-step device numbers (GPU runs): each metric's stat, and the matmuls' input dtypes."""

    stats: dict[str, Stat]
    matmul_input_dtypes: Any = None  # {dtype: ms} or a list of them

    def median(self, name: str, default: float = 0.0) -> float:
        stat = self.stats.get(name)
        return default if stat is None else stat.median

    def to_dict(self) -> dict:
        return {
            **{k: s.to_dict() for k, s in self.stats.items()},
            "matmul_input_dtypes": self.matmul_input_dtypes,
        }

    @classmethod
    def from_dict(cls, d: dict) -> GpuReport:
        stats = {k: Stat.from_dict(v) for k, v in d.items() if k != "matmul_input_dtypes"}
        return cls(stats, d.get("matmul_input_dtypes"))


# --- steps --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StepAllocator:
    """A device's allocator totals in a profiled step (from the trace)."""

    allocated_end_bytes: float | None
    peak_bytes: float | None


@dataclass(frozen=True)
class ProfiledStep:
    """One profiled step: its wall time, the rows (Row, GpuPart, GPU_BUSY keys) it really
    measured, in ms, and each device's allocator totals."""

    wall_ms: float
    parts: dict[str, float]
    memory: dict[str, StepAllocator]

    def to_dict(self) -> dict:
        return {
            "wall_ms": self.wall_ms,
            **str_keyed(self.parts),
            "memory": {d: dataclasses.asdict(m) for d, m in self.memory.items()},
        }

    @classmethod
    def from_dict(cls, d: dict) -> ProfiledStep:
        parts = {k: v for k, v in d.items() if k not in ("wall_ms", "memory")}
        memory = {dev: known(StepAllocator, m) for dev, m in (d.get("memory") or {}).items()}
        return cls(d["wall_ms"], parts, memory)


@dataclass(frozen=True)
class RecordedStep:
    """A step the run facts hold (warm-up, window, probe, settle, reference, measured)."""

    index: int
    phase: str
    wall_ms: float
    data_wait_ms: float
    rss_bytes: int | None
    cuda_allocated_bytes: int | None
    cuda_peak_bytes: int | None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RecordedStep:
        return known(cls, d)


# --- findings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportedFinding:
    """A doctor finding as the report shows it (doctor/finding.Finding, with its catalog
    entry's title, practices and docs page)."""

    code: str
    severity: str  # "high", "medium", "low"
    title: str
    detail: str
    evidence: dict[str, Any]  # named numbers: what was measured
    fix: str
    saving_ms: float | None  # estimated saving per step
    saving_pct: float | None  # that saving as a % of the step
    step_ms: float | None
    location: str | None  # the user's source line, file:line
    knob: str | None  # the torchpace tune knob that tests the fix
    notes: tuple[str, ...]
    practices: tuple[str, ...]
    doc: str
    # how the job ends, for a finding that ends it (a leak reaching capacity, an
    # out-of-memory, a timeout): its cost is the job, not ms per step
    ends_job: str | None = None
    # the step the saving and its share are of, in words (doctor/pricing.py)
    basis: str | None = None

    def to_dict(self) -> dict:
        # the keys in the order the report has always written them
        return {
            "code": self.code, "evidence": dict(self.evidence), "fix": self.fix,
            "saving_ms": self.saving_ms, "step_ms": self.step_ms, "severity": self.severity,
            "location": self.location, "knob": self.knob, "detail": self.detail,
            "notes": list(self.notes), "ends_job": self.ends_job, "title": self.title,
            "practices": list(self.practices),
            "saving_pct": self.saving_pct, "doc": self.doc, "basis": self.basis,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> ReportedFinding:
        return known(
            cls,
            d,
            evidence=dict(d.get("evidence") or {}),
            notes=tuple(d.get("notes") or ()),
            practices=tuple(d.get("practices") or ()),
        )


# --- across ranks -------------------------------------------------------------------------


@dataclass(frozen=True)
class RankFigures:
    """One rank's figures in the cross-rank view (doctor/ranks.py)."""

    rank: int
    path: str
    step_ms: tuple[float, ...]
    median_step_ms: float
    collective_ms: float  # median per step, on the GPU (NCCL kernels) or else the CPU
    collective_on: str  # "gpu" or "cpu"
    work_ms: float  # median per step of the step's time outside collectives
    work_per_step: tuple[float, ...]
    allreduce_calls: float  # median per step, c10d all-reduce calls
    synced_backwards: float  # median per step: DDP forwards whose backward all-reduced
    comm_share_of_gpu: float | None  # NCCL kernel time / all kernel time (GPU ranks)
    comm_overlap: float | None  # share of NCCL kernel time overlapped by compute kernels
    comm_overlap_per_step: tuple[float | None, ...]  # the same for each step's kernels


@dataclass(frozen=True)
class CollectiveSkew:
    """One collective kind's time across ranks, per step and per rank on average, split into
    the wait for the last rank to arrive and the transfer (doctor/skew.py)."""

    kind: str
    calls_per_step: float
    ms_per_step: float
    wait_ms_per_step: float
    transfer_ms_per_step: float
    slowest_rank: int | None  # the rank that arrived last in most of the waited time
    slowest_share: float  # the share of the wait that rank's late arrivals caused
    wait_ms_by_step: tuple[float, ...] = ()  # the mean rank's wait in each compared step


@dataclass(frozen=True)
class CrossRank:
    """The job across ranks (``--trace DIR``, ``launch --doctor``)."""

    ranks: tuple[RankFigures, ...]
    steps_compared: int
    straggler: int | None  # the rank, when its work is longer by STRAGGLER_SHARE or more
    straggler_excess_ms: float  # its median work minus the least-loaded rank's
    wait_ms_per_step: float  # mean over steps and the other ranks of (max work - their work)
    # per rank (in the order of ``ranks``), each compared step's wait for the slowest rank:
    # the most work any rank did in that step minus this rank's own (0 for the slowest)
    rank_wait_per_step: tuple[tuple[float, ...], ...] = ()
    collective_skew: tuple[CollectiveSkew, ...] = ()  # per kind, most wait first

    def median_wait_ms(self) -> tuple[float | None, ...]:
        """Per rank (in the order of ``ranks``), its median wait per step for the slowest
        rank; None where it has none (one rank, or a rank without steps). The terminal and
        the page print it; computed here once, from ``rank_wait_per_step``."""
        waits = self.rank_wait_per_step or ((),) * len(self.ranks)
        return tuple(statistics.median(w) if w else None for w in waits)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CrossRank:
        ranks = tuple(
            known(RankFigures, r, **{k: tuple(r.get(k) or ()) for k in _RANK_TUPLES})
            for r in d.get("ranks", [])
        )
        waits = tuple(tuple(w) for w in d.get("rank_wait_per_step") or ())
        skew = tuple(
            known(CollectiveSkew, c, wait_ms_by_step=tuple(c.get("wait_ms_by_step") or ()))
            for c in d.get("collective_skew") or ()
        )
        return known(cls, d, ranks=ranks, rank_wait_per_step=waits, collective_skew=skew)


_RANK_TUPLES = ("step_ms", "work_per_step", "comm_overlap_per_step")


# --- the speed of light -------------------------------------------------------------------


@dataclass(frozen=True)
class GapRow:
    """One cause of the gap between the ideal step and the measured one, in ms per step."""

    cause: str
    ms: float
    detail: str = ""


@dataclass(frozen=True)
class OpRoofline:
    """One op of the per-op roofline, per step (doctor/speed_of_light.py)."""

    name: str
    calls: float
    ms: float  # the host's span, or the kernels' device time on a GPU
    flops: float
    bytes: float
    flop_per_s: float | None
    bytes_per_s: float | None
    intensity: float | None  # FLOPs per byte
    bound: str  # "compute", "memory", "view" or "unknown"
    floor_ms: float | None  # the roofline's time for its FLOPs and bytes
    has_formula: bool


@dataclass(frozen=True)
class SpeedOfLightReport:
    """FLOPs, MFU, the gap to the speed of light by cause and the per-op roofline: built by
    doctor/speed_of_light.analyse, drawn by report/roofline.py."""

    source: str  # "counted" (a step counted in the capture) or "trace" (the trace's shapes)
    device: str  # "cpu" or "cuda:0"
    device_name: str | None
    flops_per_step: float
    flops_forward: float | None
    flops_backward: float | None
    bytes_per_step: float | None
    flops_by_dtype: dict[str, float]
    samples_per_step: int | None
    step_ms: float  # the step the MFU is of
    step_source: str  # "unprofiled" (the headline) or "profiled" (the window's median)
    profiled_step_ms: float  # the window's median step: the ops' times are from it
    achieved_flop_per_s: float
    peak_flop_per_s: float | None  # the measured peak for the step's dtypes (their mix)
    datasheet_flop_per_s: float | None
    peak_bandwidth: float | None
    datasheet_bandwidth: float | None
    peak_measured_here: bool
    peak_source: str  # "measured here", "datasheet" or "this machine's"
    ideal_ms: float | None  # the step's FLOPs at the measured peak
    mfu: float | None
    mfu_datasheet: float | None
    gap: tuple[GapRow, ...] = ()  # add up to step_ms - ideal_ms
    ops: tuple[OpRoofline, ...] = ()  # the most time first
    modules: tuple[ModuleWork, ...] = ()
    uncounted_ops: tuple[str, ...] = ()
    uncounted_ms: float = 0.0  # per step: the time of ops whose FLOPs are not known
    uncounted_share: float = 0.0  # of the step
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return out | {
            "flops_by_dtype": dict(self.flops_by_dtype),
            "gap": [dataclasses.asdict(g) for g in self.gap],
            "ops": [dataclasses.asdict(o) for o in self.ops],
            "modules": [dataclasses.asdict(m) for m in self.modules],
            "uncounted_ops": list(self.uncounted_ops),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict) -> SpeedOfLightReport:
        return known(
            cls,
            d,
            flops_by_dtype=dict(d.get("flops_by_dtype") or {}),
            gap=tuple(known(GapRow, g) for g in d.get("gap") or ()),
            ops=tuple(known(OpRoofline, o) for o in d.get("ops") or ()),
            modules=tuple(known(ModuleWork, m) for m in d.get("modules") or ()),
            uncounted_ops=tuple(d.get("uncounted_ops") or ()),
            notes=tuple(d.get("notes") or ()),
        )


# --- the user's files -----------------------------------------------------------------------


@dataclass(frozen=True)
class FilesReport:
    """What a profiled script wrote outside the run folder (capture/file_restore.FilesTouched):
    the doctor runs it as the user would and leaves them; tune puts them back."""

    changed: tuple[str, ...] = ()  # existed, and were written, renamed or removed
    created: tuple[str, ...] = ()
    unwatched: tuple[str, ...] = ()  # changed by C code or a subprocess
    failed: tuple[str, ...] = ()  # "path: why" a restore that failed
    restored: bool = False
    note: str = ""  # e.g. the folder was too large to snapshot
    protected: bool = False  # put back after the run (tune), whether or not all were
    links: tuple[str, ...] = ()  # "link -> target": written through a symbolic link
    refused: tuple[str, ...] = ()  # "path: why": writes refused (the original not saved)

    def to_dict(self) -> dict:
        return {"changed": list(self.changed), "created": list(self.created),
                "unwatched": list(self.unwatched), "failed": list(self.failed),
                "restored": self.restored, "note": self.note, "protected": self.protected,
                "links": list(self.links), "refused": list(self.refused)}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> FilesReport:
        lists = ("changed", "created", "unwatched", "failed", "links", "refused")
        return known(cls, d, **{k: tuple(d[k]) for k in lists if k in d})


# --- the report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ProfilerLog:
    """The profiler's own log lines, kept out of the terminal (capture/profiler_log.py)."""

    path: str
    lines: int
    errors: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"path": self.path, "lines": self.lines, "errors": list(self.errors)}


@dataclass(frozen=True, kw_only=True)
class DoctorReport:
    """What `torchpace doctor` measured and found (docs/schemas/doctor_report.schema.json)."""

    schema_version: int = SCHEMA_VERSION
    torchpace: str  # the version that wrote it
    verb: str = VERB
    command: tuple[str, ...] | None  # python train.py args; None for a --trace alone
    status: str  # how the capture ended (facts.run.Status), or TRACE_STATUS
    error: str | None  # the script's traceback, or why no step came
    env: Env | None  # only for a script that ran here
    steps_captured: int
    whole_trace_as_one_step: bool
    step_ms: Stat | None
    samples_per_s: float | None
    # why a step is not what was asked (RunFacts.step_note: the batches were the steps)
    step_note: str | None = None
    throughput: Throughput | None
    unprofiled_step_ms: float | None  # the median unprofiled step after the window
    breakdown_ms: dict[Row, Stat]  # the rows measured, in the order of a step
    breakdown_pct: dict[Row, float]  # each row's share of the steps' total time: sum 100
    gpu: GpuReport | None
    memory: MemoryReport
    communication: CommunicationReport | None = None  # None without collective kernels
    device: Device
    loaders: tuple[LoaderFacts, ...]
    process: ProcessState | None
    probes: tuple[ProbeResult, ...]
    verdict: str
    coverage: tuple[RowCoverage, ...] = ()
    window_check: WindowCheckReport | None = None  # None without run facts
    findings: tuple[ReportedFinding, ...]  # most important first
    trace: str | None
    trace_truncated: bool
    open_trace: str | None
    per_step: tuple[ProfiledStep, ...]
    steps_recorded: tuple[RecordedStep, ...]
    # FLOPs, MFU, the gap to the speed of light by cause, the per-op roofline
    # (doctor/speed_of_light.py, drawn by report/roofline.py); None: the step's FLOPs are not
    # known
    speed_of_light: SpeedOfLightReport | None = None
    gpu_split_pct: dict[GpuPart, float] | None  # None without a GPU
    cross_rank: CrossRank | None = None  # written only for a job's report
    # what the script wrote in the user's folders (capture/files_report.py), for a script
    # that ran; written only then
    files: FilesReport | None = None
    profiler_log: ProfilerLog | None = None

    @property
    def complete(self) -> bool:
        """The run ended as planned, or it is a trace (no run)."""
        return self.status in (Status.COMPLETE, TRACE_STATUS)

    def largest_loader(self) -> LoaderFacts | None:
        """The loader of the loop: the one that gave the most batches."""
        return max(self.loaders, key=lambda x: x.batches_seen) if self.loaders else None

    def to_dict(self) -> dict:
        out = {
            "schema_version": self.schema_version,
            "torchpace": self.torchpace,
            "verb": self.verb,
            "command": list(self.command) if self.command is not None else None,
            "status": str(self.status),
            "error": self.error,
            "env": self.env and self.env.to_dict(),
            "steps_captured": self.steps_captured,
            "whole_trace_as_one_step": self.whole_trace_as_one_step,
            "step_note": self.step_note,
            "step_ms": self.step_ms and self.step_ms.to_dict(),
            "samples_per_s": self.samples_per_s,
            "throughput": self.throughput and self.throughput.to_dict(),
            "unprofiled_step_ms": self.unprofiled_step_ms,
            "breakdown_ms": {str(k): s.to_dict() for k, s in self.breakdown_ms.items()},
            "breakdown_pct": str_keyed(self.breakdown_pct),
            "gpu": self.gpu and self.gpu.to_dict(),
            "memory": self.memory.to_dict(),
            "communication": self.communication and self.communication.to_dict(),
            "device": self.device.to_dict(),
            "loaders": [dataclasses.asdict(x) for x in self.loaders],
            "process": self.process and dataclasses.asdict(self.process),
            "probes": [dataclasses.asdict(x) for x in self.probes],
            "verdict": self.verdict,
            "coverage": [c.to_dict() for c in self.coverage],
            "window_check": self.window_check and self.window_check.to_dict(),
            "findings": [f.to_dict() for f in self.findings],
            "trace": self.trace,
            "trace_truncated": self.trace_truncated,
            "open_trace": self.open_trace,
            "per_step": [s.to_dict() for s in self.per_step],
            "steps_recorded": [s.to_dict() for s in self.steps_recorded],
            "speed_of_light": self.speed_of_light and self.speed_of_light.to_dict(),
            "gpu_split_pct": None if self.gpu_split_pct is None else str_keyed(self.gpu_split_pct),
        }
        if self.cross_rank is not None:
            out["cross_rank"] = self.cross_rank.to_dict()
        if self.files is not None:
            out["files"] = self.files.to_dict()
        out["profiler_log"] = self.profiler_log and self.profiler_log.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict) -> DoctorReport:
        """A saved doctor_report.json, from this version or an earlier one (keys it lacks
        read as None or empty)."""

        def opt(key, read):
            value = d.get(key)
            return None if value is None else read(value)

        return cls(
            schema_version=d.get("schema_version", SCHEMA_VERSION),
            torchpace=d.get("torchpace", "unknown"),
            verb=d.get("verb", VERB),
            command=opt("command", tuple),
            status=d.get("status", TRACE_STATUS),
            error=d.get("error"),
            env=opt("env", lambda e: known(Env, e)),
            steps_captured=d.get("steps_captured", len(d.get("per_step") or [])),
            whole_trace_as_one_step=bool(d.get("whole_trace_as_one_step")),
            step_note=d.get("step_note"),
            step_ms=opt("step_ms", Stat.from_dict),
            samples_per_s=d.get("samples_per_s"),
            throughput=opt("throughput", Throughput.from_dict),
            unprofiled_step_ms=d.get("unprofiled_step_ms"),
            breakdown_ms=enum_keyed(Row, d.get("breakdown_ms"), Stat.from_dict),
            breakdown_pct=enum_keyed(Row, d.get("breakdown_pct"), float),
            gpu=opt("gpu", GpuReport.from_dict),
            memory=MemoryReport.from_dict(d.get("memory") or {}),
            communication=opt("communication", CommunicationReport.from_dict),
            device=known(Device, d.get("device") or {}),
            loaders=tuple(known(LoaderFacts, x) for x in d.get("loaders") or []),
            process=opt("process", lambda p: known(ProcessState, p)),
            probes=tuple(known(ProbeResult, x) for x in d.get("probes") or []),
            verdict=d.get("verdict", ""),
            coverage=tuple(RowCoverage.from_dict(c) for c in d.get("coverage") or []),
            window_check=opt("window_check", WindowCheckReport.from_dict),
            findings=tuple(ReportedFinding.from_dict(f) for f in d.get("findings") or []),
            trace=d.get("trace"),
            trace_truncated=bool(d.get("trace_truncated")),
            open_trace=d.get("open_trace"),
            per_step=tuple(ProfiledStep.from_dict(s) for s in d.get("per_step") or []),
            steps_recorded=tuple(RecordedStep.from_dict(s) for s in d.get("steps_recorded") or []),
            speed_of_light=opt("speed_of_light", SpeedOfLightReport.from_dict),
            gpu_split_pct=opt("gpu_split_pct", lambda p: enum_keyed(GpuPart, p, float)),
            cross_rank=opt("cross_rank", CrossRank.from_dict),
            files=opt("files", FilesReport.from_dict),
            profiler_log=opt(
                "profiler_log", lambda p: ProfilerLog(p["path"], p["lines"], tuple(p["errors"]))
            ),
        )
