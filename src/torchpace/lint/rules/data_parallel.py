"""TP501 data-parallel (P28)."""

from __future__ import annotations

from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DATA_PARALLEL


class DataParallel(Rule):
    """## What it does

    Flags `nn.DataParallel(...)`.

    ## Why it matters

    DataParallel runs one process with a thread per GPU: it scatters inputs and replicates the
    model every step, gathers outputs on GPU 0 and is limited by the GIL.
    DistributedDataParallel (one process per GPU, overlapped all-reduce) is faster even on a
    single machine; PyTorch recommends it.

    ## Example

    ```python
    model = nn.DataParallel(model)
    ```

    ## Use instead

    ```python
    # torchrun --nproc-per-node=N train.py
    model = DistributedDataParallel(model.to(local_rank), device_ids=[local_rank])
    ```

    ## Fix safety

    No automatic fix: DDP needs a process group, a launcher and a `DistributedSampler`.
    """

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
