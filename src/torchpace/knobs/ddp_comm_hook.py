"""ddp-comm-hook: all-reduce DDP's gradients in bf16 or fp16, half the bytes (P29, P30).

DDP's communication hooks replace each bucket's all-reduce: ``bf16_compress_hook`` and
``fp16_compress_hook`` (torch.distributed.algorithms.ddp_comm_hooks.default_hooks) cast the
bucket to 16 bits, all-reduce it, and cast the average back. Half the bytes on the link: it
pays where the transfer is the limit, a GPU job's NCCL over a slow link or many ranks
(TP506). The gradients are rounded to 16 bits before the average, so the numerics change
and tune's loss check applies. On a CPU the casts cost about what the smaller all-reduce
saves, so it is planned only on a GPU; bf16 where the GPU runs it (compute capability 8.0
and up: the range of fp32, no overflow), fp16 everywhere (it can overflow on large
gradients, which the loss check would catch).
"""

from __future__ import annotations

from torchpace.knobs._ddp import ddp_of
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

HOOKS = {"bf16": "bf16_compress_hook", "fp16": "fp16_compress_hook"}


class DdpCommHook(Knob):
    name = "ddp-comm-hook"
    title = "DDP's gradients all-reduced in 16 bits (a compression hook)"
    answers = ("TP506",)
    practices = ("P29", "P30")
    changes_numerics = True
    value_type = str
    choices = tuple(HOOKS)

    def plan(self, ctx: TuneContext) -> Plan:
        ddp, why = ddp_of(ctx)
        if ddp is None:
            return not_applicable(why)
        if not ctx.accelerator:
            return not_applicable(
                "the job runs on the CPU: casting each bucket to 16 bits costs about what "
                "the smaller all-reduce saves (compression pays on a GPU's NCCL link)"
            )
        values = ("bf16", "fp16") if ctx.cuda_bf16 else ("fp16",)
        return Plan(values, f"the DDP at {ddp.location} all-reduces its gradients in fp32")

    def apply(self, value, runtime) -> Notes:
        return register_hook(str(value), runtime)

    def describe(self, value) -> str:
        return f"ddp comm hook {HOOKS.get(str(value), value)}"


def register_hook(value: str, runtime) -> Notes:
    """Every DistributedDataParallel the script builds gets the hook registered right after
    it is built (a hook the script registers itself afterwards is refused by DDP, and the
    trial fails: the knob is rejected, the script's own hook stays)."""
    import functools

    import torch
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    hook = getattr(default_hooks, HOOKS[value])
    cls = torch.nn.parallel.DistributedDataParallel
    original = cls.__init__
    notes = Notes(f"DistributedDataParallel.register_comm_hook({HOOKS[value]})")

    @functools.wraps(original)
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.register_comm_hook(state=None, hook=hook)
        location = runtime.user_location()
        notes.add(f"the DDP at {location}" if location else "a DDP")

    cls.__init__ = init
    return notes


KNOB = DdpCommHook()
