"""Where one step ends and the next begins, for a script that never says so.

By default a step ends at the last optimizer of an iteration's cycle (a GAN's G and D are one
step): the cycle is learned from the first iteration, the first optimizer seen twice closing
it. ``--step-on dataloader`` ends a step at each batch after the first; ``manual`` at each
``torchpace.step()``. Each boundary calls ``on_step(t_end, late)``; ``late`` is True for the
first step of an optimizer cycle, known only once the next step has begun.

Where the optimizer's count disagrees with the loader's (one optimizer stepped twice on one
DataLoader batch: a loop that calls ``optimizer.step()`` again under --amp, a scaler retry),
the batches are the steps from then on, and ``RunFacts.step_note`` says so. Without a
DataLoader nothing tells a second call on the same batch from the next iteration: the
optimizer's calls stay the steps (``--step-on manual`` with ``torchpace.step()`` says where
a step ends).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from torchpace.capture.spec import StepOn
from torchpace.facts.run import RunFacts


class StepBoundaries:
    def __init__(
        self,
        step_on: StepOn,
        facts: RunFacts,
        on_step: Callable[[float, bool], None],
        contiguous: bool = False,
    ):
        """``contiguous``: each step runs from the previous boundary to this one, whatever
        ran in between (tune's trials: the steps' times add up to the loop's time, and the
        capture's own bookkeeping is in them, not hidden between them; a gap that is not
        timed gives the script's threads and loader workers time for free). Otherwise the
        next step starts after ``on_step`` returns (the doctor: the window's trace export
        and the probes' switches are no step's time)."""
        self.contiguous = contiguous
        self.step_on = step_on
        self.facts = facts
        self.on_step = on_step
        self.started = False  # a first step has begun (set by the first hook that fires)
        self.last_boundary = time.perf_counter()
        self.data_wait_s = 0.0  # inside DataLoader __next__ since the last boundary
        self.samples = 0  # fetched from DataLoaders since the last boundary
        # a DataLoader iterator of the script's began since the last boundary: an epoch's
        # start, its workers started and what the script did between epochs in this step
        self.loader_began = False
        self.device: str | None = None  # of the first stepped optimizer's parameters
        self._cycle: list[int] | None = None
        self._seen: list[int] = []
        self._last_post_t: float | None = None
        self._wait_at_last_post = 0.0
        self._samples_at_last_post = 0
        self._first_batch = True
        self._restart = False
        self.batches = 0  # fetched from DataLoaders since the start
        self._batches_at_first_call: int | None = None  # when the cycle's first call came
        self._calls_per_batch: int | None = None  # counted once the batches are the steps
        self._batch_steps = 0  # batches since they became the steps
        self._backwards = 0  # backward() calls while no optimizer was built or stepped

    def fetched(self, wait_s: float, samples: int) -> None:
        self.data_wait_s += wait_s
        self.samples += samples
        self.batches += 1

    def loader_started(self) -> None:
        self.loader_began = True

    def backward_called(self, optimizer_built: bool) -> None:
        """A loop that builds no optimizer (a hand-written update: pytorch/examples'
        word_language_model, `p.data.add_(p.grad, alpha=-lr)`) has no optimizer.step() to end
        its steps, and its capture ran the whole script waiting for one. Where the steps are
        the optimizer's and, at the second backward(), none has stepped and no optimizer was
        built (a loop accumulating gradients has built its optimizer), each backward() ends
        a step from then on: step 0 ends at this second call."""
        if self.step_on == StepOn.BACKWARD:
            self._end_step(time.perf_counter())
            return
        if self.step_on != StepOn.OPTIMIZER or self._seen or optimizer_built:
            return
        self._backwards += 1
        if self._backwards < 2:
            return
        self.step_on = StepOn.BACKWARD
        self.facts.step_source = str(StepOn.BACKWARD)
        self.facts.step_note = (
            "the loop builds no optimizer: each backward() is counted as a step, not each "
            "optimizer.step()"
        )
        self._end_step(time.perf_counter())

    def optimizer_stepped(self, optimizer) -> None:
        if self._calls_per_batch is not None and self._count_call_on_batch(optimizer):
            return
        if self.step_on != StepOn.OPTIMIZER:
            return
        key = id(optimizer)
        name = type(optimizer).__name__
        if name not in self.facts.optimizers:
            self.facts.optimizers.append(name)
        if self.device is None:
            self.device = next(
                (p.device.type for g in optimizer.param_groups for p in g["params"]), None
            )
        now = time.perf_counter()
        if self._cycle is not None:
            if key == self._cycle[-1]:
                self._end_step(now)
            return
        if key not in self._seen:
            if not self._seen:
                self._batches_at_first_call = self.batches
            self._seen.append(key)
            self._last_post_t = now
            self._wait_at_last_post = self.data_wait_s
            self._samples_at_last_post = self.samples
            return
        if self._batches_at_first_call and self.batches == self._batches_at_first_call:
            self._step_by_batches(len(self._seen) + 1)  # a second call on the same batch
            return
        # The first iteration is over: its optimizers are the cycle. Step 0 ended at its
        # last optimizer's step; only now is that known, so what came after moves on.
        self._cycle = list(self._seen)
        self.facts.optimizer_steps_per_step = float(len(self._cycle))
        wait_after = self.data_wait_s - self._wait_at_last_post
        samples_after = self.samples - self._samples_at_last_post
        self.data_wait_s = self._wait_at_last_post
        self.samples = self._samples_at_last_post
        # Recorded late, so it moves no phase on: a window opened now would start mid-step.
        self._end_step(self._last_post_t, late=True)
        self.data_wait_s += wait_after
        self.samples += samples_after
        self.last_boundary = self._last_post_t
        if key == self._cycle[-1]:  # one optimizer: this call also ends step 1
            self._end_step(now)

    # Calls on the first batch after which, no second batch having come, the loop is taken
    # to train on one batch again and again (an "overfit one batch" loop, batches fetched
    # once into a list): the optimizer's calls are the steps again.
    SAME_BATCH_CALLS = 8

    def _count_call_on_batch(self, optimizer) -> bool:
        """Counts a call while the batches are the steps; True where it gave the steps back
        to the optimizer (and ended one)."""
        self._calls_per_batch += 1
        if self._batch_steps or self._calls_per_batch < self.SAME_BATCH_CALLS:
            self.facts.optimizer_steps_per_step = float(self._calls_per_batch)
            return False
        self.step_on, self._cycle = StepOn.OPTIMIZER, [id(optimizer)]
        self._calls_per_batch = None
        self.facts.step_source = str(StepOn.OPTIMIZER)
        self.facts.optimizer_steps_per_step, self.facts.step_note = 1.0, None
        self._end_step(time.perf_counter())  # the calls so far: one long warm-up step
        return True

    def _step_by_batches(self, calls: int) -> None:
        """The loader's batches are the steps from now on: step 0, begun at the start, ends
        at the next batch fetched."""
        self.step_on = StepOn.DATALOADER
        self._first_batch = False
        self._calls_per_batch = calls
        self.facts.step_source = str(StepOn.DATALOADER)
        self.facts.optimizer_steps_per_step = float(calls)
        self.facts.step_note = (
            "the optimizer stepped more than once on one DataLoader batch: each batch is "
            "counted as a step, not each optimizer.step()"
        )

    def dataloader_next(self) -> None:
        if self._calls_per_batch is not None:
            self._batch_steps += 1
            self._calls_per_batch = 0
        if self.step_on != StepOn.DATALOADER:
            return
        if self._first_batch:  # the first batch starts step 0
            self._first_batch = False
            self.last_boundary = time.perf_counter()
            self.data_wait_s = 0.0
            self.samples = 0
            return
        self._end_step(time.perf_counter())

    def manual_step(self) -> None:
        if self.step_on == StepOn.MANUAL:
            self._end_step(time.perf_counter())

    def restart_timing(self) -> None:
        """The next step starts when the current ``on_step`` returns, even when contiguous:
        the capture's one-time work at a phase change is no step's time."""
        self._restart = True

    def _end_step(self, now: float, late: bool = False) -> None:
        self.on_step(now, late)
        restart, self._restart = self._restart, False
        self.last_boundary = now if self.contiguous and not restart else time.perf_counter()
        self.data_wait_s = 0.0
        self.samples = 0
        self.loader_began = False
