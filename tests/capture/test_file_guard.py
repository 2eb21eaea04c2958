"""The audit hook and the restore (capture/file_guard.py, file_restore.py) on every kind of
write a training script makes, in a real Python process, without a capture around it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from torchpace.capture.file_guard import Guard, scope_for
from torchpace.capture.file_restore import CREATED, Snapshot, settle

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent(
    """
    import os, shutil, subprocess, sys
    import torch
    from torchpace.capture.file_guard import Guard, install, scope_for

    install(Guard(sys.argv[1]), sys.argv[2], scope_for("train.py", False, sys.argv[3]))
    with open("train.log", "a") as f:
        f.write("appended\\n")
    torch.save({"step": 99}, "ckpt.pt")  # C++ opens the path: wrapped to be seen
    torch.save({"step": 98}, "model.pt.tmp")
    os.replace("model.pt.tmp", "model.pt")  # a temporary file renamed over a checkpoint
    os.remove("old.txt")
    os.truncate("trunc.bin", 1)
    shutil.rmtree("data")
    os.makedirs("out/sub", exist_ok=True)
    with open("out/sub/new.txt", "w") as f:
        f.write("new")
    os.rename("src.txt", "dst.txt")
    os.utime("touched.txt")
    os.chmod("mode.txt", 0o600)
    with open("state/state.pt", "wb") as f:  # a folder that existed: its time changes
        f.write(b"later")
    # writes Python cannot see: a subprocess appends to one file and creates another
    subprocess.run(["sh", "-c", "echo c >> shell.txt; echo n > shell_new.txt"], check=True)
    if sys.argv[4] == "kill":
        os.kill(os.getpid(), 9)  # the parent restores from the manifest all the same
    """
)


def _tree(root: Path, skip: Path) -> dict:
    """Every file's bytes, mode and time and every folder's time, under root."""
    state = {}
    for folder, _dirs, files in os.walk(root):
        if Path(folder) == skip or skip in Path(folder).parents:
            continue
        st = os.stat(folder)
        state[folder] = ("dir", st.st_mtime_ns)
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            state[path] = (Path(path).read_bytes(), st.st_mtime_ns, st.st_mode)
    return state


def _user_folder(tmp_path: Path) -> tuple[Path, Path]:
    user = tmp_path / "project"
    (user / "data" / "nested").mkdir(parents=True)
    (user / "state").mkdir()
    (user / "out").mkdir()
    for name, text in [("train.py", "print()\n"), ("train.log", "step 1\n"),
                       ("old.txt", "old"), ("trunc.bin", "0123456789"), ("src.txt", "src"),
                       ("touched.txt", "t"), ("mode.txt", "m"), ("shell.txt", "s\n"),
                       ("data/a.bin", "a"), ("data/nested/b.bin", "b"),
                       ("state/state.pt", "earlier")]:  # fmt: skip
        (user / name).write_text(text)
    import torch

    torch.save({"step": 5}, user / "ckpt.pt")
    torch.save({"step": 5}, user / "model.pt")
    # times in the past, so that a rewrite within the same second still shows
    for path in sorted(user.rglob("*"), key=lambda p: -len(p.parts)):
        os.utime(path, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    os.utime(user, ns=(1_600_000_000_000_000_000, 1_600_000_000_000_000_000))
    run = user / "torchpace-runs" / "r1"
    run.mkdir(parents=True)
    return user, run


def _write(user: Path, run: Path, mode: Guard, end: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-c", WRITER, str(mode), str(run), str(run), end],
        cwd=user, env=env, capture_output=True, text=True, timeout=120,
    ).returncode  # fmt: skip


@pytest.mark.parametrize("end", ["exit", "kill"])
def test_restore_leaves_the_folder_as_it_was(tmp_path, monkeypatch, end):
    user, run = _user_folder(tmp_path)
    monkeypatch.chdir(user)
    before_state = _tree(user, user / "torchpace-runs")
    scope = scope_for("train.py", False, str(run))
    before = Snapshot.take(scope.user_roots, scope.excluded_inside())
    code = _write(user, run, Guard.RESTORE, end)
    assert code == (-9 if end == "kill" else 0)
    assert (user / "ckpt.pt").read_bytes() != before_state[str(user / "ckpt.pt")][0]
    touched = settle(run, Guard.RESTORE, before)
    after_state = _tree(user, user / "torchpace-runs")
    # byte-identical, same times and modes, no file more or less (folders' times too)
    assert after_state.keys() == before_state.keys()
    for path, was in before_state.items():
        if path != str(user / "shell.txt"):  # written by a subprocess: cannot be put back
            assert after_state[path] == was, path
    assert str(user / "shell.txt") in touched.unwatched
    changed = {os.path.relpath(p, user) for p in touched.changed}
    assert {"train.log", "ckpt.pt", "model.pt", "old.txt", "trunc.bin", "data", "src.txt",
            "touched.txt", "mode.txt", "state/state.pt"} <= changed  # fmt: skip
    created = {os.path.relpath(p, user) for p in touched.created}
    assert {"out/sub", "dst.txt", "shell_new.txt"} <= created, created
    # what the run created is kept in its folder, under the same relative path
    assert (run / CREATED / "out" / "sub" / "new.txt").read_text() == "new"
    assert (run / CREATED / "dst.txt").read_text() == "src"
    assert (run / CREATED / "shell_new.txt").is_file()


def test_report_lists_what_was_written_and_leaves_it(tmp_path, monkeypatch):
    user, run = _user_folder(tmp_path)
    monkeypatch.chdir(user)
    scope = scope_for("train.py", False, str(run))
    before = Snapshot.take(scope.user_roots, scope.excluded_inside())
    assert _write(user, run, Guard.REPORT, "exit") == 0
    touched = settle(run, Guard.REPORT, before)
    assert not touched.restored
    assert not (user / "old.txt").exists() and (user / "dst.txt").is_file()  # as the script left
    listed = {os.path.relpath(p, user) for p in touched.changed + touched.created}
    assert {"train.log", "ckpt.pt", "model.pt", "old.txt", "dst.txt", "out/sub"} <= listed
    assert str(user / "shell.txt") in touched.unwatched


def test_the_scope_guards_a_project_under_tmp_but_not_the_run_folder_or_caches(tmp_path):
    user = tmp_path / "project"
    user.mkdir()
    run = user / "torchpace-runs" / "r1"
    scope = scope_for(str(user / "train.py"), False, str(run))
    assert scope.guarded(str(user / "ckpt.pt"))
    assert not scope.guarded(str(run / "trials" / "00" / "run_facts.json"))
    assert not scope.guarded(str(user / "torchpace-runs" / "other-run" / "x"))  # another run's
    assert not scope.guarded(os.path.join(os.path.expanduser("~"), ".cache", "torch", "x"))
    assert not scope.guarded("/proc/self/status")
    assert scope.guarded("/data/elsewhere/checkpoint.pt")  # an absolute path is the user's too
