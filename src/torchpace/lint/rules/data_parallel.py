"""TP501 data-parallel (P28)."""

from __future__ import annotations

from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DATA_PARALLEL


class DataParallel(Rule):
    code = "TP501"
    message = "nn.DataParallel: DistributedDataParallel is faster, even on one machine"
    VALID = (
        "import torch.nn as nn\nmodel = nn.parallel.DistributedDataParallel(model)\n",
        "class DataParallel: ...\nmodel = DataParallel(model)\n",
    )
    INVALID = (
        "import torch.nn as nn\nmodel = nn.DataParallel(model)\n",
        "from torch.nn.parallel import DataParallel as DP\nmodel = DP(model, device_ids=[0, 1])\n",
    )

    def check(self, index):
        for call in index.calls:
            if call.name in DATA_PARALLEL:
                yield self.finding(call.node)
