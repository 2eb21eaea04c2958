"""What several knobs share: the record of what a patch did once the script ran, and how
the DataLoaders the doctor saw read in a reason. No torch here: plans run in the parent."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchpace.capture.facts import KnobRecord, LoaderFacts, RunFacts
    from torchpace.tune.knobs.base import TuneContext

# A script that builds a DataLoader every epoch would repeat the same line: the record keeps
# the first few distinct ones, enough to say where the knob acted.
MAX_NOTES = 6


class Notes:
    """A knob's detail that grows after ``apply`` returned.

    ``apply`` runs before the user's script, so what a patch later does (the DataLoader at
    train.py:42 got 2 workers) is only known when the script builds it. ``apply`` returns a
    Notes; ``apply_all`` binds it to the knob's record, and each ``add`` rewrites the record's
    detail, which the child saves with its facts.
    """

    def __init__(self, summary: str):
        self.summary = summary
        self.lines: list[str] = []
        self._record: KnobRecord | None = None

    def add(self, line: str) -> None:
        if line in self.lines or len(self.lines) >= MAX_NOTES:
            return
        self.lines.append(line)
        if self._record is not None:
            self._record.detail = str(self)

    def bind(self, record: KnobRecord) -> None:
        self._record = record
        record.detail = str(self)

    def __str__(self) -> str:
        return "; ".join([self.summary, *self.lines])


def training_loaders(facts: RunFacts) -> list[LoaderFacts]:
    """The loaders that fed the measured steps (fetched a batch); all of them if none did."""
    fetched = [lf for lf in facts.loaders if lf.batches_seen > 0]
    return fetched or list(facts.loaders)


def where(loader: LoaderFacts) -> str:
    return f"the DataLoader at {loader.location}" if loader.location else "a DataLoader"


NO_LOADER = "no DataLoader was seen in the script"
NO_ACCELERATOR = "needs a CUDA device; the model runs on the CPU here"
NO_MODEL = "no model was found (no module whose parameters an optimizer holds was called)"


def usable_cores(ctx: TuneContext) -> int | None:
    """Cores this process may run on: the affinity mask, else what the capture read."""
    if ctx.cpu.usable_cpus:
        return ctx.cpu.usable_cpus
    process = ctx.facts.process
    return process.usable_cpus if process is not None else None


def location_of(location: str | None) -> str:
    return f" at {location}" if location else ""
