"""The script as it is, timed by one step hook: the reference tune's fidelity check compares
its trials with (capture mode PLAIN; docs/tune.md, "What a trial changes").

"Unmodified" means: the user's script in a fresh Python, with its own argv, working folder,
environment and seeding (none added), no knob (but the spec's, applied by the child first as
`torchpace run` applies them: tune's check of the kept configuration), no loss read, no
DataLoader timing, no model or optimizer patches, no progress pipe, no watchdog; the only
addition is what finds its steps: a global optimizer step post-hook (or DataLoader
``__next__`` for ``--step-on dataloader``, ``torchpace.step()`` for ``manual``), which takes
``time.perf_counter()`` and appends to a list; with the optimizer's, ``backward()`` and the
optimizer's constructor are seen too, for a loop that builds no optimizer (its steps end at
``backward()``, as in a trial). Steps are timed boundary to boundary, as
tune's trials are. After the warm-up and timed steps the script is ended as a trial ends it
(CaptureComplete), and the steps are written as a RunFacts (``run_facts.json``) like any
capture's. The files the script writes outside the run folder are put back afterwards as
after a trial (the file guard, capture/file_guard.py, installed by the child before this):
the reference runs the user's script too, and must leave their folder as it found it.
"""

from __future__ import annotations

import functools
import sys

from torchpace.capture.boundaries import StepBoundaries
from torchpace.capture.spec import CaptureSpec, StepOn
from torchpace.facts.run import FACTS_NAME, RunFacts, Status, StepPhase, StepRecord


class PlainComplete(BaseException):
    """Ends the script once its steps are timed (a BaseException: the script's own
    ``except Exception`` does not swallow it)."""


class PlainTimer:
    def __init__(self, spec: CaptureSpec, facts: RunFacts):
        self.spec = spec
        self.facts = facts
        self.boundaries = StepBoundaries(spec.step_on, facts, self._step_ended, contiguous=True)
        self.times_ms: list[float] = []
        self.done = False

    @property
    def step_index(self) -> int:  # what the child's "ended early" message reads
        return len(self.times_ms)

    def _step_ended(self, now: float, late: bool) -> None:
        if self.done:
            return
        self.times_ms.append(1000 * (now - self.boundaries.last_boundary))
        if late:
            return
        if len(self.times_ms) >= self.spec.warmup + self.spec.steps:
            self.done = True
            raise PlainComplete

    def install(self) -> None:
        step_on = self.spec.step_on
        if step_on == StepOn.OPTIMIZER:
            from torch.optim.optimizer import register_optimizer_step_post_hook

            register_optimizer_step_post_hook(
                lambda optimizer, args, kwargs: self.boundaries.optimizer_stepped(optimizer)
            )
            self._backward_ends_steps_without_an_optimizer()
        elif step_on == StepOn.DATALOADER:
            from torch.utils.data.dataloader import _BaseDataLoaderIter

            original = _BaseDataLoaderIter.__next__

            @functools.wraps(original)
            def next_(loader_iter):
                self.boundaries.dataloader_next()
                return original(loader_iter)

            _BaseDataLoaderIter.__next__ = next_
        else:
            from torchpace.capture import api

            api._attach(self)

    def _backward_ends_steps_without_an_optimizer(self) -> None:
        """As in a trial (StepBoundaries.backward_called): a loop that builds no optimizer
        has its steps ended by backward(). What it takes: whether an optimizer was built
        (its constructor noted, nothing else) and each backward() call."""
        import torch

        built = []
        original_init = torch.optim.Optimizer.__init__
        original_backward = torch.Tensor.backward

        @functools.wraps(original_init)
        def init(optimizer, *args, **kwargs):
            built.append(True)
            original_init(optimizer, *args, **kwargs)

        @functools.wraps(original_backward)
        def backward(tensor, *args, **kwargs):
            self.boundaries.backward_called(bool(built))
            return original_backward(tensor, *args, **kwargs)

        torch.optim.Optimizer.__init__ = init
        torch.Tensor.backward = backward

    def facts_out(self, status: Status, error: str | None) -> RunFacts:
        warmup = self.spec.warmup
        self.facts.steps = [
            StepRecord(index=i, wall_ms=round(ms, 3), data_wait_ms=0.0, in_window=False,
                       phase=StepPhase.WARMUP if i < warmup else StepPhase.MEASURED)
            for i, ms in enumerate(self.times_ms)
        ]  # fmt: skip
        self.facts.status, self.facts.error = status, error
        return self.facts


def run_plain(spec: CaptureSpec, run_script, ended_early, user_traceback, guard_files) -> int:
    """The child's PLAIN mode; ``run_script`` etc. are the child's own (capture/child.py)."""
    facts = RunFacts(
        command=spec.command, step_source=str(spec.step_on), optimizers=[],
        optimizer_steps_per_step=1.0, warmup=spec.warmup, steps_requested=spec.steps,
        status=Status.RUNNING,
    )  # fmt: skip
    timer = PlainTimer(spec, facts)
    timer.install()
    # the plain reference runs the user's script too: its files are put back as a trial's
    # are, and the guard's audit hook is then on both sides of the comparison. After the
    # timer: the guard sees torch.save only once torch is imported (file_guard.install)
    guard_files(spec)
    code, status, error = 0, Status.COMPLETE, None
    try:
        run_script(spec)
        status, error = Status.SCRIPT_EXITED, ended_early(timer, spec)
    except PlainComplete as e:
        e.__traceback__ = None
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status, error = Status.SCRIPT_EXITED, f"the script called sys.exit({e.code!r})"
    except KeyboardInterrupt:
        status, error, code = Status.INTERRUPTED, "interrupted", 130
    except BaseException as e:
        error = user_traceback(e)
        print(error, file=sys.stderr, end="")
        status, code = Status.SCRIPT_RAISED, 1
    if timer.done:
        status = Status.COMPLETE
    timer.facts_out(status, error).save(spec.out_dir / FACTS_NAME)
    return code
