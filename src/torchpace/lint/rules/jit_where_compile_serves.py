"""TP309 jit-where-compile-serves (P21), informational."""

from __future__ import annotations

from torchpace.lint.names import dotted
from torchpace.lint.rule import Rule

JIT = {"torch.jit.script", "torch.jit.trace"}


class JitWhereCompileServes(Rule):
    """## What it does

    Flags `torch.jit.script` and `torch.jit.trace` (calls and decorators). Informational. Silent
    in a file that exports with TorchScript (`torch.jit.save`, `.save(...)` of the scripted
    module, `torch.jit.freeze`) or uses custom TorchScript classes or operators
    (`torch.classes.load_library(...)`, `torch.ops.load_library(...)`), which only TorchScript
    runs.

    ## Why it matters

    TorchScript is in maintenance mode; `torch.compile` fuses more (Inductor/Triton kernels),
    handles Python control flow through graph breaks and is where performance work happens.
    TorchScript still has a place for export to C++ runtimes.

    ## Example

    ```python
    model = torch.jit.script(model)
    ```

    ## Use instead

    ```python
    model = torch.compile(model)
    ```

    ## Fix safety

    No automatic fix: `torch.compile` needs a compiler toolchain, pays a compile time and is not
    an export format.
    """

    code = "TP309"
    message = "torch.jit compiles for export; for speed torch.compile serves"
    VALID = (
        "import torch\nmodel = torch.compile(model)\n",
        "import torch\nm = torch.jit.trace(model, x)\ntorch.jit.save(m, 'model.pt')\n",
        "import torch\nm = torch.jit.script(model)\nm.save('model.pt')\n",
        "import torch\ntorch.classes.load_library('build/libinterp.so')\n"
        "scripted = torch.jit.script(lowered)\n",
    )
    INVALID = (
        "import torch\nmodel = torch.jit.script(model)\n",
        "import torch\n@torch.jit.script\ndef gelu(x):\n    return x * 0.5\n",
    )

    def check(self, index):
        if self._exports(index):
            return  # TorchScript for a C++/mobile runtime is what it is still for
        for call in index.calls:
            if call.name in JIT:
                yield self.finding(call.node, f"{self.message} (informational)")
        for function in index.functions:
            for decorator, name in function.decorators:
                if name in JIT:
                    yield self.finding(decorator, f"{self.message} (informational)")

    @staticmethod
    def _exports(index) -> bool:
        """TorchScript for a C++ runtime: saved, frozen, or calling custom TorchScript classes
        and operators (`torch.classes.load_library(...)`), which only TorchScript can run."""
        jitted = {c.assigned_to for c in index.calls if c.name in JIT and c.assigned_to}
        return any(
            c.name in ("torch.jit.save", "torch.jit.freeze")
            or (c.name or "").startswith(("torch.classes.", "torch.ops.load_library"))
            or (c.method == "save" and _dotted_receiver(c) in jitted)
            for c in index.calls
        )


def _dotted_receiver(call) -> str | None:
    return dotted(call.receiver)
