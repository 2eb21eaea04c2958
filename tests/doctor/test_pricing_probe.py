"""The fused-optimizer A/B probe (capture/probes.py) that prices TP313 by measurement: a tiny
training loop driven step by step as the capture's session drives it, the optimizer switched
to fused=True and back in the same process; on a GPU the step counters move with it."""

import pytest
import torch
from doctor_fakes import process
from torch import nn

from torchpace.capture.probes import (
    FUSED_PROBE,
    PROBE_STEPS,
    ProbeRunner,
    fused_optimizer_probe,
    optimizer_probes,
)


def tiny(device="cpu", **adam):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to(device)
    return model, torch.optim.Adam(model.parameters(), lr=1e-2, **adam)


def train_step(model, opt, device="cpu"):
    x = torch.randn(4, 8, device=device)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    return loss


def drive(runner, model, opt, device="cpu"):
    """The session's PROBES phase: a step, then record its time and advance; the flags
    each step ran with."""
    seen = []
    while runner.pending:
        seen.append(opt.param_groups[0]["fused"])
        train_step(model, opt, device)
        runner.record(1.0 if seen[-1] else 2.0)  # fused steps "take" 1 ms, the default 2
        runner.advance()
    return seen


def test_the_probe_switches_to_fused_for_its_steps_and_back(monkeypatch):
    model, opt = tiny()
    train_step(model, opt)  # the window's steps made the optimizer's state
    fused_calls, real = [], torch._fused_adam_

    def fused_adam(*args, **kwargs):
        fused_calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(torch, "_fused_adam_", fused_adam)
    probe = fused_optimizer_probe([opt])
    runner = ProbeRunner([probe])
    seen = drive(runner, model, opt)
    # a settling step and PROBE_STEPS timed ones each way, fused first
    assert seen == [True] * (1 + PROBE_STEPS) + [None] * (1 + PROBE_STEPS)
    assert len(fused_calls) == 1 + PROBE_STEPS  # the fused kernel ran in the switched steps
    (result,) = runner.results()
    assert (result.name, result.baseline_ms, result.probe_ms) == (FUSED_PROBE, 2.0, 1.0)
    assert result.steps == PROBE_STEPS and "Adam" in result.detail
    # the user's own step back: flag unset, counters where the default step keeps them
    assert all(g["fused"] is None for g in opt.param_groups)
    steps = [s["step"] for s in opt.state.values()]
    assert all(s.device.type == "cpu" and s.item() == 1 + 2 * (1 + PROBE_STEPS) for s in steps)
    assert torch.isfinite(train_step(model, opt))


def test_an_optimizer_whose_script_chose_its_step_is_not_probed():
    assert fused_optimizer_probe([tiny(foreach=False)[1]]) is None
    assert fused_optimizer_probe([tiny(fused=True)[1]]) is None
    model = nn.Linear(2, 2)
    assert fused_optimizer_probe([torch.optim.RMSprop(model.parameters())]) is None  # no fused
    assert fused_optimizer_probe([]) is None


def test_the_probe_is_planned_on_a_gpu_run_only():
    opt = tiny()[1]
    on_gpu = optimizer_probes(process(device="cuda", cuda_available=True), [opt])
    assert [p.name for p in on_gpu] == [FUSED_PROBE]
    assert optimizer_probes(process(), [opt]) == []  # TP313 is a GPU finding: nothing to price
    assert optimizer_probes(None, [opt]) == []


@pytest.mark.cuda
def test_on_a_gpu_the_step_counters_move_with_the_switch():
    model, opt = tiny("cuda")
    train_step(model, opt, "cuda")
    assert {s["step"].device.type for s in opt.state.values()} == {"cpu"}  # foreach's
    runner = ProbeRunner([fused_optimizer_probe([opt])])
    assert {s["step"].device.type for s in opt.state.values()} == {"cuda"}  # fused's
    drive(runner, model, opt, "cuda")
    (result,) = runner.results()
    assert result.name == FUSED_PROBE
    assert {s["step"].device.type for s in opt.state.values()} == {"cpu"}
    assert all(g["fused"] is None for g in opt.param_groups)
    assert torch.isfinite(train_step(model, opt, "cuda"))
