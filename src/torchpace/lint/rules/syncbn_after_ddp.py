"""TP504 syncbn-after-ddp-wrap (P32)."""

from __future__ import annotations

from torchpace.lint.names import dotted, positional
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DDP

CONVERT = {
    "torch.nn.SyncBatchNorm.convert_sync_batchnorm",
    "torch.nn.modules.batchnorm.SyncBatchNorm.convert_sync_batchnorm",
}


class SyncBnAfterDdpWrap(Rule):
    """## What it does

    Flags `SyncBatchNorm.convert_sync_batchnorm(m)` applied to a model that was already wrapped
    in `DistributedDataParallel` earlier in the same function.

    ## Why it matters

    DDP registers its hooks and buckets for the parameters at wrap time; converting BatchNorm
    afterwards replaces modules the wrapper already holds, so the converted layers are not what
    DDP synchronises (or the conversion has no effect on the wrapped model).

    ## Example

    ```python
    model = DDP(model, device_ids=[rank])
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    ```

    ## Use instead

    ```python
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[rank])
    ```

    ## Fix safety

    No automatic fix: the two statements may be far apart.
    """

    code = "TP504"
    message = "SyncBatchNorm conversion after the DDP wrap: convert first, then wrap"
    VALID = (
        "import torch.nn as nn\nmodel = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n"
        "model = nn.parallel.DistributedDataParallel(model)\n",
    )
    INVALID = (
        "import torch.nn as nn\nmodel = nn.parallel.DistributedDataParallel(model)\n"
        "model = nn.SyncBatchNorm.convert_sync_batchnorm(model)\n",
        "import torch\nfrom torch.nn.parallel import DistributedDataParallel as DDP\n"
        "def setup(net):\n    net = DDP(net)\n"
        "    net = torch.nn.SyncBatchNorm.convert_sync_batchnorm(net.module)\n",
    )

    def check(self, index):
        for function in index.functions:
            wrapped: set[str] = set()
            for call in function.calls:
                if call.name in DDP and call.assigned_to is not None:
                    wrapped.add(call.assigned_to)
                elif call.name in CONVERT and positional(call.node):
                    converted = dotted(positional(call.node)[0].value) or ""
                    if converted in wrapped or converted.rsplit(".", 1)[0] in wrapped:
                        yield self.finding(call.node)
