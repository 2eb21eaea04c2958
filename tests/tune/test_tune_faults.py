"""`torchpace tune` when things go wrong around it (issue 37): the terminal closed (SIGHUP),
a second tune in the same folder, the tune itself killed with SIGKILL. Real processes on a
tiny CPU script that overwrites its checkpoint in the doctor's phase and then waits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
ORIGINAL = b"the user's checkpoint" * 100

# Overwrites ckpt.pt at its second step, then sleeps: the changed file stays on disk while
# the tune is sent whatever the test sends it.
SCRIPT = textwrap.dedent(
    """
    import time
    import torch
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(1000):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        if step == 1:
            with open("ckpt.pt", "wb") as f:
                f.write(b"trial")
            time.sleep(600)
    """
)


def _project(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "ckpt.pt").write_bytes(ORIGINAL)
    return tmp_path


def _start_tune(folder: Path, *extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "torchpace", "tune", "--warmup", "2", "--steps", "4",
         "--trial-timeout", "120", *extra, "train.py"],
        cwd=folder, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip


def _wait_for_the_change(folder: Path, proc: subprocess.Popen, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline and proc.poll() is None:
        if (folder / "ckpt.pt").read_bytes() == b"trial":
            return
        time.sleep(0.1)
    raise AssertionError(f"the script never wrote ckpt.pt: {proc.poll()}")


def _processes_in(folder: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(folder).encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_sighup_restores_the_files_ends_the_child_and_exits_129(tmp_path):
    """Seen: a closed terminal ended tune in 0.16 s with exit 129, no report, the trial
    orphaned and still writing, the user's file left overwritten."""
    folder = _project(tmp_path)
    proc = _start_tune(folder, "--out", str(folder / "run"))
    try:
        _wait_for_the_change(folder, proc)
        proc.send_signal(signal.SIGHUP)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGHUP, output
    assert (folder / "ckpt.pt").read_bytes() == ORIGINAL
    assert "interrupted" in output
    assert _processes_in(folder / "run") == [], "the script outlived tune"
