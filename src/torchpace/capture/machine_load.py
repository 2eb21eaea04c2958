"""How busy the machine was around a phase of the capture: the CPU time every process spent
(/proc/stat) less what this process and its children (DataLoader workers) spent, over the
phase's wall time, and the load average. Read in the child at the window's start and end and
around the unprofiled steps, so that the doctor can tell a window slowed by another process
on the cores from a window slowed by the profiler (doctor/disturbance.py).

Linux only (/proc); elsewhere every sample is None and the doctor judges by step times alone.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from torchpace.facts.run import PhaseLoad

PROC = Path("/proc")


@dataclass(frozen=True)
class LoadSample:
    wall_s: float  # time.monotonic()
    machine_busy_s: float  # CPU time every process spent, all cores, since boot
    own_s: float  # CPU time of this process and its live children
    load_1m: float | None


def sample(pid: int | None = None) -> LoadSample | None:
    """The counters now, on the cores this process may run on; None where /proc cannot be
    read."""
    pid = os.getpid() if pid is None else pid
    busy = cpus_busy_s()
    if busy is None:
        return None
    return LoadSample(time.monotonic(), busy, tree_cpu_s(pid), load_1m())


def cpus_busy_s() -> float | None:
    """The busy seconds since boot of the CPUs this process may run on (its affinity), the
    one reading of /proc/stat the doctor (here) and tune (tune/load.py) judge a neighbour
    by; None where /proc cannot be read. The affinity, not every CPU: work on other cores
    (another job bound elsewhere by taskset, cgroups or a scheduler's cpuset) takes nothing
    from this job, while work on these cores takes its time slices."""
    try:
        return machine_busy_s((PROC / "stat").read_text(), usable_cpus())
    except (OSError, ValueError, IndexError):
        return None


def usable_cpus() -> set[int] | None:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def between(a: LoadSample | None, b: LoadSample | None, cores: int | None) -> PhaseLoad | None:
    """What other processes did on this process's cores between two samples."""
    if a is None or b is None or b.wall_s <= a.wall_s:
        return None
    wall = b.wall_s - a.wall_s
    other = max(0.0, (b.machine_busy_s - a.machine_busy_s) - (b.own_s - a.own_s))
    return PhaseLoad(
        wall_s=round(wall, 3),
        other_cpu_s=round(other, 3),
        own_cpu_s=round(b.own_s - a.own_s, 3),
        cores=cores,
        load_1m=b.load_1m,
    )


def machine_busy_s(stat_text: str, cpus: set[int] | None = None) -> float:
    """Seconds of CPU time spent not idle, from /proc/stat: on the given cores (its cpuN
    lines), or on all of them (its first line). User, nice, system, irq, softirq and steal
    are work; idle and iowait are not."""
    total = 0
    for line in stat_text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        name = fields[0]
        if cpus is None and name != "cpu":
            continue
        if cpus is not None and (name == "cpu" or int(name[3:]) not in cpus):
            continue
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[1:9])
        total += user + nice + system + irq + softirq + steal
    return total / _ticks()


def tree_cpu_s(pid: int) -> float:
    """CPU time (user + system) of the process and its live descendants, in seconds."""
    total, todo, seen = 0.0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _process_cpu_s(p)
        todo += _children(p)
    return total


def _process_cpu_s(pid: int) -> float:
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return 0.0  # it ended between the listing and the read
    fields = text[text.rindex(")") + 2 :].split()  # the name may hold spaces
    return (int(fields[11]) + int(fields[12])) / _ticks()  # utime, stime


def _children(pid: int) -> list[int]:
    out = []
    try:
        tasks = list((PROC / str(pid) / "task").iterdir())
    except OSError:
        return out
    for task in tasks:
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def load_1m() -> float | None:
    try:
        return float((PROC / "loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")
