"""num-workers: load batches in worker processes (P01), the article's first optimisation.

The right number is measured, never a folk rule ("4 per GPU"): the candidates are spread up
to a bound set by the cores this process may use, the memory a worker may come to hold and
the shared memory (/dev/shm) that batches pass through on their way to the main process.
"""

from __future__ import annotations

import shutil
import weakref

from torchpace.knobs._common import (
    NO_LOADER,
    PER_CORE_BOUND,
    cores_here,
    training_loaders,
    usable_cores,
    where,
)
from torchpace.knobs.base import Knob, Plan, SourceEdit, Switch, TuneContext, not_applicable
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


def fewer(current: int) -> list[int]:
    """Fewer workers than the script's: none (the main process loads), one, and half."""
    return sorted({n for n in (0, 1, current // 2) if n < current})


class NumWorkers(Knob):
    name = "num-workers"
    value_type = int
    minimum = 0
    per_location = True
    title = "Load batches in DataLoader worker processes"
    answers = ("TP101", "TP107")
    row = "data"
    practices = ("P01",)
    switchable = True
    multi_arm = True

    def maximum(self) -> tuple[int, str]:
        cores = cores_here()
        return PER_CORE_BOUND * cores, f"{PER_CORE_BOUND} workers per usable core ({cores})"

    def plan(self, ctx: TuneContext) -> Plan:
        """Each loader that feeds training is its own question: its candidates are tried on
        it alone, keyed by where the script builds it (an evaluation loader keeps its own
        setting). Fewer workers than the script has are candidates where workers and
        compute threads together want more cores than there are: on 2 cores, 4 workers
        and 2 threads fight over them, and loading in the main process can be faster."""
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
        cores = usable_cores(ctx)
        bound, why = worker_bound(
            cores, read_mem_available(), max(rss) if rss else None, read_shm_free()
        )
        threads = ctx.facts.process.intra_op_threads if ctx.facts.process else None
        by_location = {}  # one question per line that builds a training loader
        for lf in mapped:
            by_location.setdefault(lf.location, lf)
        # one line building every loader: the value applies to all (a plain number, the
        # toml stays as it was); several: each value names its loader's line
        keyed = len({lf.location for lf in ctx.facts.loaders}) > 1 and None not in by_location
        values, said = [], []
        for location, lf in by_location.items():
            current = lf.num_workers
            more = [n for n in candidates(bound) if n > current] if bound else []
            crowded = cores is not None and current > 0 and current + (threads or 1) > cores
            less = fewer(current) if crowded else []
            counts = sorted(set(less + more))
            if not counts:
                continue
            values += [{location: n} if keyed else n for n in counts]
            reason = f"{where(lf)}: num_workers {current} -> {', '.join(map(str, counts))}"
            if crowded:
                reason += (f" ({current} workers + {threads or 1} compute threads on {cores} "
                           "cores: fewer tried too)")  # fmt: skip
            said.append(reason)
        if not values:
            if bound == 0:
                return not_applicable(f"no room for a worker: {why}; raise it (docker --shm-size)")
            lf = min(mapped, key=lambda lf: lf.num_workers)
            return not_applicable(
                f"{where(lf)} already has num_workers={lf.num_workers}; the bound here is "
                f"{bound} ({why})"
            )
        return Plan(tuple(values), "; ".join(said) + f"; at most {bound} ({why})")

    def apply(self, value, runtime) -> Notes:
        import torch.utils.data

        user_location = runtime.user_location  # the user's line, as the capture reads it

        per_location = value if isinstance(value, dict) else None
        if per_location is None:
            value = int(value)
            notes = Notes(f"num_workers={value} on every map-style DataLoader the script builds")
        else:
            said = ", ".join(f"{n} at {loc}" for loc, n in per_location.items())
            notes = Notes(f"num_workers={said}; other DataLoaders as the script builds them")

        def set_workers(kwargs: dict) -> dict:
            dataset = kwargs.get("dataset")
            where = user_location() or "a DataLoader"
            if _at(value, where) is None:
                return kwargs  # not this knob's loader: the script's own setting
            before = kwargs.get("num_workers", 0)
            if isinstance(dataset, torch.utils.data.IterableDataset):
                # each worker would iterate the whole stream: the data would change
                notes.add(f"{where}: left alone (iterable-style data set)")
                return kwargs
            self._changed[id(dataset)] = (_weak(dataset), where, before)
            prefetch = kwargs.get("prefetch_factor") or PREFETCH
            self._prefetch = max(self._prefetch, prefetch)
            # a switched trial's reference blocks: a loader built in one has the script's
            target = self._count(self._arm[0], where, before)
            if before != target:
                kwargs["num_workers"] = target
                if target == 0:  # these refuse to go with the main process's loading
                    kwargs.pop("prefetch_factor", None)
                    kwargs["persistent_workers"] = False
            notes.add(f"{where}: num_workers {before} -> {target}")
            return kwargs

        # a switched trial's arms: id(dataset) -> (the data set, weakly: a script that makes
        # one each epoch lets it go; the line that built its loader; the script's count),
        # the values by arm (arm 0: the script's count), the arm in force, and the most
        # batches a worker of the knob's loaders prefetches
        self._changed, self._values, self._arm, self._prefetch = {}, {1: value}, [1], 0
        runtime.filter_loader_kwargs(set_workers)
        return notes

    def switches_arms(self, values: tuple) -> bool:
        """Several counts share a process when they act on the same loaders (all plain
        counts, or tables of the same lines): the trial applies the first, and the others'
        loaders must be the ones it set."""
        lines = {tuple(sorted(v)) if isinstance(v, dict) else None for v in values}
        return len(lines) == 1

    def settle_estimate(self, values: tuple, ctx: TuneContext) -> int:
        """``switch_arms``' settling: the batches in flight of the most workers any arm (the
        script's included) has, drained and then filled again."""
        loaders = training_loaders(ctx.facts)
        counts = [int(n) for v in values for n in (v.values() if isinstance(v, dict) else [v])]
        most = max([*counts, *(lf.num_workers for lf in loaders)], default=0)
        prefetch = max((lf.prefetch_factor or PREFETCH for lf in loaders), default=PREFETCH)
        return 1 + 2 * prefetch * most

    def _count(self, arm: int, where: str, before: int) -> int:
        """The workers arm ``arm`` gives the loader built at ``where`` (0: the script's)."""
        count = _at(self._values[arm], where) if arm else None
        return before if count is None else int(count)

    def switch(self, value, runtime):
        """The knob's workers (True) or the script's own count (False): ``switch_arms``
        with the one value."""
        arms = self.switch_arms((value,), runtime)
        return (
            arms if isinstance(arms, str) else Switch(lambda on: arms(int(on)), arms.settle_steps)
        )

    def switch_arms(self, values, runtime):
        """Each value's workers (arm i: ``values[i - 1]``) or the script's own count (arm 0)
        for the loaders the knob set, between two steps: each arm's batches come from a
        fresh iterator with its count, over the script's own stream of batch indices
        (``_loader_arms.py``); the batches the other arm has in flight are served first,
        while the new workers start, and each block settles until its buffer is full before
        it is timed."""
        changed = getattr(self, "_changed", None)
        if changed is None:
            return "num-workers was not applied in this process"
        if not changed:
            return "no DataLoader the knob set was built: nothing to switch"
        self._values = {0: None, **{i + 1: v for i, v in enumerate(values)}}
        arms = range(len(values) + 1)

        def counts_at(where: str, before: int) -> dict[int, int]:
            return {arm: self._count(arm, where, before) for arm in arms}

        if all(len(set(counts_at(w, b).values())) == 1 for _, w, b in changed.values()):
            return "the script already has this many workers: nothing to switch"
        from torchpace.knobs._loader_arms import LoaderArms

        def counts(dataset) -> dict[int, int] | None:
            entry = changed.get(id(dataset))
            if entry is None or entry[0]() is not dataset:
                return None
            return counts_at(entry[1], entry[2])

        loaders = LoaderArms(counts)
        most = max(max(counts_at(w, b).values()) for _, w, b in changed.values())

        def set_arm(arm: int) -> None:
            self._arm[0] = arm
            loaders.set(arm)

        # the old arm's batches in flight drained, then the new one's buffer filled
        return Switch(set_arm, settle_steps=1 + 2 * self._prefetch * most)

    def describe(self, value) -> str:
        if isinstance(value, dict):
            return ", ".join(f"num_workers={n} at {loc}" for loc, n in value.items())
        return f"num_workers={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        if isinstance(value, dict):
            return [
                SourceEdit("loader-kwargs", location=loc, kwargs={"num_workers": int(n)})
                for loc, n in value.items()
            ]
        return [SourceEdit("loader-kwargs", kwargs={"num_workers": int(value)})]


def _at(value, where: str):
    """A value's count for the loader built at ``where``: a plain count is every loader's;
    a table's, its line's (None: not a loader of the knob)."""
    return value.get(where) if isinstance(value, dict) else value


def _weak(dataset):
    """A reference to ``dataset`` that keeps it alive only if it cannot be weak."""
    try:
        return weakref.ref(dataset)
    except TypeError:
        return lambda: dataset


KNOB = NumWorkers()
