"""What a run leaves behind (issue 37, items 9 and 13): a daemon the script starts in a
session of its own is ended after the run and named; the run's output log is capped, its
head and tail kept and the cut said."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

from torchpace.capture import script_output
from torchpace.capture.runner import CaptureSpec, capture_script
from torchpace.capture.script_output import ScriptOutput
from torchpace.capture.spec import Mode
from torchpace.capture.strays import adopt_orphans, end_leftovers, ticks_now

# a daemon: a session of its own, writing into the folder until stopped
DAEMON = (
    "import os, sys, time\n"
    "open('daemon.pid', 'w').write(str(os.getpid()))\n"
    "while True:\n"
    "    open('daemon.log', 'a').write('tick\\n'); print('daemon tick', flush=True)\n"
    "    time.sleep(0.05)\n"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _wait_for(path, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (path.is_file() and path.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_daemon_in_its_own_session_is_ended_and_named(tmp_path):
    adopt_orphans()
    since = ticks_now()
    starter = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-c', {DAEMON!r}], start_new_session=True)\n"  # noqa: E501
    subprocess.run([sys.executable, "-c", starter], cwd=tmp_path, check=True, timeout=60)
    _wait_for(tmp_path / "daemon.pid")
    pid = int((tmp_path / "daemon.pid").read_text())
    assert _alive(pid)  # its parent ended: it outlived it
    named = end_leftovers(since)
    assert any(n.startswith(f"pid {pid} (") for n in named), named
    assert not _alive(pid)
    assert end_leftovers(since) == []  # nothing left


def test_a_small_log_is_kept_whole(tmp_path):
    log = ScriptOutput(tmp_path / "output.log")
    both = "import sys; print('hello'); print('err', file=sys.stderr)"
    subprocess.run([sys.executable, "-c", both], stdout=log.stdout, stderr=subprocess.STDOUT,
                   check=True)  # fmt: skip
    assert log.close() == 0
    assert (tmp_path / "output.log").read_text().split() == ["hello", "err"]


def test_a_flood_of_output_keeps_its_head_and_tail_and_says_the_cut(tmp_path):
    path = tmp_path / "output.log"
    log = ScriptOutput(path)
    flood = (
        "import sys\nsys.stdout.write('FIRST LINE\\n')\n"
        "for i in range(40):\n    sys.stdout.write(str(i) * 2**18 + '\\n')\n"  # 10 MiB
        "sys.stdout.write('THE END\\n')\n"
    )
    child = subprocess.Popen([sys.executable, "-c", flood], stdout=log.stdout)
    log.started()
    child.wait(timeout=60)
    cut = log.close()
    size = path.stat().st_size
    total = len("FIRST LINE\n") + sum(len(str(i)) * 2**18 + 1 for i in range(40)) + 8
    assert cut == total - script_output.HEAD_BYTES - script_output.TAIL_BYTES
    assert size < script_output.HEAD_BYTES + script_output.TAIL_BYTES + 500
    text = path.read_bytes()
    assert text.startswith(b"FIRST LINE\n") and text.endswith(b"THE END\n")
    assert (
        f"[torchpace: {script_output.size_text(cut)} of the script's output cut here".encode()
        in text
    )


def test_a_capture_ends_the_daemon_and_caps_the_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(script_output, "HEAD_BYTES", 2**16)
    monkeypatch.setattr(script_output, "TAIL_BYTES", 2**16)
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import subprocess, sys, torch
        subprocess.Popen([sys.executable, "-c", {DAEMON!r}], start_new_session=True)
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        for i in range(40):
            print(str(i) * 50_000)
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
        """)
    )
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    spec = CaptureSpec("train.py", [], out, mode=Mode.TIMING, warmup=2, steps=10,
                       file_guard="restore", guard_root=str(out))  # fmt: skip
    r = capture_script(spec, output=out / "output.log")
    assert r.facts.status == "complete", r.facts.error
    assert len(r.leftovers) == 1 and sys.executable in r.leftovers[0]
    assert "left 1 process running" in capsys.readouterr().err
    pid = int(next(out.rglob("daemon.pid")).read_text())
    assert not _alive(pid)
    assert not (tmp_path / "daemon.log").exists()  # created by the run: moved out, not back
    assert r.output_cut_bytes > 0
    assert (out / "output.log").stat().st_size < 2**17 + 500


def test_the_scripts_own_keyboard_interrupt_is_its_exception_not_ctrl_c(tmp_path, capfd):
    """Issue 37: a script raising KeyboardInterrupt itself was reported as Ctrl-C, without
    its traceback."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch
        m = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)

        def train_step(i):
            m(torch.randn(3, 2)).sum().backward()
            opt.step()
            if i == 3:
                raise KeyboardInterrupt("the script's own")

        for i in range(40):
            train_step(i)
        """)
    )
    out = tmp_path / "out"
    out.mkdir()
    r = capture_script(CaptureSpec(str(script), [], out, mode=Mode.TIMING, warmup=1, steps=20))
    assert r.facts.status == "script-raised" and not r.interrupted, r.facts.status
    assert "KeyboardInterrupt: the script's own" in r.facts.error
    assert 'raise KeyboardInterrupt("the script\'s own")' in capfd.readouterr().err
