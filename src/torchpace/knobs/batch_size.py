"""batch-size: a bigger batch to fill the device (P05, P38), the article's third step.

This changes training, not only its speed: fewer optimizer steps per epoch, another
gradient noise, and a learning rate tuned for the old batch is usually too small for the
new one (a common rule scales it with the batch). Tried only with --allow-batch-size, and
compared on samples per second, not time per step. A trial that runs out of memory tells
tune's search to back off (each trial is a fresh process).
"""

from __future__ import annotations

from torchpace.knobs._common import NO_LOADER, where
from torchpace.knobs.base import Knob, Plan, SourceEdit, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

FACTORS = (2, 4, 8)
LR_CAVEAT = "changes training: the learning rate may need scaling with the batch"


class BatchSize(Knob):
    name = "batch-size"
    value_type = int
    minimum = 1
    title = "A bigger DataLoader batch (changes training)"

    def maximum(self) -> tuple[int, str]:
        return 2**20, "a batch beyond any that fits a device's memory"

    answers = ("TP104",)
    practices = ("P05", "P38")
    changes_numerics = True
    opt_in = "--allow-batch-size"

    def plan(self, ctx: TuneContext) -> Plan:
        if not ctx.allow_batch_size:
            return not_applicable(f"{LR_CAVEAT}; tried only with --allow-batch-size")
        if not ctx.facts.loaders:
            return not_applicable(NO_LOADER)
        # the loader that fed the steps: the one that fetched the most batches
        lf = max(ctx.facts.loaders, key=lambda x: x.batches_seen)
        if not lf.batch_size:
            return not_applicable(
                f"{where(lf)} has no batch_size (a batch_sampler or the script's own batching)"
            )
        values = [lf.batch_size * k for k in FACTORS]
        if lf.dataset_len:  # no batch bigger than the data set
            values = [v for v in values if v <= lf.dataset_len]
        if not values:
            return not_applicable(
                f"{where(lf)}: batch {lf.batch_size} of a data set of {lf.dataset_len}: "
                "twice the batch would not fit in it"
            )
        return Plan(tuple(values), f"batch {lf.batch_size} in {where(lf)}; {LR_CAVEAT}")

    def apply(self, value, runtime) -> Notes:
        user_location = runtime.user_location  # the user's line, as the capture reads it

        value = int(value)
        notes = Notes(f"batch_size={value} where a DataLoader's batch was smaller ({LR_CAVEAT})")

        def set_batch(kwargs: dict) -> dict:
            where = user_location() or "a DataLoader"
            before = kwargs.get("batch_size", 1)  # the DataLoader's default
            if kwargs.get("batch_sampler") is not None or before is None:
                notes.add(f"{where}: left alone (batches made by a batch_sampler or the script)")
            elif before < value:  # never shrinks a bigger batch (an evaluation loader's)
                kwargs["batch_size"] = value
                notes.add(f"{where}: batch_size {before} -> {value}")
            return kwargs

        runtime.filter_loader_kwargs(set_batch)
        return notes

    def describe(self, value) -> str:
        return f"batch_size={value} ({LR_CAVEAT})"

    def source_edits(self, value) -> list[SourceEdit]:
        return [SourceEdit("loader-kwargs", kwargs={"batch_size": int(value)}, note=LR_CAVEAT)]


KNOB = BatchSize()
