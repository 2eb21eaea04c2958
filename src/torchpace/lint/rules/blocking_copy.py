"""TP103 blocking-host-to-device-copy (P03)."""

from __future__ import annotations

from torchpace.lint.names import is_false, keyword
from torchpace.lint.rule import Rule
from torchpace.lint.rules._loader_batches import (
    built_at,
    device_moves,
    loaders,
    loops_over,
)


class BlockingHostToDeviceCopy(Rule):
    """## What it does

    Flags `.cuda()` / `.to(...)` of a batch that comes from a loader with `pin_memory=True` when
    the call lacks `non_blocking=True`. The loader is followed across the functions of its file
    as for [TP102](TP102.md) (returned by a builder, passed as an argument, kept on `self`); the
    finding is at the copy and names the line where the loader is built. A loader given
    `**kwargs` counts as pinned when this file builds that dict with `'pin_memory': True` in
    some branch (`kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {}`, or
    `train_kwargs.update(accel_kwargs)`): that is the branch that copies to the GPU. A dict
    built elsewhere is not read, and the loader is not reported.

    ## Why it matters

    Pinning only pays off fully when the copy is asynchronous: a blocking copy makes the CPU
    wait for the transfer instead of queueing the next kernels, so copy and compute never
    overlap.

    ## Example

    ```python
    loader = DataLoader(ds, num_workers=4, pin_memory=True)
    for x, y in loader:
        x = x.to(device)
    ```

    ## Use instead

    ```python
    for x, y in loader:
        x = x.to(device, non_blocking=True)
    ```

    ## Fix safety

    No automatic fix. Host-to-device non-blocking copies from pinned memory are safe; a
    device-to-host non-blocking copy read before a sync gives stale data, so the rule only looks
    at loader batches.
    """

    code = "TP103"
    message = "copy of a pinned batch to the GPU without non_blocking=True"
    VALID = (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
        "for x, y in loader:\n    x = x.to('cuda', non_blocking=True)\n",
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
        "for x, y in loader:\n    x = x.to(torch.float16)\n",
    )
    INVALID = (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
        "for x, y in loader:\n    x = x.cuda()\n",
        "import torch\n"
        "def train(model, ds, device):\n"
        "    loader = torch.utils.data.DataLoader(ds, pin_memory=True, num_workers=4)\n"
        "    for batch in loader:\n        out = model(batch['x'].to(device))\n",
    )

    def check(self, index):
        # One finding per copy, naming every pinned loader whose batches reach it (a
        # validation function may be called with two loaders).
        sources: dict[int, tuple] = {}
        for loader in loaders(index):
            if loader.pinned is not True:
                continue
            for loop in loops_over(index, loader):
                for move in device_moves(index, loop):
                    if len(move.node.args) > 1 and keyword(move.node, "non_blocking") is None:
                        continue  # non_blocking may be given by position
                    arg = keyword(move.node, "non_blocking")
                    if arg is None or is_false(arg.value):
                        _, refs = sources.setdefault(id(move.node), (move, []))
                        ref = built_at(loader, move)
                        if ref not in refs:
                            refs.append(ref)
        for move, refs in sources.values():
            yield self.finding(move.node, refs=tuple(refs))
