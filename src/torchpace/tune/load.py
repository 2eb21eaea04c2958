"""How much of the machine other processes used while a trial ran.

A trial is a child process (and its loader workers); the machine's CPU time comes from
/proc/stat, the trial's own from the children's resource usage, tune's own from its own.
What is left was someone else's: another job, another user, the hypervisor's neighbours
(steal time is counted as busy). Reported in cores (1.0: one core's worth, all along), so
that the search (tune/disturbed.py) can tell a run that shared the machine with a busy
neighbour from its siblings (noise.disturbance). None where /proc/stat cannot be read (not Linux).
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

_PROC_STAT = Path("/proc/stat")
# user nice system idle iowait irq softirq steal (guest time is already inside user)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    machine_busy_s: float | None  # every CPU's busy time since boot
    children_s: float  # user + system of this process's waited-for children
    own_s: float


def _machine_busy_s() -> float | None:
    try:
        line = _PROC_STAT.read_text().splitlines()[0]
    except (OSError, IndexError):
        return None
    fields = line.split()
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(v) for v in fields[1:]]
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) / hz


def snapshot() -> CpuSnapshot:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return CpuSnapshot(
        wall_s=time.perf_counter(),
        machine_busy_s=_machine_busy_s(),
        children_s=children.ru_utime + children.ru_stime,
        own_s=own.ru_utime + own.ru_stime,
    )


def others_cores(before: CpuSnapshot, after: CpuSnapshot) -> float | None:
    """Other processes' CPU time between the two snapshots over the wall time, in cores."""
    wall = after.wall_s - before.wall_s
    if before.machine_busy_s is None or after.machine_busy_s is None or wall <= 0:
        return None
    busy = after.machine_busy_s - before.machine_busy_s
    ours = (after.children_s - before.children_s) + (after.own_s - before.own_s)
    return round(max(0.0, busy - ours) / wall, 2)
