"""The CPU time of the user's job, process by process, around a phase of the capture: the
main process and its threads, each DataLoader worker and its threads, any other child, read
from /proc/PID/task/*/stat (utime + stime) at the phase's start and end. The doctor tells
from it whether loader workers took the cores from the step's compute (TP107).

Children are found through /proc/PID/task/*/children, recursively; a child is a worker when
its pid is one of a live DataLoader iterator's workers (the hooks record them). A process
started during the phase counts from zero; one that ended during it is lost with its time.
Linux only: elsewhere every snapshot is None and the check stays silent.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from torchpace.facts.cpu_use import MAIN, OTHER, WORKER, CpuUse, ProcessCpu

PROC = Path("/proc")


@dataclass(frozen=True)
class Seen:
    name: str
    cpu_s: float  # the process's own line: its threads, the ended ones too
    thread_s: dict[int, float]  # tid -> that live thread's CPU time


@dataclass(frozen=True)
class Snapshot:
    wall_s: float  # time.monotonic()
    processes: dict[int, Seen]  # pid -> what it had used since it started
    main_pid: int


def snapshot(pid: int | None = None) -> Snapshot | None:
    """Every process of the tree under ``pid`` (this process by default), now."""
    pid = os.getpid() if pid is None else pid
    processes: dict[int, Seen] = {}
    todo = [pid]
    while todo:
        next_pid = todo.pop()
        if next_pid in processes:
            continue
        read = _read(next_pid)
        if read is not None:  # None: it ended between the listing and the read
            processes[next_pid], children = read
            todo += children
    if pid not in processes:
        return None
    return Snapshot(time.monotonic(), processes, pid)


def between(
    a: Snapshot | None, b: Snapshot | None, workers: dict[int, int], cores: int | None
) -> CpuUse | None:
    """What each process used from ``a`` to ``b``; ``workers`` maps a worker's pid to its
    DataLoader's index."""
    if a is None or b is None or b.wall_s <= a.wall_s:
        return None
    out = []
    for pid, now in sorted(b.processes.items()):
        before = a.processes.get(pid)
        used = now.cpu_s - (before.cpu_s if before is not None else 0.0)
        role = MAIN if pid == b.main_pid else WORKER if pid in workers else OTHER
        wall = b.wall_s - a.wall_s
        out.append(
            ProcessCpu(
                pid=pid,
                role=role,
                name=now.name,
                threads=len(now.thread_s),
                busy_threads=_busy_threads(before, now, wall),
                cpu_s=round(max(0.0, used), 3),
                loader=workers.get(pid),
            )
        )
    return CpuUse(round(b.wall_s - a.wall_s, 3), cores, out)


# A thread that ran a tenth of the phase competes for a core; below that it is a helper
# (a pin-memory thread, a watchdog) that wakes now and then.
BUSY_SHARE = 0.10


def _busy_threads(before: Seen | None, now: Seen, wall_s: float) -> int:
    start = before.thread_s if before is not None else {}
    return sum(
        1 for tid, s in now.thread_s.items() if s - start.get(tid, 0.0) >= BUSY_SHARE * wall_s
    )


def _read(pid: int) -> tuple[Seen, list[int]] | None:
    """A process's name, its CPU time (its own stat line: the threads that ended are in it)
    and each live thread's; and its children, listed by each thread that started one."""
    base = PROC / str(pid)
    tick = os.sysconf("SC_CLK_TCK")
    try:
        name = (base / "comm").read_text().strip()
        total = _ticks_used((base / "stat").read_text()) / tick
        tasks = list((base / "task").iterdir())
    except (OSError, ValueError, IndexError):
        return None
    threads, children = {}, []
    for task in tasks:
        try:
            threads[int(task.name)] = _ticks_used((task / "stat").read_text()) / tick
            children += [int(c) for c in (task / "children").read_text().split()]
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
    return Seen(name, total, threads), children


def _ticks_used(stat_text: str) -> int:
    fields = stat_text[stat_text.rindex(")") + 2 :].split()  # the name may hold spaces
    return int(fields[11]) + int(fields[12])  # utime, stime
