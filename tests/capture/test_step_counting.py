"""Steps counted where the optimizer's count disagrees with the loader's (issue 36): a loop
that calls ``optimizer.step()`` twice on one batch (some trainers' --amp path) makes one
step per batch, not two; two optimizers on one batch (a GAN) stay one step; without a
DataLoader the optimizer's calls are the steps (nothing tells the two apart there)."""

import itertools

import pytest
import torch

from torchpace.capture.boundaries import StepBoundaries
from torchpace.capture.runner import capture_script
from torchpace.capture.spec import CaptureSpec, Mode, StepOn
from torchpace.facts.run import RunFacts, Status, StepPhase


def facts() -> RunFacts:
    return RunFacts(command=[], step_source="optimizer", optimizers=[],
                    optimizer_steps_per_step=1.0, warmup=0, steps_requested=3,
                    status=Status.RUNNING)  # fmt: skip


def optimizer() -> torch.optim.Optimizer:
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)


def run(batches: int, calls_per_batch: list, loader: bool = True) -> tuple[RunFacts, int]:
    """``calls_per_batch``: the optimizers stepped on each batch, in order."""
    steps = []
    f = facts()
    boundaries = StepBoundaries(StepOn.OPTIMIZER, f, lambda now, late: steps.append(late))
    for _ in range(batches):
        if loader:  # as capture/hooks.py reports a DataLoader batch
            boundaries.dataloader_next()
            boundaries.fetched(0.001, 32)
        for opt in calls_per_batch:
            boundaries.optimizer_stepped(opt)
    return f, len(steps)


def test_two_optimizer_steps_on_one_batch_make_one_step():
    opt = optimizer()
    f, steps = run(6, [opt, opt])
    assert steps == 5  # each batch's step ends when the next batch is fetched
    assert f.step_source == "dataloader" and f.optimizer_steps_per_step == 2.0
    assert "more than once on one DataLoader batch" in f.step_note


def test_one_optimizer_step_per_batch_stays_counted_by_the_optimizer():
    f, steps = run(6, [optimizer()])
    assert steps == 6 and f.step_source == "optimizer" and f.step_note is None


def test_two_optimizers_on_one_batch_are_one_step():
    f, steps = run(6, [optimizer(), optimizer()])
    assert steps == 6 and f.optimizer_steps_per_step == 2.0 and f.step_note is None


def test_without_a_loader_each_call_is_a_step():
    opt = optimizer()
    f, steps = run(6, [opt, opt], loader=False)
    assert steps == 12 and f.step_source == "optimizer" and f.step_note is None


def test_a_loop_training_on_one_fetched_batch_is_counted_by_the_optimizer():
    """``x, y = next(iter(loader))`` then many steps on it: no second batch ever comes, so
    the optimizer's calls are the steps again after a few (the capture must not wait for a
    batch that never comes)."""
    steps = []
    f = facts()
    boundaries = StepBoundaries(StepOn.OPTIMIZER, f, lambda now, late: steps.append(late))
    boundaries.dataloader_next()
    boundaries.fetched(0.001, 32)
    opt = optimizer()
    for _ in range(20):
        boundaries.optimizer_stepped(opt)
    assert f.step_source == "optimizer" and f.step_note is None
    assert len(steps) == 20 - StepBoundaries.SAME_BATCH_CALLS + 1


def backward_steps(backwards: int, optimizer_built: bool, steps_with=None) -> tuple[RunFacts, int]:
    steps = []
    f = facts()
    boundaries = StepBoundaries(StepOn.OPTIMIZER, f, lambda now, late: steps.append(late))
    for _ in range(backwards):
        boundaries.backward_called(optimizer_built)
        if steps_with is not None:
            boundaries.optimizer_stepped(steps_with)
    return f, len(steps)


def test_a_loop_that_builds_no_optimizer_has_its_steps_ended_by_backward():
    """pytorch/examples' word_language_model updates its weights by hand (no optimizer):
    its doctor ran all 40 epochs waiting for an optimizer.step(). From the second backward()
    each one ends a step (step 0: the start to that call)."""
    f, steps = backward_steps(6, optimizer_built=False)
    assert steps == 5 and f.step_source == "backward"
    assert "builds no optimizer" in f.step_note


def test_a_loop_with_an_optimizer_keeps_its_steps_whatever_its_backward_calls():
    # an optimizer built, not yet stepped (gradients accumulated over several backward())
    f, steps = backward_steps(6, optimizer_built=True)
    assert steps == 0 and f.step_source == "optimizer" and f.step_note is None
    # an optimizer that steps each time: its steps, not backward's
    f, steps = backward_steps(6, optimizer_built=False, steps_with=optimizer())
    assert steps == 6 and f.step_source == "optimizer"


HAND_UPDATE = """
import torch
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
x = torch.randn(16, 8)
for step in range(400):
    model.zero_grad()
    loss = model(x).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.01)
print("ran to the end")
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", [Mode.TIMING, Mode.PLAIN])
def test_a_trial_and_a_plain_run_of_a_loop_with_no_optimizer_time_its_steps(tmp_path, mode):
    script = tmp_path / "train.py"
    script.write_text(HAND_UPDATE)
    out = tmp_path / "run"
    out.mkdir()
    spec = CaptureSpec(str(script), [], out, mode=mode, knobs={}, warmup=2, steps=6, seed=0,
                       record_loss=mode == Mode.TIMING, timeout_s=240)  # fmt: skip
    facts = capture_script(spec, output=tmp_path / "output.log").facts
    assert facts.status == "complete", facts.error
    measured = [s for s in facts.steps if s.phase == StepPhase.MEASURED]
    assert len(measured) == 6
    assert "ran to the end" not in (tmp_path / "output.log").read_text()  # ended at its steps
    if mode == Mode.TIMING:
        assert facts.step_source == "backward"
        losses = [s.loss for s in measured]
        assert all(a > b for a, b in itertools.pairwise(losses)), losses  # one each, in order
