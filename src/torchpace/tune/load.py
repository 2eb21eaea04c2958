"""How much of the machine other processes used while a trial ran.

A trial is a child process (and its loader workers); the CPUs' busy time comes from
/proc/stat (capture/machine_load.py, the doctor's reader too: the CPUs this process may run
on), the trial's own from the children's resource usage, tune's own from its own.
What is left was someone else's: another job, another user, the hypervisor's neighbours
(steal time is counted as busy). Reported in cores (1.0: one core's worth, all along), so
that the search (tune/disturbed.py) can tell a run that shared the machine with a busy
neighbour from its siblings (noise.disturbance, contention.py's rule). None where
/proc/stat cannot be read (not Linux).
"""

from __future__ import annotations

import resource
import time
from dataclasses import dataclass

from torchpace.capture import machine_load


@dataclass(frozen=True)
class CpuSnapshot:
    wall_s: float
    machine_busy_s: float | None  # the busy time since boot of the CPUs this process may use
    children_s: float  # user + system of this process's waited-for children
    own_s: float


def snapshot() -> CpuSnapshot:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    return CpuSnapshot(
        wall_s=time.perf_counter(),
        machine_busy_s=machine_load.cpus_busy_s(),
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


def cores() -> int | None:
    """How many CPUs the trials may run on (they inherit tune's affinity): the share a
    neighbour's cores take of them is what slows a trial (contention.busy_neighbour)."""
    cpus = machine_load.usable_cpus()
    return len(cpus) if cpus else None
