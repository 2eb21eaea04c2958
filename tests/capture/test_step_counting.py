"""Steps counted where the optimizer's count disagrees with the loader's (issue 36): a loop
that calls ``optimizer.step()`` twice on one batch (some trainers' --amp path) makes one
step per batch, not two; two optimizers on one batch (a GAN) stay one step; without a
DataLoader the optimizer's calls are the steps (nothing tells the two apart there)."""

import torch

from torchpace.capture.boundaries import StepBoundaries
from torchpace.capture.spec import StepOn
from torchpace.facts.run import RunFacts, Status


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
