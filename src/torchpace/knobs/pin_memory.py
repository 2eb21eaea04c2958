"""pin-memory: batches in page-locked memory, copied to the GPU asynchronously (P02, P03).

The article's second optimisation takes two edits: ``pin_memory=True`` in the DataLoader and
``non_blocking=True`` on the copies. The second is made here without the user's source:
``Tensor.to``/``Tensor.cuda`` pass ``non_blocking=True`` for a copy whose source is a pinned
CPU tensor going to CUDA and whose caller did not say. That is the safe direction: the
caching host allocator keeps a pinned block alive until the copy that reads it is done, and
the copy is ordered before every later use on the same stream.
"""

from __future__ import annotations

import functools

from torchpace.knobs._common import (
    NO_ACCELERATOR,
    NO_LOADER,
    training_loaders,
    where,
)
from torchpace.knobs.base import Knob, Plan, SourceEdit, Switch, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class PinMemory(Knob):
    name = "pin-memory"
    title = "Pinned DataLoader batches, copied to the GPU with non_blocking"
    answers = ("TP102", "TP103")
    practices = ("P02", "P03")
    cuda_only = "pinned memory only speeds host-to-GPU copies"
    switchable = True

    def plan(self, ctx: TuneContext) -> Plan:
        if not ctx.accelerator:
            return not_applicable(f"{NO_ACCELERATOR}: {self.cuda_only}")
        loaders = training_loaders(ctx.facts)
        if not loaders:
            return not_applicable(NO_LOADER)
        unpinned = [lf for lf in loaders if not lf.pin_memory]
        if unpinned:
            return Plan((True,), f"{where(unpinned[0])} returns pageable batches")
        return Plan((True,), "batches are pinned already; their copies made non_blocking")

    def apply(self, value, runtime) -> Notes | str:
        import torch

        user_location = runtime.user_location  # the user's line, as the capture reads it

        if not value:
            return "nothing done (pin-memory=false)"
        notes = Notes("pin_memory=True on every DataLoader; pinned CPU->CUDA copies non_blocking")
        self._script_pinned = []  # what each loader had: a switched trial's switch puts it back

        def pin(kwargs: dict) -> dict:
            before = kwargs.get("pin_memory", False)
            self._script_pinned.append(bool(before))
            kwargs["pin_memory"] = True
            notes.add(f"{user_location() or 'a DataLoader'}: pin_memory {before} -> True")
            return kwargs

        runtime.filter_loader_kwargs(pin)
        _patch_copies(torch)
        return notes

    def switch(self, value, runtime):
        """Pinned batches with non_blocking copies (True), or the script's own (False):
        the DataLoader's pinning step (``torch.utils.data._utils.pin_memory.pin_memory``,
        which both its pin thread and its main-process path look up at each batch) passes
        batches through unpinned, and the copies stay blocking. A script that pinned its
        loaders itself keeps them pinned in both arms: only the copies switch. The batches
        its workers made ahead under the other arm settle before a block is timed."""
        import torch.utils.data._utils.pin_memory as pinning

        pinned = getattr(self, "_script_pinned", None)
        if not value or pinned is None:
            return "pin-memory was not applied in this process"
        if not pinned:
            return "no DataLoader was built with pin_memory=True: nothing to switch"
        if len(set(pinned)) > 1:
            return ("the script pins some DataLoaders itself and not others: one switch "
                    "cannot put each back; not switched")  # fmt: skip
        unpin = not pinned[0]  # the script's own loaders are unpinned: switch the pinning
        pin_batch = pinning.pin_memory

        def maybe_pin(data, device=None):
            return pin_batch(data, device) if _on[0] or not unpin else data

        pinning.pin_memory = maybe_pin

        def set_pinned(on: bool) -> None:
            _on[0] = on

        return Switch(set_pinned, settle_steps=1 + runtime.batches_ahead)

    def describe(self, value) -> str:
        return "pin_memory=True + non_blocking copies" if value else "pin_memory=False"

    def source_edits(self, value) -> list[SourceEdit]:
        if not value:
            return []
        return [
            SourceEdit(
                "loader-kwargs",
                kwargs={"pin_memory": True},
                note="and pass non_blocking=True to the .to(device) copies of its batches",
            )
        ]


# The knob in force (a switched trial's reference blocks turn it off): the copies made
# non_blocking, and, where the script did not pin, the batches pinned.
_on = [True]


def _patch_copies(torch) -> None:
    original_to, original_cuda = torch.Tensor.to, torch.Tensor.cuda
    if getattr(original_to, "_torchpace_non_blocking", False):
        return  # applied twice in one process

    def said(args: tuple, kwargs: dict) -> bool:
        # to(device, dtype, non_blocking, copy) / to(dtype, non_blocking) / to(other, ...):
        # a positional bool is the caller's own non_blocking (or copy): leave the call alone
        return "non_blocking" in kwargs or any(isinstance(a, bool) for a in args)

    def pinned_source(t) -> bool:
        return t.device.type == "cpu" and not torch.compiler.is_compiling() and t.is_pinned()

    @functools.wraps(original_to)
    def to(self, *args, **kwargs):
        if _on[0] and not said(args, kwargs) and self.device.type == "cpu":
            try:
                parse = {k: v for k, v in kwargs.items() if k != "copy"}
                device = torch._C._nn._parse_to(*args, **parse)[0]
            except Exception:  # let torch raise its own error for a bad call
                device = None
            if device is not None and device.type == "cuda" and pinned_source(self):
                kwargs["non_blocking"] = True
        return original_to(self, *args, **kwargs)

    @functools.wraps(original_cuda)
    def cuda(self, *args, **kwargs):
        if _on[0] and len(args) < 2 and "non_blocking" not in kwargs and pinned_source(self):
            kwargs["non_blocking"] = True
        return original_cuda(self, *args, **kwargs)

    to._torchpace_non_blocking = True
    torch.Tensor.to, torch.Tensor.cuda = to, cuda


KNOB = PinMemory()
