"""What the DDP knobs share: the DistributedDataParallel wrapper the doctor's capture saw
(its settings, facts/run.py WrapperFacts), and the patch that sets one keyword argument of
every DDP the script builds. No torch at import: plans run in the parent."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchpace.knobs.notes import Notes

if TYPE_CHECKING:
    from torchpace.facts.run import WrapperFacts
    from torchpace.knobs.base import TuneContext

NO_DDP = "the script builds no DistributedDataParallel"
ONE_RANK = (
    "the job runs one process: DDP's settings only matter across ranks "
    "(tune --nproc-per-node N tunes the job on N local ranks)"
)


def ddp_of(ctx: TuneContext) -> tuple[WrapperFacts | None, str]:
    """The script's DDP wrapper when tuning it means something, else why not."""
    ddp = next((w for w in ctx.facts.wrappers if w.kind == "DistributedDataParallel"), None)
    if ddp is None:
        return None, NO_DDP
    ranks = ddp.world_size or ctx.nproc_per_node
    if ranks <= 1:
        return None, ONE_RANK
    return ddp, ""


def set_ddp_kwarg(name: str, value, runtime) -> Notes:
    """Every DistributedDataParallel the script builds gets ``name=value``, whatever the
    script passed: the knob holds (the script's own value is said in the record)."""
    import functools

    import torch

    cls = torch.nn.parallel.DistributedDataParallel
    original = cls.__init__
    notes = Notes(f"DistributedDataParallel({name}={value!r})")

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        given = kwargs.get(name, "its default")
        kwargs[name] = value
        location = runtime.user_location()
        where = f" at {location}" if location else ""
        notes.add(f"the DDP{where} ({name} was {given})")
        original(self, *args, **kwargs)

    cls.__init__ = init
    return notes
