"""prefetch-factor: batches each worker loads ahead (P01); the DataLoader's default is 2.

More batches in flight absorb uneven per-batch loading times (a slow image, a GC pause), at
the cost of host and /dev/shm memory: workers x prefetch_factor batches at once.
"""

from __future__ import annotations

from torchpace.knobs._common import (
    NO_LOADER,
    no_workers_in,
    set_where_workers_run,
    training_loaders,
    where,
)
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

DEFAULT = 2  # torch's prefetch_factor when workers are used and none is given
VALUE = 4


class PrefetchFactor(Knob):
    name = "prefetch-factor"
    value_type = int
    minimum = 1

    def maximum(self) -> tuple[int, str]:
        return 64, "each worker holds this many batches in memory"

    title = "Batches each DataLoader worker loads ahead"
    answers = ("TP101",)
    row = "data"
    practices = ("P01",)
    depends_on = ("num-workers",)

    def plan(self, ctx: TuneContext) -> Plan:
        loaders = training_loaders(ctx.facts)
        if not loaders:
            return not_applicable(NO_LOADER)
        current = min(lf.prefetch_factor or DEFAULT for lf in loaders)
        if current >= VALUE:
            return not_applicable(f"{where(loaders[0])} already prefetches {current} batches")
        return Plan((VALUE,), f"prefetch_factor {current} -> {VALUE} per worker (with workers)")

    def on_top_of(self, config: dict) -> str | None:
        return no_workers_in(config)

    def apply(self, value, runtime) -> Notes:
        return set_where_workers_run(runtime, "prefetch_factor", int(value), default=DEFAULT)

    def describe(self, value) -> str:
        return f"prefetch_factor={value}"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("loader-kwargs", kwargs={"prefetch_factor": int(value)})]


KNOB = PrefetchFactor()
