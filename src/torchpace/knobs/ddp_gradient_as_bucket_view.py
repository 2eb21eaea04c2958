"""ddp-gradient-as-bucket-view: gradients as views into DDP's buckets (P30).

Without it every gradient is copied into its bucket before the all-reduce and back after
it; as views, the backward writes straight into the bucket: one copy of the gradients less
in memory and in time. The values are the same. What changes: ``p.grad`` is a view, so code
that replaces ``p.grad`` with another tensor (not in place) detaches it from the bucket.
"""

from __future__ import annotations

from torchpace.knobs._ddp import ddp_of, set_ddp_kwarg
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes


class DdpGradientAsBucketView(Knob):
    name = "ddp-gradient-as-bucket-view"
    title = "DDP gradients as views into its buckets (no copy)"
    answers = ("TP506",)
    practices = ("P30",)

    def plan(self, ctx: TuneContext) -> Plan:
        ddp, why = ddp_of(ctx)
        if ddp is None:
            return not_applicable(why)
        if ddp.gradient_as_bucket_view:
            return not_applicable(f"the DDP at {ddp.location} already uses bucket views")
        return Plan((True,), f"the DDP at {ddp.location} copies gradients into its buckets")

    def apply(self, value, runtime) -> Notes:
        return set_ddp_kwarg("gradient_as_bucket_view", bool(value), runtime)

    def describe(self, value) -> str:
        return f"ddp gradient_as_bucket_view={bool(value)}"


KNOB = DdpGradientAsBucketView()
