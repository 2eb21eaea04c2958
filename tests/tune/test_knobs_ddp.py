"""The DDP knobs (knobs/ddp_*.py): planned only for a job that builds DDP over several ranks,
from the settings the capture recorded; applied by setting DDP's keyword argument whatever
the script passed."""

from __future__ import annotations

import dataclasses

from knob_fakes import ctx, facts

from torchpace import knobs
from torchpace.facts.run import WrapperFacts

DDP_KNOBS = ("ddp-bucket-cap-mb", "ddp-gradient-as-bucket-view", "ddp-static-graph",
             "ddp-broadcast-buffers")  # fmt: skip


def ddp(**kw) -> WrapperFacts:
    base = dict(kind="DistributedDataParallel", location="train.py:30",
                find_unused_parameters=False, bucket_cap_mb=25.0,
                gradient_as_bucket_view=False, static_graph=False, broadcast_buffers=True,
                has_buffers=True, world_size=2)  # fmt: skip
    return WrapperFacts(**{**base, **kw})


def context(wrapper=None, nproc=2):
    run = facts()
    if wrapper is not None:
        run = dataclasses.replace(run, wrappers=[wrapper])
    return ctx(run, nproc_per_node=nproc)


def test_no_ddp_no_ddp_knob():
    for name in DDP_KNOBS:
        plan = knobs.get(name).plan(context())
        assert not plan.applicable and "no DistributedDataParallel" in plan.reason


def test_one_rank_is_not_tuned_for_ddp():
    for name in DDP_KNOBS:
        plan = knobs.get(name).plan(context(ddp(world_size=1), nproc=1))
        assert not plan.applicable and "--nproc-per-node" in plan.reason


def test_a_default_ddp_gets_every_candidate():
    plans = {name: knobs.get(name).plan(context(ddp())) for name in DDP_KNOBS}
    assert plans["ddp-bucket-cap-mb"].values == (5, 100)
    assert plans["ddp-gradient-as-bucket-view"].values == (True,)
    assert plans["ddp-static-graph"].values == (True,)
    assert plans["ddp-broadcast-buffers"].values == (False,)


def test_a_tiny_bucket_gets_the_default_and_a_large_one():
    plan = knobs.get("ddp-bucket-cap-mb").plan(context(ddp(bucket_cap_mb=0.01)))
    assert plan.values == (25, 100) and "0.01 MB" in plan.reason


def test_settings_already_in_place_are_not_tried():
    wrapper = ddp(gradient_as_bucket_view=True, static_graph=True, broadcast_buffers=False)
    for name in DDP_KNOBS[1:]:
        assert not knobs.get(name).plan(context(wrapper)).applicable
    no_buffers = knobs.get("ddp-broadcast-buffers").plan(context(ddp(has_buffers=False)))
    assert not no_buffers.applicable and "no buffers" in no_buffers.reason


def test_the_knob_holds_over_the_script_own_argument(monkeypatch):
    import torch

    from torchpace.knobs._ddp import set_ddp_kwarg

    seen = {}

    def fake_init(self, module, **kwargs):
        seen.update(kwargs)

    cls = torch.nn.parallel.DistributedDataParallel
    monkeypatch.setattr(cls, "__init__", fake_init)

    class Runtime:
        @staticmethod
        def user_location():
            return "train.py:30"

    notes = set_ddp_kwarg("bucket_cap_mb", 100, Runtime())
    cls.__new__(cls).__init__(torch.nn.Linear(2, 2), bucket_cap_mb=0.01)
    assert seen["bucket_cap_mb"] == 100
    assert "the DDP at train.py:30 (bucket_cap_mb was 0.01)" in str(notes)
