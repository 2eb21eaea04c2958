"""TP503 find-unused-parameters (P30)."""

from __future__ import annotations

from torchpace.lint.names import is_true, keyword
from torchpace.lint.rule import Rule
from torchpace.lint.rules._names import DDP


class FindUnusedParameters(Rule):
    """## What it does

    Flags `DistributedDataParallel(..., find_unused_parameters=True)`.

    ## Why it matters

    With it, DDP traverses the autograd graph after every forward to find parameters that got no
    gradient, and it delays the reduction of buckets; it costs time every step and is only
    needed when some parameters are really unused in a forward.

    ## Example

    ```python
    model = DDP(model, device_ids=[rank], find_unused_parameters=True)
    ```

    ## Use instead

    ```python
    model = DDP(model, device_ids=[rank])  # only set it when DDP errors about unused parameters
    ```

    ## Fix safety

    No automatic fix: removing it makes DDP raise if some parameters really are unused.
    """

    code = "TP503"
    message = "find_unused_parameters=True makes DDP walk the autograd graph every step"
    VALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\nDDP(model)\n",
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "DDP(model, find_unused_parameters=args.unused)\n",
    )
    INVALID = (
        "from torch.nn.parallel import DistributedDataParallel as DDP\n"
        "DDP(model, device_ids=[0], find_unused_parameters=True)\n",
        "import torch\ntorch.nn.parallel.DistributedDataParallel(m, find_unused_parameters=True)\n",
    )

    def check(self, index):
        for call in index.calls:
            if call.name in DDP:
                arg = keyword(call.node, "find_unused_parameters")
                if arg is not None and is_true(arg.value):
                    yield self.finding(arg)
