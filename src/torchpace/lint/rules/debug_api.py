"""TP304 debug-api-in-training (P13)."""

from __future__ import annotations

from torchpace.lint.names import argument, is_true
from torchpace.lint.rule import Rule
from torchpace.lint.training import file_trains

# Always a debug tool when called: these check or record every op.
ALWAYS = {
    "torch.autograd.detect_anomaly": "anomaly detection",
    "torch.autograd.anomaly_mode.detect_anomaly": "anomaly detection",
    "torch.autograd.profiler.emit_nvtx": "emit_nvtx",
    "torch.autograd.gradcheck": "gradcheck",
    "torch.autograd.gradgradcheck": "gradgradcheck",
    "torch.autograd.gradcheck.gradcheck": "gradcheck",
}
# On only when their first argument says so.
SWITCHED = {
    "torch.autograd.set_detect_anomaly": ("mode", "anomaly detection"),
    "torch.autograd.anomaly_mode.set_detect_anomaly": ("mode", "anomaly detection"),
    "torch.autograd.profiler.profile": ("enabled", "the autograd profiler"),
}


class DebugApiInTraining(Rule):
    """## What it does

    Flags `torch.autograd.set_detect_anomaly(True)`, `torch.autograd.detect_anomaly()`,
    `torch.autograd.profiler.profile/record_function`, `torch.autograd.profiler.emit_nvtx()`,
    `torch.autograd.gradcheck/gradgradcheck` in files that train (call `.backward()` or
    `.step()`).

    ## Why it matters

    Anomaly detection records a stack trace for every op and checks every backward output for
    NaN; the autograd profiler and NVTX ranges add per-op overhead. Left on, they slow training
    several-fold.

    ## Example

    ```python
    torch.autograd.set_detect_anomaly(True)
    for x, y in loader:
        loss = criterion(model(x), y)
        loss.backward()
        optimizer.step()
    ```

    ## Use instead

    ```python
    # enable anomaly detection only while debugging, behind a flag
    if args.debug:
        torch.autograd.set_detect_anomaly(True)
    ```

    ## Fix safety

    No automatic fix. A call inside an `if` (e.g. behind a debug flag) is not flagged.
    """

    code = "TP304"
    message = "debug API left on in training code"
    VALID = (
        "import torch\nif args.debug:\n    torch.autograd.set_detect_anomaly(True)\n"
        "loss.backward()\noptimizer.step()\n",
        "import torch\ntorch.autograd.set_detect_anomaly(False)\nloss.backward()\n"
        "optimizer.step()\n",
        "import torch\ntorch.autograd.set_detect_anomaly(True)\n",
    )
    INVALID = (
        "import torch\ntorch.autograd.set_detect_anomaly(True)\n"
        "for x in loader:\n    loss = f(x)\n    loss.backward()\n    optimizer.step()\n",
        "import torch\nwith torch.autograd.detect_anomaly():\n    loss.backward()\n"
        "    optimizer.step()\n",
    )

    def check(self, index):
        if not file_trains(index):
            return
        for call in index.calls:
            if call.guards:
                continue  # behind an `if`: a debug switch, not left on
            what = ALWAYS.get(call.name or "")
            if what is None and call.name in SWITCHED:
                parameter, label = SWITCHED[call.name]
                known, value = argument(call.node, parameter, 0)
                if parameter == "enabled" and known and value is None:
                    what = label  # profile() is enabled by default
                elif is_true(value):
                    what = label
            if what is not None:
                yield self.finding(call.node, f"{self.message}: {what} slows every step")
