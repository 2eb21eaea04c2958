"""TP502 accumulation-without-no-sync (P29)."""

from __future__ import annotations

import re

from torchpace.lint.index import CallSite, FileIndex, Loop
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DDP
from torchpace.lint.training import has_modulo, is_backward, is_optimizer_step

# `if (i + 1) % accum == 0:` or `if step_is_accumulation_boundary:`: a step taken once every
# few backwards. Other `if`s around a step (`if scaler: scaler.step() else: opt.step()`) are
# not accumulation.
ACCUMULATION_WORD = re.compile(r"accum|sync|boundary", re.IGNORECASE)
# Ways to skip the gradient all-reduce other than `no_sync()` (nanoGPT sets the attribute).
SYNC_CONTROLS = ("no_sync", "require_backward_grad_sync", "accumulate(")


def _accumulation_guard(index: FileIndex, step: CallSite, loop: Loop) -> bool:
    depth = step.loops.index(loop) + 1
    for guard in step.guards:
        if guard.loop_depth >= depth:
            text = index.module.code_for_node(guard.test)
            if has_modulo(guard.test) or ACCUMULATION_WORD.search(text):
                return True
    return False


def _accumulating_backward(index: FileIndex, loop: Loop) -> CallSite | None:
    """The backward of ``loop`` when the optimizer steps less often than it runs."""
    backward = next((c for c in loop.calls if is_backward(c)), None)
    if backward is None:
        return None
    steps = [c for c in loop.function.calls if is_optimizer_step(c) and loop in c.loops]
    if steps:
        # form 1: the step sits in the same loop, under an accumulation `if`
        if all(_accumulation_guard(index, s, loop) for s in steps):
            return backward
        return None
    # form 2: an inner micro-step loop, the step in the loop around it
    parent = loop.parent
    if parent is not None and any(is_optimizer_step(c) for c in parent.calls):
        return backward
    return None


class AccumulationWithoutNoSync(Rule):
    """## What it does

    Flags a loop that accumulates gradients (`loss.backward()` every iteration,
    `optimizer.step()` only under an `if`) on a model wrapped in `DistributedDataParallel` in
    the same file, without `no_sync()`.

    ## Why it matters

    DDP all-reduces gradients on every backward. During accumulation micro-steps the
    intermediate all-reduces are wasted communication; `no_sync()` skips them and only the last
    micro-step synchronises.

    ## Example

    ```python
    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        loss = model(x, y) / accum
        loss.backward()
        if (i + 1) % accum == 0:
            optimizer.step(); optimizer.zero_grad()
    ```

    ## Use instead

    ```python
    model = DDP(model, device_ids=[rank])
    for i, (x, y) in enumerate(loader):
        sync = (i + 1) % accum == 0
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = model(x, y) / accum
            loss.backward()
        if sync:
            optimizer.step(); optimizer.zero_grad()
    ```

    ## Fix safety

    No automatic fix. Code that sets `model.require_backward_grad_sync` (as nanoGPT does) is
    recognised and not flagged.

    ## In a profile (torchpace doctor)

    Seen in the cross-rank view (`torchpace doctor --trace DIR`, `torchpace launch --doctor`):
    in one step, more than one DDP forward is followed by an all-reduce before the next forward,
    i.e. several backward passes each reduced the gradients. Evidence: the backward passes per
    step that all-reduced, and the all-reduce calls per step. Estimated saving: the step's time
    in collectives x (passes - 1) / passes.
    """

    code = "TP502"
    message = "gradient accumulation under DDP all-reduces on every micro-step"
    VALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n"
        "for i, x in enumerate(loader):\n    loss = model(x)\n    loss.backward()\n"
        "    optimizer.step()\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n"
        "for i, x in enumerate(loader):\n    with model.no_sync():\n        loss = model(x)\n"
        "        loss.backward()\n    if (i + 1) % 4 == 0:\n        optimizer.step()\n",
        "for i, x in enumerate(loader):\n    loss = model(x)\n    loss.backward()\n"
        "    if (i + 1) % 4 == 0:\n        optimizer.step()\n",
    )
    INVALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nmodel = DDP(model)\n"
        "for i, x in enumerate(loader):\n    loss = model(x) / 4\n    loss.backward()\n"
        "    if (i + 1) % 4 == 0:\n        optimizer.step()\n        optimizer.zero_grad()\n",
        "import torch\nmodel = torch.nn.parallel.DistributedDataParallel(model)\n"
        "while True:\n    for micro in range(accum):\n        loss = model(next(it))\n"
        "        loss.backward()\n    optimizer.step()\n",
    )

    def check(self, index):
        if not any(c.name in DDP for c in index.calls):
            return
        if any(control in index.source for control in SYNC_CONTROLS):
            return
        for loop in index.loops:
            backward = _accumulating_backward(index, loop)
            if backward is not None:
                yield self.finding(backward.node, f"{self.message}: use model.no_sync()")
