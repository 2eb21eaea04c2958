"""The doctor on unmodified scripts written with the frameworks users train with: steps are
optimizer steps (gradient accumulation included), forward and backward run inside
optimizer.step(closure) are not optimizer time, and findings point at the user's lines,
never at the framework's internals.

The framework tests need the packages of the test-frameworks extra (`pip install
'.[test-frameworks]'`) and skip with the reason where one is absent; they are marked
`frameworks` (and `slow`): `pytest -m frameworks` runs just them.
"""

import pytest
from conftest import ROOT

from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.doctor.analyze import diagnose
from torchpace.trace import load_trace

PLANTED = ROOT / "tests" / "planted"
FRAMEWORKS = PLANTED / "frameworks"
pytestmark = pytest.mark.slow


def doctor(tmp_path, script, *args, warmup=3, steps=4):
    spec = CaptureSpec(
        str(script), list(args), tmp_path / "run", warmup=warmup, steps=steps, probes=False
    )
    spec.out_dir.mkdir()
    result = capture_script(spec)
    assert result.facts.status == "complete", result.facts.error
    return result.facts, diagnose(load_trace(result.trace_path), result.facts)


def marked_line(script, mark="# the user's line") -> str:
    lines = script.read_text().splitlines()
    return f"{script.name}:{next(i for i, x in enumerate(lines, 1) if mark in x)}"


def needs(package: str):
    pytest.importorskip(
        package, reason=f"{package} is not installed (pip install '.[test-frameworks]')"
    )


def test_forward_and_backward_inside_the_optimizer_closure_are_not_optimizer_time(tmp_path):
    facts, d = doctor(tmp_path, PLANTED / "closure_step.py", "--steps", "20")
    m = d.profile.median
    assert facts.optimizer_steps_per_step == 1.0 and d.profile.steps == 4
    # the closure (forward + backward) is most of the step; SGD's update is a small part
    assert m.backward_ms > m.optimizer_ms and m.part_forward_ms > m.optimizer_ms
    assert m.optimizer_ms < 0.3 * m.wall_ms


@pytest.mark.frameworks
def test_lightning_fit(tmp_path):
    needs("lightning")
    script = FRAMEWORKS / "lightning_fit.py"
    facts, d = doctor(tmp_path, script, "--steps", "30")
    assert facts.framework == "lightning" and facts.optimizer_steps_per_step == 1.0
    assert [s.samples for s in facts.window] == [32] * 4  # one batch per optimizer step
    # the closure is not the optimizer's: its backward is the backward row's, whole, and its
    # forward the forward row's (the optimizer row would claim them first otherwise)
    for step in d.profile.per_step:
        assert step.part_backward_ms == pytest.approx(step.backward_ms, rel=0.01)
        assert step.part_forward_ms > 0
    main = max(facts.loaders, key=lambda x: x.batches_seen)
    assert main.location.endswith(marked_line(script))  # the user's train_dataloader
    tp101 = next(f for f in d.findings if f.code == "TP101")
    assert tp101.location.endswith(marked_line(script))
    assert "train_dataloader" in tp101.fix  # in Lightning's terms


@pytest.mark.frameworks
def test_lightning_gradient_accumulation_is_one_step_per_optimizer_step(tmp_path):
    needs("lightning")
    facts, _ = doctor(
        tmp_path,
        FRAMEWORKS / "lightning_fit.py",
        "--steps",
        "20",
        "--accumulate",
        "2",
        warmup=2,
        steps=3,
    )
    assert [s.samples for s in facts.window] == [64] * 3


@pytest.mark.frameworks
def test_accelerate_prepare_loop(tmp_path):
    needs("accelerate")
    script = FRAMEWORKS / "accelerate_loop.py"
    facts, d = doctor(tmp_path, script, "--steps", "30", "--accumulate", "2")
    assert facts.framework == "accelerate"
    assert [s.samples for s in facts.window] == [64] * 4
    main = max(facts.loaders, key=lambda x: x.batches_seen)
    assert main.location.endswith(marked_line(script))  # not accelerate/data_loader.py
    tp101 = next(f for f in d.findings if f.code == "TP101")
    assert tp101.location.endswith(marked_line(script))
    assert "accelerator.prepare()" in tp101.fix


@pytest.mark.frameworks
def test_hf_trainer_with_a_tiny_config_model(tmp_path):
    needs("transformers")
    needs("accelerate")  # the Trainer's own dependency
    script = FRAMEWORKS / "hf_trainer.py"
    facts, d = doctor(tmp_path, script, "--steps", "20", "--accumulate", "2", warmup=2, steps=3)
    assert facts.framework == "hf-trainer" and facts.optimizer_steps_per_step == 1.0
    assert [s.samples for s in facts.window] == [16] * 3  # 2 micro-batches of 8
    main = max(facts.loaders, key=lambda x: x.batches_seen)
    assert main.location.endswith(marked_line(script))  # trainer.train(), not transformers/
    for f in d.findings:
        assert f.location is None or "site-packages" not in f.location, f
