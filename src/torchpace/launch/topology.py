"""Which logical CPUs this process may use, the physical core and NUMA node of each.

`torchpace launch` splits these between the local ranks. The parsers take text (the
kernel's cpulist format, sysfs values) so that tests can describe other machines; the
reader returns what it could read, and a CPU whose node or core is unknown counts as its
own core on node 0.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")
SYSFS_NODE = Path("/sys/devices/system/node")


@dataclass(frozen=True)
class Cpu:
    id: int  # the logical CPU number the kernel schedules on
    core: tuple[int, int]  # (package, core id): logical CPUs sharing it are hyperthreads
    node: int  # NUMA node


@dataclass(frozen=True)
class Topology:
    cpus: tuple[Cpu, ...]  # the usable ones (this process's affinity mask), by id

    @property
    def nodes(self) -> list[int]:
        return sorted({c.node for c in self.cpus})

    def physical_cores(self, node: int | None = None) -> list[int]:
        """One logical CPU per physical core (the lowest-numbered sibling), in order: the
        CPUs compute threads should run on; hyperthread siblings share the core's units."""
        first: dict[tuple[int, int], int] = {}
        for cpu in self.cpus:
            if node is None or cpu.node == node:
                first.setdefault(cpu.core, cpu.id)
        return sorted(first.values())


def parse_cpulist(text: str) -> list[int]:
    """The kernel's list format, e.g. ``0-3,8,10-11`` -> [0, 1, 2, 3, 8, 10, 11]."""
    out: list[int] = []
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
        except ValueError:
            raise ValueError(f"not a CPU list: {text.strip()!r}") from None
    return out


def format_cpulist(cpus: list[int]) -> str:
    """The inverse of parse_cpulist, with runs folded: [0, 1, 2, 5] -> ``0-2,5``."""
    parts: list[str] = []
    ordered = sorted(cpus)
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(parts)


def build_topology(
    usable: list[int],
    node_cpulists: dict[int, str],
    core_ids: dict[int, tuple[int, int]],
) -> Topology:
    """From the affinity mask, each node's cpulist and each CPU's (package, core)."""
    node_of = {cpu: node for node, text in node_cpulists.items() for cpu in parse_cpulist(text)}
    cpus = tuple(
        Cpu(id=c, core=core_ids.get(c, (-1, c)), node=node_of.get(c, 0)) for c in sorted(usable)
    )
    return Topology(cpus=cpus)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def read_topology() -> Topology:
    try:
        usable = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: every CPU, no topology
        usable = list(range(os.cpu_count() or 1))
    nodes: dict[int, str] = {}
    if SYSFS_NODE.is_dir():
        for entry in SYSFS_NODE.iterdir():
            if entry.name.startswith("node") and entry.name[4:].isdigit():
                text = _read(entry / "cpulist")
                if text is not None:
                    nodes[int(entry.name[4:])] = text
    cores: dict[int, tuple[int, int]] = {}
    for cpu in usable:
        base = SYSFS_CPU / f"cpu{cpu}" / "topology"
        package, core = _read(base / "physical_package_id"), _read(base / "core_id")
        if package is not None and core is not None:
            with contextlib.suppress(ValueError):  # an unreadable id: the CPU is its own core
                cores[cpu] = (int(package), int(core))
    return build_topology(usable, nodes, cores)
