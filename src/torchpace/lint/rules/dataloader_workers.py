"""TP101 dataloader-without-workers (P01)."""

from __future__ import annotations

from torchpace.lint.names import argument, is_zero
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DATALOADER

# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, ...)
NUM_WORKERS_POSITION = 5


class DataLoaderWithoutWorkers(Rule):
    code = "TP101"
    message = "DataLoader loads every batch in the main process"
    VALID = (
        "from torch.utils.data import DataLoader\nDataLoader(ds, batch_size=8, num_workers=4)",
        "import torch\ntorch.utils.data.DataLoader(ds, num_workers=args.workers)",
        "from torch.utils.data import DataLoader\nDataLoader(ds, **loader_kwargs)",
        "class DataLoader: ...\nDataLoader(ds)",
    )
    INVALID = (
        "from torch.utils.data import DataLoader\nDataLoader(ds, batch_size=8)",
        "import torch.utils.data as tud\ntud.DataLoader(ds, num_workers=0)",
    )

    def check(self, index):
        for call in index.calls:
            if call.name not in DATALOADER:
                continue
            known, value = argument(call.node, "num_workers", NUM_WORKERS_POSITION)
            if not known:
                continue
            if value is None:
                yield self.finding(
                    call.node, f"{self.message} (num_workers is not set; the default is 0)"
                )
            elif is_zero(value):
                yield self.finding(call.node, f"{self.message} (num_workers=0)")
