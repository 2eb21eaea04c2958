"""persistent-workers: keep a DataLoader's workers alive between epochs (P01).

Without it every ``for batch in loader`` (every epoch) starts the workers again: each one
imports, copies the data set and fills its prefetch queue before the first batch comes.
"""

from __future__ import annotations

import math

from torchpace.knobs._common import (
    NO_LOADER,
    no_workers_in,
    set_where_workers_run,
    training_loaders,
    where,
)
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class PersistentWorkers(Knob):
    name = "persistent-workers"
    title = "Keep DataLoader workers alive between epochs"
    answers = ("TP101",)
    row = "data"
    practices = ("P01",)
    depends_on = ("num-workers",)  # workers must exist; tune tries it on top of them

    def plan(self, ctx: TuneContext) -> Plan:
        loaders = training_loaders(ctx.facts)
        if not loaders:
            return not_applicable(NO_LOADER)
        todo = [lf for lf in loaders if not lf.persistent_workers]
        if not todo:
            return not_applicable(f"{where(loaders[0])} already keeps its workers")
        lf = todo[0]
        epoch = ""
        if lf.dataset_len and lf.batch_size:
            batches = (lf.dataset_len // lf.batch_size if lf.drop_last
                       else math.ceil(lf.dataset_len / lf.batch_size))  # fmt: skip
            epoch = f"; an epoch here is {batches} batches: a trial shorter than that sees no gain"
        return Plan(
            (True,),
            f"workers restart at every epoch of {where(lf)} (with num-workers){epoch}",
        )

    def on_top_of(self, config: dict) -> str | None:
        return no_workers_in(config)

    def apply(self, value, runtime) -> Notes:
        return set_where_workers_run(runtime, "persistent_workers", bool(value))

    def describe(self, value) -> str:
        return f"persistent_workers={bool(value)}"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("loader-kwargs", kwargs={"persistent_workers": bool(value)})]


KNOB = PersistentWorkers()
