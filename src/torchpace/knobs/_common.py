"""What several knobs share: how the DataLoaders the doctor saw read in a reason, the cores a
plan may count on, the switch of a process-wide flag. No torch here: plans run in the parent
(flag_switch is handed torch's getter and setter by the knob, in the child)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torchpace.facts.run import LoaderFacts, RunFacts
    from torchpace.knobs.base import TuneContext


def training_loaders(facts: RunFacts) -> list[LoaderFacts]:
    """The loaders that fed the timed steps; else those that fetched a batch at all; else
    all of them. An evaluation loader run before training, or only between the timed steps,
    is not one of them."""
    timed = [lf for lf in facts.loaders if lf.batches_timed > 0]
    fetched = [lf for lf in facts.loaders if lf.batches_seen > 0]
    return timed or fetched or list(facts.loaders)


def where(loader: LoaderFacts) -> str:
    return f"the DataLoader at {loader.location}" if loader.location else "a DataLoader"


NO_LOADER = "no DataLoader was seen in the script"


def no_workers_in(config: dict) -> str | None:
    """Why a knob for loader workers does nothing on top of `config`: the num-workers kept
    there (one value, or one per loader) starts no worker anywhere."""
    workers = config.get("num-workers")
    if workers is None:
        return None
    values = workers.values() if isinstance(workers, dict) else [workers]
    if any(values):
        return None
    return "num_workers=0 was kept: there are no worker processes for it to act on"


NO_ACCELERATOR = "needs a CUDA device; the model runs on the CPU here"
NO_MODEL = "no model was found (no module whose parameters an optimizer holds was called)"


def usable_cores(ctx: TuneContext) -> int | None:
    """Cores this process may run on: the affinity mask, else what the capture read."""
    if ctx.cpu.usable_cpus:
        return ctx.cpu.usable_cpus
    process = ctx.facts.process
    return process.usable_cpus if process is not None else None


def cores_here() -> int:
    """The cores this process may run on, read now (a toml's values are bounded by them)."""
    import os

    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# The most processes or threads per usable core a configuration may ask for: far above any
# plan tune makes (num-workers: the cores; threads: the cores), far below a runaway.
PER_CORE_BOUND = 4


def location_of(location: str | None) -> str:
    return f" at {location}" if location else ""


def flag_switch(
    knob: str,
    value,
    applied,
    before,
    read: Callable[[], object],
    write: Callable[[object], None],
    what: str,
) -> Callable[[bool], None] | str:
    """A switched trial's switch for a process-wide flag (Knob.switch): the knob's setting
    (True) or the one the process had before the knob (False); or why not: the knob set
    another value in this process (``applied``), or the script set the flag again itself."""
    if applied != value:
        return f"{knob} was not applied in this process"
    if read() != applied:
        return f"the script sets {what} itself: not switched"

    def set_flag(on: bool) -> None:
        write(applied if on else before)

    return set_flag
