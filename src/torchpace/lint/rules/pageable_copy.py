"""TP102 pageable-host-to-device-copy (P02)."""

from __future__ import annotations

from torchpace.lint.rule import Rule
from torchpace.lint.rules._loader_batches import (
    copied_at,
    device_moves,
    loaders,
    loops_over,
    mentions_cuda,
)


class PageableHostToDeviceCopy(Rule):
    """## What it does

    Flags a `DataLoader` built without `pin_memory=True` whose batches are moved to CUDA
    (`.cuda()`, `.to("cuda")`, `.to(device)` in a file that mentions CUDA), in the loop over it,
    or in a function the loop hands the batch to. The loader is followed across the functions of
    its file: returned by a builder (`train_data = prepare_dataloader(...)`, `train, val =
    loaders()`), passed to a function or a class (`train(model, loader)`, `Trainer(model,
    loader)` and the parameter of its `__init__`), kept on an attribute (`self.train_data =
    train_data`, iterated in another method). The finding is at the `DataLoader(...)` call and
    names the line where its batches are copied. A loader whose `pin_memory` is an expression is
    not reported, nor one given `**kwargs` unless this file builds that dict from literals
    (`{"num_workers": 2}`: not pinned; `{"pin_memory": True} if accel else {}`: pinned where it
    copies).

    ## Why it matters

    Copies from pageable host memory go through an extra staging buffer and cannot overlap with
    compute. Pinned (page-locked) batches copy faster and allow `non_blocking=True`. In article
    002 pinning plus non-blocking copies was the second step of the ladder.

    ## Example

    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=4)
    for x, y in loader:
        x, y = x.cuda(), y.cuda()
    ```

    ## Use instead

    ```python
    loader = DataLoader(ds, batch_size=64, num_workers=4, pin_memory=True)
    for x, y in loader:
        x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
    ```

    ## Fix safety

    No automatic fix: pinning has no effect without an accelerator and pinning too much memory
    hurts the host; it is measured by `torchpace tune`.
    """

    code = "TP102"
    message = "DataLoader without pin_memory=True feeds batches that are copied to the GPU"
    VALID = (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, pin_memory=True)\n"
        "for x, y in loader:\n    x = x.cuda(non_blocking=True)\n",
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2)\n"
        "for x, y in loader:\n    x = x.float()\n",
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2, pin_memory=args.pin)\n"
        "for x, y in loader:\n    x = x.cuda()\n",
    )
    INVALID = (
        "from torch.utils.data import DataLoader\n"
        "loader = DataLoader(ds, num_workers=2)\n"
        "for x, y in loader:\n    x, y = x.cuda(), y.cuda()\n",
        "import torch\n"
        "device = torch.device('cuda')\n"
        "loader = torch.utils.data.DataLoader(ds, num_workers=2, pin_memory=False)\n"
        "for i, (x, y) in enumerate(loader):\n    x = x.to(device)\n",
    )

    def check(self, index):
        if not mentions_cuda(index):
            return
        for loader in loaders(index):
            if loader.pinned is not False:
                continue
            for loop in loops_over(index, loader):
                move = next(device_moves(index, loop), None)
                if move is not None:
                    yield self.finding(loader.call.node, refs=(copied_at(loader, move),))
                    break
