"""The environment each local rank gets: threads, CPU binding, preloaded libraries.

A pure function of the machine's facts (topology, installed libraries, numactl) and the
user's environment, so that tests describe any machine. The rules, from the CPU practices
(PRACTICES.md):

- threads per process = physical cores usable here // local processes (P24): torchrun
  sets one thread per process when it starts several, which leaves all but N cores idle;
- each rank gets its own disjoint set of physical cores, within one NUMA node when the
  ranks can be spread over the nodes evenly, its memory bound to that node (P23), through
  numactl when it works here, else the process's affinity mask (sched_setaffinity, what
  taskset sets);
- tcmalloc or jemalloc through LD_PRELOAD where installed (P26), Intel OpenMP (libiomp5)
  where installed, with KMP_AFFINITY/KMP_BLOCKTIME only then (P25);
- a variable the user set is never overridden: it is kept and the plan says what it
  would have set.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from torchpace.launch.libraries import ALLOCATOR_LIBRARIES, OPENMP_LIBRARY
from torchpace.launch.topology import Topology, format_cpulist

# torch's own CPU launcher's settings for Intel OpenMP and jemalloc
# (torch/backends/xeon/run_cpu.py): threads stay on their core, and stop spinning after 1 ms
# so that the other processes' threads get the core.
KMP_SETTINGS = {"KMP_AFFINITY": "granularity=fine,compact,1,0", "KMP_BLOCKTIME": "1"}
JEMALLOC_CONF = "oversize_threshold:1,background_thread:true,metadata_thp:auto"

BINDERS = ("numactl", "sched_setaffinity", "none")


@dataclass(frozen=True)
class RankPlan:
    local_rank: int
    cpus: tuple[int, ...]  # the logical CPUs it is bound to; empty: not bound
    node: int | None  # the NUMA node its memory is bound to (numactl only), None: not bound
    env: dict[str, str]  # variables set for this rank (never one the user set)
    prefix: tuple[str, ...]  # what runs before python, e.g. ("numactl", "--physcpubind=0-3")


@dataclass(frozen=True)
class LaunchPlan:
    nproc: int
    binder: str  # one of BINDERS
    ranks: tuple[RankPlan, ...]
    notes: tuple[str, ...] = field(default=())  # decisions worth a line: kept variables, ...
    capture_spec: str | None = None  # launch --doctor: the capture spec every rank runs

    def to_json(self) -> str:
        return json.dumps(asdict(self))


def untouched(nproc: int, why: str) -> LaunchPlan:
    """Every rank gets the environment as it is (--no-tune-env)."""
    ranks = tuple(RankPlan(r, (), None, {}, ()) for r in range(nproc))
    return LaunchPlan(nproc, "none", ranks, (why,))


def split_cores(topology: Topology, nproc: int) -> list[tuple[list[int], int | None]]:
    """Disjoint, equal sets of physical cores, one per rank, with the node each lies in.

    Ranks are spread over the NUMA nodes in contiguous groups when each node has at least
    as many cores as ranks placed on it; otherwise (fewer ranks than nodes, or a small
    node) the cores are split in order and a rank may span nodes (node None).
    """
    nodes = topology.nodes
    if nproc >= len(nodes) > 0:
        per_node = [
            sum(1 for r in range(nproc) if r * len(nodes) // nproc == i) for i in range(len(nodes))
        ]
        node_cores = [topology.physical_cores(n) for n in nodes]
        size = min(len(cores) // count for cores, count in zip(node_cores, per_node, strict=True))
        if size > 0:
            out: list[tuple[list[int], int | None]] = []
            for node, cores, count in zip(nodes, node_cores, per_node, strict=True):
                out += [(cores[i * size : (i + 1) * size], node) for i in range(count)]
            return out
    cores = topology.physical_cores()
    size = len(cores) // nproc
    out = []
    for r in range(nproc):
        chunk = cores[r * size : (r + 1) * size]
        chunk_nodes = {c.node for c in topology.cpus if c.id in chunk}
        out.append((chunk, chunk_nodes.pop() if len(chunk_nodes) == 1 else None))
    return out


def plan_launch(
    nproc: int,
    topology: Topology,
    libraries: dict[str, str],
    environ: dict[str, str],
    numactl: str | None,
    bind: bool = True,
) -> LaunchPlan:
    """The plan for ``nproc`` local ranks. ``libraries``: name -> path of those installed
    (libraries.find_installed); ``numactl``: its path when it works here, else None;
    ``bind`` False leaves the CPU binding to someone else (torchrun's --numa-binding)."""
    notes: list[str] = []
    cores = topology.physical_cores()
    shared: dict[str, str] = {}  # the same for every rank

    def offer(name: str, value: str, why: str) -> None:
        if name in environ:
            if environ[name] != value:
                notes.append(
                    f"{name}={environ[name]} kept (set by you; torchpace would set {value}: {why})"
                )
        else:
            shared[name] = value

    oversubscribed = nproc > len(cores)
    if oversubscribed:
        notes.append(
            f"{nproc} processes on {len(cores)} physical cores usable here: more processes "
            "than cores, so they take turns on the cores and each runs slower than alone; "
            "each gets 1 thread and no CPU binding (use --nproc-per-node "
            f"{max(1, len(cores))} or fewer for one core each at least)"
        )
        threads, sets = 1, [([], None)] * nproc
    else:
        sets = split_cores(topology, nproc)
        threads = len(sets[0][0])
    offer("OMP_NUM_THREADS", str(threads), f"{len(cores)} cores // {nproc} processes")

    preload: list[str] = []
    allocator = next((name for name in ALLOCATOR_LIBRARIES if name in libraries), None)
    if allocator:
        preload.append(libraries[allocator])
    if OPENMP_LIBRARY in libraries:
        preload.append(libraries[OPENMP_LIBRARY])
    if preload:
        offer("LD_PRELOAD", ":".join(preload), "a faster allocator / Intel OpenMP found installed")
    preloading = "LD_PRELOAD" in shared
    if preloading and allocator == "jemalloc":
        offer("MALLOC_CONF", JEMALLOC_CONF, "jemalloc's settings in torch's CPU launcher")
    if preloading and OPENMP_LIBRARY in libraries:
        for name, value in KMP_SETTINGS.items():
            offer(name, value, "Intel OpenMP is preloaded")
    if not allocator:
        notes.append("no tcmalloc or jemalloc installed: the default allocator is kept")

    bound = bind and not oversubscribed and all(cpus for cpus, _ in sets)
    binder = ("numactl" if numactl else "sched_setaffinity") if bound else "none"
    ranks = []
    for r, (cpus, node) in enumerate(sets):
        prefix: tuple[str, ...] = ()
        if binder == "numactl":
            prefix = (numactl, f"--physcpubind={format_cpulist(cpus)}")
            if node is not None:
                prefix += (f"--membind={node}",)
        ranks.append(
            RankPlan(
                local_rank=r,
                cpus=tuple(cpus) if bound else (),
                node=node if binder == "numactl" else None,
                env=dict(shared),
                prefix=prefix,
            )
        )
    return LaunchPlan(nproc, binder, tuple(ranks), tuple(notes))
