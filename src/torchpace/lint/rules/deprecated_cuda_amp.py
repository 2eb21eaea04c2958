"""TP306 deprecated-cuda-amp (P19), with a safe fix.

`torch.cuda.amp.GradScaler(...)` is `torch.amp.GradScaler("cuda", ...)` with the same
defaults. `torch.cuda.amp.autocast()` passes `dtype=torch.float16, cache_enabled=True`
explicitly, where `torch.amp.autocast("cuda")` takes the process's defaults: the same unless
the program changed them with `torch.set_autocast_dtype` (or its older spellings) or
`torch.set_autocast_cache_enabled`. In a file that does, the autocast fix is unsafe.
"""

from __future__ import annotations

import libcst as cst

from torchpace.lint.edits import prepend_arg
from torchpace.lint.frameworks import AMP_BY_FRAMEWORK, framework_of
from torchpace.lint.names import keyword
from torchpace.lint.rule import SAFE, UNSAFE, Rule

DEPRECATED = {
    "torch.cuda.amp.autocast": "autocast",
    "torch.cuda.amp.autocast_mode.autocast": "autocast",
    "torch.cuda.amp.GradScaler": "GradScaler",
    "torch.cuda.amp.grad_scaler.GradScaler": "GradScaler",
}
# Process-wide autocast defaults that torch.amp.autocast reads and torch.cuda.amp.autocast
# overrides with its own (float16, cache on).
AUTOCAST_DEFAULT_SETTERS = {
    "torch.set_autocast_dtype",
    "torch.set_autocast_gpu_dtype",
    "torch.set_autocast_cache_enabled",
}


def _fixed(index, call: cst.Call, what: str) -> cst.Call | None:
    """`torch.cuda.amp.X(args)` -> `torch.amp.X("cuda", args)`, only for that exact spelling."""
    func = call.func
    if not (
        isinstance(func, cst.Attribute)
        and isinstance(func.value, cst.Attribute)
        and func.value.attr.value == "amp"
        and isinstance(func.value.value, cst.Attribute)
        and func.value.value.attr.value == "cuda"
        and index.imports.resolve(func.value.value.value) == "torch"
    ):
        return None
    if what == "autocast" and any(a.keyword is None for a in call.args):
        # torch.cuda.amp.autocast(enabled, dtype, ...) and torch.amp.autocast(device_type,
        # dtype, enabled, ...) differ in order: positional arguments would shift meaning.
        return None
    torch_root = func.value.value.value
    new_func = func.with_changes(value=cst.Attribute(value=torch_root, attr=cst.Name("amp")))
    cuda = cst.Arg(value=cst.SimpleString('"cuda"'))
    return prepend_arg(call.with_changes(func=new_func), cuda)


def _changes_autocast_defaults(index) -> bool:
    return any(call.name in AUTOCAST_DEFAULT_SETTERS for call in index.calls)


class DeprecatedCudaAmp(Rule):
    """## What it does

    Flags `torch.cuda.amp.autocast` and `torch.cuda.amp.GradScaler`, deprecated since torch 2.4
    in favour of `torch.amp.autocast("cuda")` and `torch.amp.GradScaler("cuda")`.

    ## Why it matters

    The old names emit a `FutureWarning` on every use and will be removed; the `torch.amp` API
    is the same code path, device-generic.

    ## Example

    ```python
    scaler = torch.cuda.amp.GradScaler()
    with torch.cuda.amp.autocast(dtype=torch.float16):
        loss = model(x)
    ```

    ## Use instead

    ```python
    scaler = torch.amp.GradScaler("cuda")
    with torch.amp.autocast("cuda", dtype=torch.float16):
        loss = model(x)
    ```

    ## Fix safety

    Safe fix for calls spelled `torch.cuda.amp.autocast(...)` /
    `torch.cuda.amp.GradScaler(...)`: rewritten to `torch.amp.autocast("cuda", ...)` /
    `torch.amp.GradScaler("cuda", ...)` with the arguments kept. `GradScaler` has the same
    defaults under both names. `torch.cuda.amp.autocast` passes `dtype=torch.float16,
    cache_enabled=True` itself, where `torch.amp.autocast("cuda")` reads the process's autocast
    defaults: the same values unless the program changes them with `torch.set_autocast_dtype` or
    `torch.set_autocast_cache_enabled`. In a file that calls those, the autocast fix is
    **unsafe** (the message says so); a program that calls them from another module is beyond
    what one file shows. Names imported with `from torch.cuda.amp import ...` and `autocast`
    called with positional arguments (whose order differs between the two APIs) are reported
    without a fix.

    ## Under a framework

    In a Lightning, Accelerate or HF Trainer script, AMP is a setting of the framework rather
    than autocast by hand; the message adds it: `Trainer(precision="bf16-mixed")`,
    `Accelerator(mixed_precision="bf16")`, `TrainingArguments(bf16=True)`. The automatic fix
    still only renames the API.
    """

    code = "TP306"
    message = "torch.cuda.amp is deprecated"
    fix_title = 'use torch.amp with device "cuda"'
    fix_safety = SAFE
    VALID = (
        "import torch\nwith torch.amp.autocast('cuda'):\n    pass\n",
        "import torch\nscaler = torch.amp.GradScaler('cuda')\n",
    )
    INVALID = (
        "import torch\nwith torch.cuda.amp.autocast(dtype=torch.float16):\n    pass\n",
        "from torch.cuda.amp import GradScaler\nscaler = GradScaler()\n",
    )

    def check(self, index):
        framework = framework_of(index)
        for call in index.calls:
            what = DEPRECATED.get(call.name or "")
            if what is None:
                continue
            message = f'{self.message}: use torch.amp.{what}("cuda", ...)'
            if framework in AMP_BY_FRAMEWORK:  # AMP by hand where the framework has a setting
                message += f"; or {AMP_BY_FRAMEWORK[framework]}"
            fixed = _fixed(index, call.node, what)
            safety = None
            if (
                fixed is not None
                and what == "autocast"
                and (
                    keyword(call.node, "dtype") is None
                    or keyword(call.node, "cache_enabled") is None
                )
                and _changes_autocast_defaults(index)
            ):
                safety = UNSAFE
                message += (
                    " (the fix is unsafe here: this file changes the autocast defaults, which "
                    "torch.amp.autocast reads and torch.cuda.amp.autocast overrides)"
                )
            yield self.finding(call.node, message, call.node if fixed else None, fixed, safety)
