"""Gradient accumulation under DDP: one all-reduce per optimizer step, not per micro-step
(P14, P29).

DDP all-reduces the gradients at the end of every backward. With K micro-steps per
optimizer step, K-1 of those all-reduces are wasted: the gradients are only used after the
last one. ``model.no_sync()`` skips the all-reduce; the gradients accumulate locally and
the next synchronised backward reduces the sum.
"""

from __future__ import annotations

import contextlib

import torch


class Accumulator:
    """Use as ``with acc:`` around each micro-step's forward and backward.

    Example, 4 micro-batches per optimizer step::

        acc = accumulate(model, micro_steps=4)
        for x, y in loader:
            with acc:
                acc.backward(loss_fn(model(x), y))
            if acc.should_step:
                optimizer.step()
                optimizer.zero_grad()

    ``backward(loss)`` divides the loss by ``micro_steps``, so that the accumulated
    gradient is the mean over the whole virtual batch, as one big batch would give (for a
    loss that is a mean over its micro-batch; a per-token loss must be normalised over
    the whole batch's tokens by the caller). With ``total`` (micro-steps in the epoch, e.g.
    ``len(loader)``) the epoch's last micro-step also synchronises, so a last, shorter
    group is not left unreduced.
    """

    def __init__(self, model: torch.nn.Module, micro_steps: int, total: int | None = None):
        if micro_steps < 1:
            raise ValueError(f"micro_steps must be at least 1, got {micro_steps}")
        self.model = model
        self.micro_steps = micro_steps
        self.total = total
        self.index = -1  # the micro-step in progress (or just finished)
        self._context: contextlib.AbstractContextManager | None = None

    @property
    def should_step(self) -> bool:
        """True once the micro-step that ends a group has run: step the optimizer now."""
        last_of_group = (self.index + 1) % self.micro_steps == 0
        last_of_epoch = self.total is not None and self.index + 1 >= self.total
        return self.index >= 0 and (last_of_group or last_of_epoch)

    def __enter__(self) -> Accumulator:
        self.index += 1
        if self.total is not None and self.index >= self.total:
            self.index = 0  # a new epoch
        no_sync = getattr(self.model, "no_sync", None)  # DDP has it; a plain module not
        self._context = (
            no_sync() if no_sync is not None and not self.should_step else contextlib.nullcontext()
        )
        self._context.__enter__()
        return self

    def __exit__(self, *exc) -> bool | None:
        context, self._context = self._context, None
        return context.__exit__(*exc) if context is not None else None

    def backward(self, loss: torch.Tensor) -> None:
        (loss / self.micro_steps).backward()


def accumulate(model: torch.nn.Module, micro_steps: int, total: int | None = None) -> Accumulator:
    """An Accumulator for ``model`` (DDP-wrapped or not): see Accumulator."""
    return Accumulator(model, micro_steps, total)
