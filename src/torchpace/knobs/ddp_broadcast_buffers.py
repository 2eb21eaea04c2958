"""ddp-broadcast-buffers: stop broadcasting rank 0's buffers before every forward (P30).

DDP copies rank 0's buffers (BatchNorm's running statistics) to every rank at each forward:
a collective per step. Without it each rank keeps its own statistics, computed on its own
shard of the data: the loss can differ (the loss check watches it) and evaluation on a rank
other than 0 sees other statistics.
"""

from __future__ import annotations

from torchpace.knobs._ddp import ddp_of, set_ddp_kwarg
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class DdpBroadcastBuffers(Knob):
    name = "ddp-broadcast-buffers"
    title = "DDP broadcast_buffers=False: no buffer broadcast per forward"
    answers = ("TP506",)
    practices = ("P30",)
    changes_numerics = True

    def plan(self, ctx: TuneContext) -> Plan:
        ddp, why = ddp_of(ctx)
        if ddp is None:
            return not_applicable(why)
        if ddp.broadcast_buffers is False:
            return not_applicable(f"the DDP at {ddp.location} already skips the broadcast")
        if ddp.has_buffers is False:
            return not_applicable(f"the model wrapped at {ddp.location} has no buffers")
        return Plan(
            (False,),
            f"the DDP at {ddp.location} broadcasts rank 0's buffers before every forward",
        )

    def apply(self, value, runtime) -> Notes:
        return set_ddp_kwarg("broadcast_buffers", bool(value), runtime)

    def describe(self, value) -> str:
        return f"ddp broadcast_buffers={bool(value)}"


KNOB = DdpBroadcastBuffers()
