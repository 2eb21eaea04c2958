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
