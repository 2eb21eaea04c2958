"""TP314: fp32 training on a CPU with native bf16, priced only by the capture's bf16 autocast
probe (capture/probes.py): the probe switches autocast around the model's forward for a few
steps by hooks it removes afterwards, runs only where it applies, and the check names
nothing the probe did not measure."""

import torch
from doctor_fakes import ProbeResult, facts, process, profile
from torch import nn

from torchpace.capture.probes import BF16_PROBE, PROBE_STEPS, ProbeRunner, cpu_bf16_probe
from torchpace.doctor.checks import compute
from torchpace.doctor.checks.fp32_on_bf16_cpu import PROBE
from torchpace.facts.run import CallFacts


def tiny():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), lr=1e-2)


def bf16_cpu(**kw):
    return process(bf16_native=True, **kw)


def test_the_probe_runs_the_forward_under_bf16_autocast_for_its_steps_and_takes_its_hooks_back():
    model, opt = tiny()
    f = facts(proc=bf16_cpu())
    probe = cpu_bf16_probe(f.process, f, [model], continues=False)
    assert probe is not None and probe.name == BF16_PROBE == PROBE
    runner = ProbeRunner([probe])
    inner, outer = [], []
    model[0].register_forward_hook(lambda m, a, out: inner.append(out.dtype))
    while runner.pending:
        out = model(torch.randn(4, 8))
        outer.append(out.dtype)
        loss = out.square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        runner.record(1.0 if inner[-1] == torch.bfloat16 else 2.0)
        runner.advance()
    # a settling step and PROBE_STEPS timed ones under autocast, then as the script wrote it
    steps = 1 + PROBE_STEPS
    assert inner == [torch.bfloat16] * steps + [torch.float32] * steps
    assert outer == [torch.float32] * (2 * steps)  # the loss the script computes: float32
    (result,) = runner.results()
    assert (result.name, result.baseline_ms, result.probe_ms) == (PROBE, 2.0, 1.0)
    # the user's model as it was: no hook of the probe's left, no autocast after it
    assert not model._forward_pre_hooks and len(model._forward_hooks) == 0
    assert model(torch.randn(2, 8)).dtype == torch.float32
    assert not torch.is_autocast_enabled("cpu")


def test_the_probes_autocast_is_not_taken_for_the_scripts_own(monkeypatch):
    # capture/hooks.py flags torch.autocast.__enter__ to learn that the script uses autocast
    # (the amp knob is then not tried): the probe's entries must not set that flag
    calls = CallFacts()
    original = torch.autocast.__enter__

    def flagged(self):
        calls.autocast = True
        return original(self)

    flagged.__wrapped__ = original
    monkeypatch.setattr(torch.autocast, "__enter__", flagged)
    model, _ = tiny()
    f = facts(proc=bf16_cpu())
    probe = cpu_bf16_probe(f.process, f, [model], continues=False)
    probe.apply(True)
    assert model(torch.randn(2, 8)).dtype == torch.float32
    probe.close()
    assert calls.autocast is False


def test_the_probe_runs_only_where_it_applies():
    model, _ = tiny()

    def planned(proc, models=(model,), continues=False, autocast=False):
        f = facts(proc=proc)
        f.calls.autocast = autocast
        probe = cpu_bf16_probe(f.process, f, list(models), continues)
        if probe is not None:
            probe.close()
        return probe is not None

    assert planned(bf16_cpu())
    assert not planned(process(bf16_native=False))  # emulated bf16: 40x slower, never probed
    assert not planned(process(bf16_native=None))  # flags unread: not assumed
    assert not planned(bf16_cpu(device="cuda"))  # TP307/TP311 read a GPU's kernels
    assert not planned(bf16_cpu(), autocast=True)  # the script's own autocast
    assert not planned(bf16_cpu(), continues=True)  # --continue: the steps are the user's
    assert not planned(bf16_cpu(), models=())
    assert not planned(bf16_cpu(), models=(nn.Linear(2, 2).to(torch.bfloat16),))
    assert not planned(None)


def test_a_rank_of_a_data_parallel_job_is_not_probed(monkeypatch):
    model, _ = tiny()
    f = facts(proc=bf16_cpu())
    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 2)
    assert cpu_bf16_probe(f.process, f, [model], continues=False) is None
    monkeypatch.setattr(torch.distributed, "get_world_size", lambda group=None: 1)
    probe = cpu_bf16_probe(f.process, f, [model], continues=False)
    assert probe is not None
    probe.close()


def findings(*probes):
    f = facts(proc=bf16_cpu(), probes=probes)
    return [x for x in compute.run(profile({"wall_ms": 100.0}, f)) if x.code == "TP314"]


def test_a_measured_bf16_gain_is_named_with_its_saving():
    (f,) = findings(ProbeResult(PROBE, baseline_ms=62.0, probe_ms=41.0, steps=3))
    assert f.saving_ms == 21.0 and f.step_ms == 62.0 and f.knob == "amp"
    assert f.cost == "unprofiled"
    assert f.evidence == {"step_ms_fp32": 62.0, "step_ms_bf16": 41.0, "probe_steps": 3}
    assert "1.51x" in f.detail and "autocast" in f.fix
    assert "changes numerics" in f.notes[0]


def test_no_finding_without_a_probe_or_below_its_floors():
    assert findings() == []  # never inferred: a GPU run, an AVX2 CPU, a trace alone
    assert findings(ProbeResult(PROBE, baseline_ms=100.0, probe_ms=95.0, steps=3)) == []
    assert findings(ProbeResult(PROBE, baseline_ms=5.0, probe_ms=4.2, steps=3)) == []  # < 1 ms
    assert findings(ProbeResult(PROBE, baseline_ms=100.0, probe_ms=180.0, steps=3)) == []
