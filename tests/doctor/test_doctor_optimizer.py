"""TP313: a launch-bound optimizer step gets the fused/foreach finding with tune's knob."""

import pytest
from doctor_fakes import facts, profile

from torchpace.doctor.analyze import diagnose
from torchpace.doctor.checks import compute
from torchpace.facts.run import OptimizerFacts
from torchpace.trace import load_trace

H100 = {"has_gpu": True, "capability": (9, 0)}
# a third of the step in the optimizer, 300 small kernels busy 2 ms of its 10
LAUNCH_BOUND = {"wall_ms": 30.0, "optimizer_ms": 10.0, "optimizer_kernels": 300.0,
                "optimizer_kernel_ms": 2.0}  # fmt: skip


def adam(fused=None):
    return OptimizerFacts("Adam", "train.py:30", parameters=10_000, fused=fused, foreach=None)


def test_a_launch_bound_optimizer_phase_is_tp313():
    (f,) = compute.LaunchBoundOptimizer().run(_with(adam()))
    assert (f.code, f.knob, f.location) == ("TP313", "fused-optimizer", "train.py:30")
    assert f.saving_ms == pytest.approx(8.0) and "fused=True" in f.fix
    assert f.evidence["optimizers"] == "Adam"


def _with(optimizer):
    run = facts()
    run.optimizer_details = [optimizer]
    return profile(LAUNCH_BOUND, run, **H100)


def test_no_finding_where_fusing_cannot_help():
    check = compute.LaunchBoundOptimizer()
    assert check.run(_with(adam(fused=True))) == []  # fused already
    assert check.run(profile(LAUNCH_BOUND)) == []  # a CPU run
    busy = LAUNCH_BOUND | {"optimizer_kernel_ms": 8.0}  # the device paces the phase
    assert check.run(profile(busy, **H100)) == []
    small = LAUNCH_BOUND | {"optimizer_ms": 1.0, "optimizer_kernel_ms": 0.1}
    assert check.run(profile(small, **H100)) == []  # 3% of the step


def test_dcgan_two_adams_step_is_launch_bound(shared_traces):
    """pytorch/examples dcgan on an H100: two Adam steps per iteration (foreach, CUDA's
    default), 4.4 ms of the 24.9 ms step on the host for 0.24 ms of device work."""
    d = diagnose(load_trace(shared_traces / "h100_dcgan.json.gz"))
    (f,) = [f for f in d.findings if f.code == "TP313"]
    m = d.profile.median
    assert m.optimizer_kernels == 14 and m.optimizer_kernel_ms < 0.3
    assert f.saving_ms == pytest.approx(m.optimizer_ms - m.optimizer_kernel_ms)
    assert f.knob == "fused-optimizer"
