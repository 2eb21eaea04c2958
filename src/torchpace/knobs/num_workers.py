"""num-workers: load batches in worker processes (P01), the article's first optimisation.

The right number is measured, never a folk rule ("4 per GPU"): the candidates are spread up
to a bound set by the cores this process may use, the memory a worker may come to hold and
the shared memory (/dev/shm) that batches pass through on their way to the main process.
"""

from __future__ import annotations

import shutil

from torchpace.knobs._common import (
    NO_LOADER,
    PER_CORE_BOUND,
    cores_here,
    training_loaders,
    usable_cores,
    where,
)
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

MIB = 1 << 20
# More workers than this per loader only adds start-up time and memory on any machine seen.
MAX_WORKERS = 32
# Batches in flight per worker (DataLoader's default prefetch_factor), each in /dev/shm.
PREFETCH = 2
# The capture does not measure a batch's bytes: budget this much shared memory per batch in
# flight (a batch of 32 224x224 float images is 19 MiB; ImageNet's 256 is 154 MiB).
SHM_PER_BATCH = 64 * MIB
# Share of the available memory the workers may take.
MEMORY_SHARE = 0.9


def read_shm_free(path: str = "/dev/shm") -> int | None:
    try:
        return shutil.disk_usage(path).free
    except OSError:  # no /dev/shm (macOS): workers share memory another way, no bound
        return None


def read_mem_available(path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def worker_bound(
    cores: int | None, mem_available: int | None, parent_rss: int | None, shm_free: int | None
) -> tuple[int, str]:
    """The most workers worth trying, and what set it."""
    bound, why = MAX_WORKERS, f"at most {MAX_WORKERS}"
    if cores:
        bound, why = min(bound, cores), f"{cores} usable cores"
    # Worst case, a worker ends up with a copy of the parent's memory: Python's reference
    # counts write to every object a map-style dataset holds, defeating copy-on-write.
    if mem_available and parent_rss:
        by_memory = int(mem_available * MEMORY_SHARE // parent_rss)
        if by_memory < bound:
            bound = by_memory
            why = (f"{mem_available / 2**30:.1f} GiB available memory for workers that may each "
                   f"copy the main process's {parent_rss / 2**30:.1f} GiB")  # fmt: skip
    if shm_free is not None:
        by_shm = int(shm_free // (PREFETCH * SHM_PER_BATCH))
        if by_shm < bound:
            bound = by_shm
            why = (f"{shm_free // MIB} MiB free in /dev/shm, which every batch in flight "
                   f"passes through ({PREFETCH} per worker, budgeted {SHM_PER_BATCH // MIB} MiB "
                   "each)")  # fmt: skip
    return max(bound, 0), why


def candidates(bound: int) -> list[int]:
    """Every count up to 4; above, four points spread up to the bound (16: 4, 8, 12, 16)."""
    if bound <= 4:
        return list(range(1, bound + 1))
    return sorted({max(1, round(bound * k / 4)) for k in (1, 2, 3, 4)})


class NumWorkers(Knob):
    name = "num-workers"
    value_type = int
    minimum = 0
    title = "Load batches in DataLoader worker processes"
    answers = ("TP101",)
    practices = ("P01",)

    def maximum(self) -> tuple[int, str]:
        cores = cores_here()
        return PER_CORE_BOUND * cores, f"{PER_CORE_BOUND} workers per usable core ({cores})"

    def plan(self, ctx: TuneContext) -> Plan:
        loaders = training_loaders(ctx.facts)
        if not loaders:
            return not_applicable(NO_LOADER)
        mapped = [lf for lf in loaders if lf.dataset_len is not None]
        if not mapped:
            return not_applicable(
                "the script's DataLoaders read iterable-style data sets: with workers each "
                "worker replays the whole stream unless the data set shards itself by "
                "get_worker_info(), so adding workers could duplicate the data"
            )
        rss = [s.rss_bytes for s in ctx.facts.steps if s.rss_bytes]
        bound, why = worker_bound(
            usable_cores(ctx), read_mem_available(), max(rss) if rss else None, read_shm_free()
        )
        if bound == 0:
            return not_applicable(f"no room for a worker: {why}; raise it (docker --shm-size)")
        current = min(lf.num_workers for lf in mapped)
        values = [n for n in candidates(bound) if n > current]
        if not values:
            return not_applicable(
                f"{where(min(mapped, key=lambda lf: lf.num_workers))} already has "
                f"num_workers={current}; the bound here is {bound} ({why})"
            )
        return Plan(tuple(values), f"num_workers {current} -> up to {bound} ({why})")

    def apply(self, value, runtime) -> Notes:
        import torch.utils.data

        user_location = runtime.user_location  # the user's line, as the capture reads it

        value = int(value)
        notes = Notes(f"num_workers={value} on every map-style DataLoader the script builds")

        def set_workers(kwargs: dict) -> dict:
            dataset = kwargs.get("dataset")
            where = user_location() or "a DataLoader"
            before = kwargs.get("num_workers", 0)
            if isinstance(dataset, torch.utils.data.IterableDataset):
                # each worker would iterate the whole stream: the data would change
                notes.add(f"{where}: left alone (iterable-style data set)")
                return kwargs
            if before != value:
                kwargs["num_workers"] = value
                if value == 0:  # these refuse to go with the main process's loading
                    kwargs.pop("prefetch_factor", None)
                    kwargs["persistent_workers"] = False
            notes.add(f"{where}: num_workers {before} -> {value}")
            return kwargs

        runtime.filter_loader_kwargs(set_workers)
        return notes

    def describe(self, value) -> str:
        return f"num_workers={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("loader-kwargs", kwargs={"num_workers": int(value)})]


KNOB = NumWorkers()
