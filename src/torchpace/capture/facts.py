"""What a capture run records besides the profiler trace: the contract between `capture/`
(which writes it from inside the user's process) and `doctor/` (which reads it).

Written as ``run_facts.json`` next to the trace. Times are milliseconds, sizes bytes.
Anything that could not be read is None, never a guess.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class StepRecord:
    index: int  # 0-based, counted from the first step of the user's run
    wall_ms: float
    data_wait_ms: float  # time the main process spent inside DataLoader __next__
    in_window: bool  # inside the profiler capture window
    rss_bytes: int | None = None
    cuda_allocated_bytes: int | None = None  # at the end of the step
    cuda_peak_bytes: int | None = None  # max allocated during the step (reset each step)
    # "warmup", "window", "reference" (unprofiled steps right after the window: the step
    # time without the profiler's own overhead) or "probe"
    phase: str = ""


@dataclass
class LoaderFacts:
    location: str | None  # "train.py:42", where the user built the DataLoader
    num_workers: int
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    batch_size: int | None
    drop_last: bool
    dataset_len: int | None
    dataset_type: str
    batches_seen: int = 0


@dataclass
class SyncSite:
    kind: str  # "item", "cpu", "numpy", "tolist", "nonzero", "print", "synchronize"
    location: str | None  # the user's source line that caused it
    count: int  # in the capture window
    per_step: float
    # device type of the tensor ("cpu", "cuda"): a call on a CPU tensor makes no GPU wait
    device: str | None = None


@dataclass
class WrapperFacts:
    kind: str  # "DataParallel", "DistributedDataParallel", "FullyShardedDataParallel"
    location: str | None
    find_unused_parameters: bool | None = None


@dataclass
class ProbeResult:
    """An A/B measurement taken inside the window: a setting switched for a few steps.

    Used where the cost of a problem can only be known by measuring it (anomaly detection,
    thread count), so that the doctor's estimated saving is measured, not assumed.
    """

    name: str  # e.g. "anomaly-detection-off", "threads-to-cores"
    baseline_ms: float  # median step time with the user's setting
    probe_ms: float  # median step time with the setting switched
    steps: int  # steps measured on each side
    detail: str = ""


@dataclass
class ProcessState:
    device: str  # "cuda" or "cpu": where the model's parameters live
    cuda_available: bool
    cuda_total_memory_bytes: int | None
    anomaly_detection: bool
    grad_enabled: bool
    cudnn_benchmark: bool | None
    cudnn_deterministic: bool | None
    deterministic_algorithms: bool
    tf32_matmul: bool | None
    tf32_cudnn: bool | None
    intra_op_threads: int
    inter_op_threads: int
    usable_cpus: int | None
    physical_cores: int | None
    thread_env: dict[str, str] = field(default_factory=dict)
    allocator: str = "default"


@dataclass
class RunFacts:
    command: list[str]
    step_source: str  # "optimizer", "dataloader" or "manual"
    optimizers: list[str]  # class names of the optimizers that stepped
    optimizer_steps_per_step: float  # 2.0 for a GAN's G and D
    warmup: int
    steps_requested: int
    status: str  # "complete", "script-exited", "script-raised", "timeout", "interrupted"
    error: str | None = None  # the user's traceback, or why no step came
    trace_path: str | None = None
    trace_truncated: bool = False
    steps: list[StepRecord] = field(default_factory=list)
    loaders: list[LoaderFacts] = field(default_factory=list)
    syncs: list[SyncSite] = field(default_factory=list)
    wrappers: list[WrapperFacts] = field(default_factory=list)
    probes: list[ProbeResult] = field(default_factory=list)
    process: ProcessState | None = None

    @property
    def window(self) -> list[StepRecord]:
        return [s for s in self.steps if s.in_window]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def save(self, path: Path) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)

    @classmethod
    def from_dict(cls, d: dict) -> RunFacts:
        d = dict(d)
        d["steps"] = [StepRecord(**s) for s in d.get("steps", [])]
        d["loaders"] = [LoaderFacts(**x) for x in d.get("loaders", [])]
        d["syncs"] = [SyncSite(**x) for x in d.get("syncs", [])]
        d["wrappers"] = [WrapperFacts(**x) for x in d.get("wrappers", [])]
        d["probes"] = [ProbeResult(**x) for x in d.get("probes", [])]
        if d.get("process") is not None:
            d["process"] = ProcessState(**d["process"])
        return cls(**d)

    @classmethod
    def load(cls, path: Path) -> RunFacts:
        return cls.from_dict(json.loads(Path(path).read_text()))
