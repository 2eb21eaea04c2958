"""The CPU time each process of the user's job used during a phase of the capture: the main
process, each DataLoader worker, any other child process (capture/process_cpu.py reads them
from /proc). Plain data: the doctor's crowded-cores check (TP107) reads it."""

from __future__ import annotations

from dataclasses import dataclass, field

MAIN, WORKER, OTHER = "main", "worker", "other"


@dataclass
class ProcessCpu:
    pid: int
    role: str  # MAIN, WORKER (a DataLoader worker) or OTHER (another child of the job)
    name: str  # /proc/PID/comm: "python", "pt_data_worker", ...
    threads: int  # at the phase's end
    busy_threads: int  # of them, those that ran at least a tenth of the phase
    cpu_s: float  # user + system time of all its threads during the phase
    loader: int | None = None  # a worker's DataLoader: its index in RunFacts.loaders


@dataclass
class CpuUse:
    wall_s: float
    cores: int | None  # the cores this process may run on (sched_getaffinity)
    processes: list[ProcessCpu] = field(default_factory=list)

    def of_role(self, role: str) -> list[ProcessCpu]:
        return [p for p in self.processes if p.role == role]

    def share_of_cores(self, processes: list[ProcessCpu]) -> float | None:
        """Their CPU time over what the usable cores could give in the phase: 0.5 is one of
        two cores busy for the whole phase."""
        if not self.cores or self.wall_s <= 0:
            return None
        return sum(p.cpu_s for p in processes) / (self.wall_s * self.cores)

    @classmethod
    def from_dict(cls, d: dict) -> CpuUse:
        d = dict(d)
        d["processes"] = [ProcessCpu(**p) for p in d.get("processes", [])]
        return cls(**d)
