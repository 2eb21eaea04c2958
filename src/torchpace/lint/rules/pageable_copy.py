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
