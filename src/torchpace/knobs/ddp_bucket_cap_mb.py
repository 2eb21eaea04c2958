"""ddp-bucket-cap-mb: the size of DDP's gradient buckets (P30).

DDP all-reduces gradients in buckets as the backward produces them: a bucket's all-reduce
starts once all its gradients are ready, overlapping the rest of the backward. Buckets too
small make many small collectives, each paying the network's latency; too large, the first
starts late and little overlaps. torch's default is 25 MB; the best depends on the model,
the link and the number of ranks, so it is measured: the default and a larger size, or the
default and a smaller one when the script already runs 25 MB.
"""

from __future__ import annotations

from torchpace.knobs._ddp import ddp_of, set_ddp_kwarg
from torchpace.knobs.base import Knob, Plan, TuneContext, not_applicable
from torchpace.knobs.notes import Notes

DEFAULT_MB = 25.0


class DdpBucketCapMb(Knob):
    name = "ddp-bucket-cap-mb"
    title = "DDP's gradient bucket size (bucket_cap_mb)"
    answers = ("TP506",)
    practices = ("P30",)
    value_type = (int, float)
    minimum = 1

    def maximum(self) -> tuple[int, str]:
        return 4096, "a bucket holds this many MB of gradients, copied once more per step"

    def plan(self, ctx: TuneContext) -> Plan:
        ddp, why = ddp_of(ctx)
        if ddp is None:
            return not_applicable(why)
        current = ddp.bucket_cap_mb
        if current is None:
            return not_applicable("DDP's bucket size was not recorded by the capture")
        if abs(current - DEFAULT_MB) < 0.5:
            values: tuple = (5, 100)
        else:
            values = (int(DEFAULT_MB), 100) if current < DEFAULT_MB else (int(DEFAULT_MB),)
        return Plan(
            tuple(v for v in values if abs(v - current) >= 0.5),
            f"the DDP at {ddp.location} uses {current:g} MB buckets",
        )

    def apply(self, value, runtime) -> Notes:
        return set_ddp_kwarg("bucket_cap_mb", value, runtime)

    def describe(self, value) -> str:
        return f"ddp bucket_cap_mb={value}"


KNOB = DdpBucketCapMb()
