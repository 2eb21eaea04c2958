"""A misbehaving script under `torchpace doctor`: killed by a signal, blocked in a system call,
reading its standard input, writing its folder, or the verb itself sent SIGTERM. Real
processes on tiny CPU scripts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

LOOP = """
import os, sys, time
import torch
from torch import nn
model = nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 4), torch.randn(8, 1)
for step in range(1000):
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    {at_step}
"""


def script(tmp_path: Path, at_step: str, before: str = "") -> Path:
    path = tmp_path / "train.py"
    body = LOOP.format(at_step=textwrap.indent(textwrap.dedent(at_step), " " * 4).strip())
    path.write_text(textwrap.dedent(before) + body)
    return path


def doctor(tmp_path: Path, *options: str, stdin=None, timeout: float = 180):
    return subprocess.run(
        [sys.executable, "-m", "torchpace", "doctor", "--out", str(tmp_path / "run"),
         "--warmup", "5", "--steps", "3", *options, "train.py"],
        cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=timeout, stdin=stdin,
    )  # fmt: skip


@pytest.mark.slow
def test_a_segfault_exits_139_and_is_named(tmp_path):
    script(tmp_path, "if step == 2: os.kill(os.getpid(), 11)")
    proc = doctor(tmp_path)
    assert proc.returncode == 139, proc.stderr  # 128 + 11, not 245
    assert "killed by SIGSEGV (signal 11: a crash in native code)" in proc.stderr


@pytest.mark.slow
def test_a_script_blocked_in_a_system_call_is_stopped_at_its_timeout_and_said_to_hang(tmp_path):
    script(tmp_path, "if step == 2: time.sleep(3600)")
    start = time.monotonic()
    proc = doctor(tmp_path, "--timeout", "40")
    took = time.monotonic() - start
    assert proc.returncode == 1, proc.stderr
    assert "timed out: no more steps within --timeout 40" in proc.stderr, proc.stderr
    assert "ended with" not in proc.stderr and "exited" not in proc.stderr
    # the watchdog's signal wakes the sleeping main thread, 40 s after the child started:
    # not the parent's backstop 30 s later
    assert took < 40 + 25, took
    facts = json.loads((tmp_path / "run" / "run_facts.json").read_text())
    assert facts["status"] == "timeout"


@pytest.mark.slow
def test_a_script_reading_stdin_gets_an_empty_input_and_is_told(tmp_path):
    script(tmp_path, "", before="answer = input('epochs? ')\n")
    # an open pipe nobody writes to: before, the script waited on it forever
    with subprocess.Popen(["sleep", "300"], stdout=subprocess.PIPE) as silent:
        proc = doctor(tmp_path, stdin=silent.stdout, timeout=120)
        silent.kill()
    assert proc.returncode == 1, proc.stderr
    facts = json.loads((tmp_path / "run" / "run_facts.json").read_text())
    assert "EOFError" in facts["error"]
    assert "the script reads its standard input" in facts["error"]


@pytest.mark.slow
def test_the_doctor_lists_what_the_script_wrote_and_leaves_it(tmp_path):
    (tmp_path / "train.log").write_text("before\n")
    script(tmp_path, """
        with open("train.log", "a") as f:
            f.write("step\\n")
        torch.save(model.state_dict(), "ckpt.pt")
    """)  # fmt: skip
    proc = doctor(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "the script wrote 2 files outside the run folder: " in proc.stderr, proc.stderr
    assert "train.log" in proc.stderr and "ckpt.pt" in proc.stderr
    assert (tmp_path / "ckpt.pt").is_file()  # the doctor runs it as the user would
    assert (tmp_path / "train.log").read_text().startswith("before\nstep\n")
    report = json.loads((tmp_path / "run" / "doctor_report.json").read_text())
    assert report["files"]["changed"] == [str(tmp_path / "train.log")]
    assert report["files"]["created"] == [str(tmp_path / "ckpt.pt")]


def processes_mentioning(text: str) -> list[int]:
    """Processes whose command line holds ``text`` (the run folder: the capture child and its
    forked DataLoader workers carry the spec's path)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
def test_sigterm_stops_the_doctor_and_its_dataloader_workers(tmp_path):
    script(
        tmp_path,
        "for batch in loader: pass\nif step == 2: time.sleep(3600)",
        before="""
        import torch.utils.data as data
        loader = data.DataLoader(data.TensorDataset(__import__("torch").randn(64, 4)),
                                 batch_size=8, num_workers=2, persistent_workers=True)
        """,
    )
    run = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "torchpace", "doctor", "--out", str(run), "--warmup", "5",
         "--steps", "3", "train.py"],
        cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(processes_mentioning(str(run))) < 3:
            time.sleep(0.5)  # the child and its two workers
        assert len(processes_mentioning(str(run))) >= 3, "the workers never started"
        time.sleep(2.0)  # in the sleep now
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, output
    assert "interrupted" in output
    assert processes_mentioning(str(run)) == [], "a child or worker outlived the doctor"
    assert (run / "run_facts.json").is_file()
