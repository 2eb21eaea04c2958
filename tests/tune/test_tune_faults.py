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
    import time, torch
    net, data = torch.nn.Linear(4, 1), torch.randn(8, 4)
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    step = 0
    while True:
        net(data).sum().backward(); sgd.step(); step += 1
        if step == 2:
            open("ckpt.pt", "wb").write(b"trial")
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


def test_a_second_tune_in_the_same_folder_is_refused_naming_the_first(tmp_path):
    """Seen: two tunes in one folder lost the originals of ckpt.pt while both said "each
    put back as it was"."""
    folder = _project(tmp_path)
    first = _start_tune(folder, "--out", str(folder / "run1"))
    try:
        _wait_for_the_change(folder, first)
        second = subprocess.run(
            [sys.executable, "-m", "torchpace", "tune", "--out", str(folder / "run2"),
             "train.py"],
            cwd=folder, env=ENV, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        first.send_signal(signal.SIGTERM)
        first.communicate(timeout=60)
    finally:
        first.kill()
    assert second.returncode == 2, second.stderr
    assert f"another tune (PID {first.pid}) is running in {folder}" in second.stderr
    assert not (folder / "run2").exists()
    assert (folder / "ckpt.pt").read_bytes() == ORIGINAL


def test_after_kill_9_the_next_command_in_the_folder_puts_the_files_back(tmp_path):
    """Seen: after `kill -9` the changed file stayed changed, nothing pointed to the
    original, and the next tune took the damaged file for the user's."""
    folder = _project(tmp_path)
    tune = _start_tune(folder)  # the default run folder: torchpace-runs/<timestamp>/
    try:
        _wait_for_the_change(folder, tune)
        tune.kill()
        tune.wait(timeout=30)
    finally:
        tune.kill()
    assert (folder / "ckpt.pt").read_bytes() == b"trial"
    journal = folder / "torchpace-runs" / "unfinished.json"
    assert journal.is_file()
    later = subprocess.run(
        [sys.executable, "-m", "torchpace", "env"],
        cwd=folder, env=ENV, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert later.returncode == 0, later.stderr
    assert f"a tune (PID {tune.pid}) ended without putting your files back" in later.stderr
    assert "ckpt.pt" in later.stderr
    assert (folder / "ckpt.pt").read_bytes() == ORIGINAL
    assert not journal.exists()
    assert [p for p in _processes_in(folder) if p != os.getpid()] == [], "left running"
    # the version found is kept, not lost
    kept = list((folder / "torchpace-runs").glob("*/doctor/files_replaced/ckpt.pt"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"trial"
