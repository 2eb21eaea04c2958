"""The child's runtime (capture/runtime.py) among other global hooks: it stops finding
models at the second optimizer step from inside its own step post-hook, while torch iterates
over every global one. Run in a fresh process: global hooks outlive a test."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT

CHILD = """
import torch
from torch.optim.optimizer import _global_optimizer_post_hooks, register_optimizer_step_post_hook
from torchpace.capture.runtime import ChildRuntime

runtime = ChildRuntime()
runtime.install()
seen = []
# registered after the runtime's: torch's loop reaches it after the runtime's hook has run
register_optimizer_step_post_hook(lambda opt, args, kwargs: seen.append(len(seen)))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(4):
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
assert seen == [0, 1, 2, 3], seen
assert runtime.model is model
assert not torch.nn.modules.module._global_forward_pre_hooks  # the finder is gone
print("ok", len(_global_optimizer_post_hooks))
"""


def test_a_hook_registered_after_the_runtimes_survives_the_finder_stopping():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["ok", "2"]  # the runtime's idle hook and the script's
