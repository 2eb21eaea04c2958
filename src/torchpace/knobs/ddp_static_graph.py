"""ddp-static-graph: tell DDP the graph is the same every step (P30).

With ``static_graph=True`` DDP records which parameters get gradients in the first
iteration and skips the search for unused parameters afterwards, and can reorder buckets to
the order gradients really arrive in. The values are the same; a script whose used
parameters change from step to step fails (the trial crashes and tune rejects the knob).
"""

from __future__ import annotations

from torchpace.knobs._ddp import ddp_of, set_ddp_kwarg
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class DdpStaticGraph(Knob):
    name = "ddp-static-graph"
    title = "DDP static_graph=True: the same graph every step"
    answers = ("TP503", "TP506")
    practices = ("P30",)

    def plan(self, ctx: TuneContext) -> Plan:
        ddp, why = ddp_of(ctx)
        if ddp is None:
            return not_applicable(why)
        if ddp.static_graph:
            return not_applicable(f"the DDP at {ddp.location} already has static_graph=True")
        return Plan((True,), f"the DDP at {ddp.location} searches its graph every step")

    def apply(self, value, runtime) -> Notes:
        return set_ddp_kwarg("static_graph", bool(value), runtime)

    def describe(self, value) -> str:
        return f"ddp static_graph={bool(value)}"


KNOB = DdpStaticGraph()
