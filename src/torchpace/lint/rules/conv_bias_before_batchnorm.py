"""TP302 conv-bias-before-batchnorm (P08), with an unsafe fix."""

from __future__ import annotations

import itertools

import libcst as cst

from torchpace.lint.edits import append_arg, keyword_arg
from torchpace.lint.names import argument
from torchpace.lint.rule import UNSAFE, Rule

SEQUENTIAL = {"torch.nn.Sequential", "torch.nn.modules.container.Sequential"}
CONVS = {f"torch.nn.Conv{d}d" for d in (1, 2, 3)}
BATCHNORMS = {f"torch.nn.BatchNorm{d}d" for d in (1, 2, 3)} | {"torch.nn.SyncBatchNorm"}
# Conv2d(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias, ...)
BIAS_POSITION = 7


class ConvBiasBeforeBatchNorm(Rule):
    """## What it does

    Flags a `ConvNd` with a bias (the default) directly followed by a `BatchNormNd` in an
    `nn.Sequential`.

    ## Why it matters

    BatchNorm subtracts the per-channel mean, so the conv bias is cancelled exactly: it costs an
    extra add and parameters and gradient traffic for nothing.

    ## Example

    ```python
    nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
    ```

    ## Use instead

    ```python
    nn.Sequential(nn.Conv2d(64, 128, 3, padding=1, bias=False), nn.BatchNorm2d(128), nn.ReLU())
    ```

    ## Fix safety

    Unsafe fix (`--unsafe-fixes`): adds `bias=False`. It changes the parameter set, so existing
    checkpoints no longer load as they are (`strict=True` fails on the unexpected `bias` keys).
    """

    code = "TP302"
    message = "conv bias is cancelled by the BatchNorm that follows it"
    fix_title = "pass bias=False to the conv (changes the parameter set: checkpoints differ)"
    fix_safety = UNSAFE
    VALID = (
        "import torch.nn as nn\nnn.Sequential(nn.Conv2d(3, 8, 3, bias=False), nn.BatchNorm2d(8))",
        "import torch.nn as nn\nnn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.BatchNorm2d(8))",
        "import torch.nn as nn\nnn.Sequential(nn.Conv2d(3, 8, 3, **kw), nn.BatchNorm2d(8))",
    )
    INVALID = (
        "import torch.nn as nn\nnn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8))",
        "from torch import nn\nnn.Sequential(nn.Conv1d(3, 8, 3, bias=True), nn.BatchNorm1d(8))",
    )

    def check(self, index):
        resolve = index.imports.resolve
        for call in index.calls:
            if call.name not in SEQUENTIAL or any(a.star for a in call.node.args):
                continue
            layers = [a.value for a in call.node.args if a.keyword is None]
            for conv, following in itertools.pairwise(layers):
                if not (isinstance(conv, cst.Call) and isinstance(following, cst.Call)):
                    continue
                if resolve(conv.func) not in CONVS or resolve(following.func) not in BATCHNORMS:
                    continue
                known, bias = argument(conv, "bias", BIAS_POSITION)
                if not known or not (bias is None or _is_true(bias)):
                    continue
                if bias is None:
                    fixed = append_arg(conv, keyword_arg("bias", cst.Name("False")))
                else:
                    fixed = _set_bias_false(conv, bias)
                yield self.finding(conv, self.message, conv, fixed)


def _is_true(expr) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _set_bias_false(conv: cst.Call, bias: cst.BaseExpression) -> cst.Call:
    """`bias=True` or a positional True becomes False, where it is."""
    args = [a.with_changes(value=cst.Name("False")) if a.value is bias else a for a in conv.args]
    return conv.with_changes(args=args)
