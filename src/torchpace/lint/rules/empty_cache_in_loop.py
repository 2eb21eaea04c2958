"""TP402 empty-cache-in-loop (P22)."""

from __future__ import annotations

from torchpace.lint.rule import Rule
from torchpace.lint.training import under_interval

EMPTY_CACHE = {"torch.cuda.empty_cache", "torch.cuda.memory.empty_cache"}


class EmptyCacheInLoop(Rule):
    """## What it does

    Flags `torch.cuda.empty_cache()` inside a `for`/`while` loop.

    ## Why it matters

    `empty_cache` returns the caching allocator's free blocks to the driver; the next
    allocations must then call `cudaMalloc` again, which is slow and synchronising. Called every
    step it slows training and does not fix a real leak (usually a tensor kept alive, see
    TP401).

    ## Example

    ```python
    for x, y in loader:
        train_step(x, y)
        torch.cuda.empty_cache()
    ```

    ## Use instead

    ```python
    for x, y in loader:
        train_step(x, y)
    # if needed at all: once, e.g. between training and evaluation
    torch.cuda.empty_cache()
    ```

    ## Fix safety

    No automatic fix.
    """

    code = "TP402"
    message = "torch.cuda.empty_cache() inside a loop makes the allocator start over each time"
    VALID = (
        "import torch\nfor x in loader:\n    step(x)\ntorch.cuda.empty_cache()\n",
        "import torch\nfor i, x in enumerate(loader):\n    if i % 1000 == 0:\n"
        "        torch.cuda.empty_cache()\n",
    )
    INVALID = (
        "import torch\nfor x in loader:\n    step(x)\n    torch.cuda.empty_cache()\n",
        "from torch.cuda import empty_cache\nwhile True:\n    empty_cache()\n",
    )

    def check(self, index):
        outer_loops = {id(loop.parent) for loop in index.loops if loop.parent is not None}
        for call in index.calls:
            if call.name not in EMPTY_CACHE or not call.loops:
                continue
            loop = call.loops[-1]
            # Once per epoch (a loop around the batch loop) costs nothing worth reporting.
            if id(loop) not in outer_loops and not under_interval(call, loop):
                yield self.finding(call.node)
