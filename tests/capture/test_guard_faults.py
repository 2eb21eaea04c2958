"""The folder guarantee when things go wrong (issue 37): a write through a symbolic link, a
backup that cannot be written (a full disk), a write the system refused, hard links. Each
in a real Python process with the audit hook installed, then the parent's settle()."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from torchpace.capture.file_guard import MANIFEST, Guard, scope_for
from torchpace.capture.file_restore import Snapshot, settle
from torchpace.capture.files_report import files_lines

ROOT = Path(__file__).resolve().parents[2]
PAST_NS = 1_600_000_000_000_000_000

PRELUDE = textwrap.dedent(
    """
    import errno, os, shutil, sys
    from torchpace.capture.file_guard import Guard, install, scope_for
    if sys.argv[3] == "full":  # the disk is full: every copy aside fails
        def _full(*args, **kwargs):
            raise OSError(errno.ENOSPC, "No space left on device")
        shutil.copy2 = _full
    install(Guard(sys.argv[1]), sys.argv[2], scope_for("train.py", False, sys.argv[2]))
    """
)


def _project(tmp_path: Path) -> tuple[Path, Path]:
    user = tmp_path / "project"
    user.mkdir()
    (user / "train.py").write_text("print()\n")
    run = user / "torchpace-runs" / "r1"
    run.mkdir(parents=True)
    return user, run


def _age(*paths: Path) -> None:
    for path in paths:
        os.utime(path, ns=(PAST_NS, PAST_NS), follow_symlinks=False)


def _run(user: Path, run: Path, body: str, mode: Guard = Guard.RESTORE, fault: str = "none"):
    before = _snapshot(run)
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body), str(mode), str(run), fault],
        cwd=user, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    return proc, settle(run, mode, before)


def _snapshot(run: Path) -> Snapshot:
    scope = scope_for("train.py", False, str(run))
    return Snapshot.take(scope.user_roots, scope.excluded_inside())


def test_a_write_through_a_link_saves_and_restores_what_it_points_to(tmp_path, monkeypatch):
    """Seen: link.txt -> a file outside the folder; the target overwritten, only the link
    saved, and tune said "each put back as it was"."""
    user, run = _project(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "target.txt"
    target.write_text("the user's data")
    (user / "link.txt").symlink_to(target)
    (user / "chained.txt").symlink_to(user / "link.txt")  # a link to the link
    _age(target, user / "link.txt", user / "chained.txt")
    monkeypatch.chdir(user)
    proc, touched = _run(user, run, """
        with open("chained.txt", "w") as f:
            f.write("trial")
        os.truncate("link.txt", 2)
    """)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert target.read_text() == "the user's data"
    assert os.stat(target).st_mtime_ns == PAST_NS
    assert os.readlink(user / "link.txt") == str(target)  # the links stay links
    assert os.readlink(user / "chained.txt") == str(user / "link.txt")
    assert str(target) in touched.changed and touched.restored
    assert f"{user / 'chained.txt'} -> {target}" in touched.links
    said = "\n".join(files_lines(touched))
    assert "written through a symbolic link" in said and "chained.txt -> " in said


def test_a_link_in_report_mode_is_named(tmp_path, monkeypatch):
    user, run = _project(tmp_path)
    target = tmp_path / "target.txt"
    target.write_text("x")
    (user / "link.txt").symlink_to(target)
    monkeypatch.chdir(user)
    _proc, touched = _run(user, run, "open('link.txt', 'a').write('y')\n", mode=Guard.REPORT)
    assert target.read_text() == "xy"  # the doctor leaves what the script did
    assert str(target) in touched.changed
    assert "the script wrote through 1 symbolic links" in "\n".join(files_lines(touched))


def test_a_backup_that_cannot_be_written_refuses_the_write(tmp_path, monkeypatch):
    """Seen: on a nearly full disk a 700 KB checkpoint became 135 KB, tune went on (exit 0)
    and said both "put back as it was" and "NOT restored" (restored: true)."""
    user, run = _project(tmp_path)
    ckpt = user / "ckpt.pt"
    ckpt.write_bytes(b"original" * 1000)
    _age(ckpt)
    monkeypatch.chdir(user)
    proc, touched = _run(user, run, """
        try:
            with open("ckpt.pt", "wb") as f:
                f.write(b"trial")
        except OSError as e:
            print("refused:", e.errno, e)
        with open("ckpt.pt", "ab") as f:  # a second try: refused again
            f.write(b"more")
    """, fault="full")  # fmt: skip
    assert proc.returncode != 0
    assert f"refused: {errno.ENOSPC}" in proc.stdout
    assert "torchpace refused this write" in proc.stderr  # the second, unhandled
    assert ckpt.read_bytes() == b"original" * 1000 and os.stat(ckpt).st_mtime_ns == PAST_NS
    assert touched.refused and touched.refused[0].startswith(str(ckpt))
    assert str(ckpt) not in touched.changed
    assert touched.restored is False and touched.to_dict()["restored"] is False
    said = "\n".join(files_lines(touched))
    assert "NOT changed" in said and "stopped the tune" in said
    assert "put back as it was" not in said
    leftovers = [p.name for p in (run / "files_saved").glob("*") if not p.name.endswith("claim")]
    assert all(name.endswith(".failed") for name in leftovers), leftovers  # no half copy


def test_the_refusal_reaches_the_capture_and_stops_the_tune(tmp_path, monkeypatch):
    """The capture's facts say why the run failed; the tune's search stops on it."""
    from torchpace.capture.file_restore import FilesTouched
    from torchpace.capture.runner import refused_write
    from torchpace.facts.run import RunFacts, Status

    facts = RunFacts(
        command=["python", "train.py"], step_source="optimizer", optimizers=[],
        optimizer_steps_per_step=1.0, warmup=1, steps_requested=3, status=Status.COMPLETE,
    )  # fmt: skip
    refused_write(facts, FilesTouched(refused=["/p/ckpt.pt: No space left on device"]))
    assert facts.status == Status.SCRIPT_EXITED
    assert facts.error.startswith("torchpace refused the script's write to /p/ckpt.pt")


def test_a_write_the_system_refused_is_not_reported_as_written(tmp_path, monkeypatch):
    """Seen: "wrote ro.txt" when the script's write to it had failed. (An open for
    appending that writes nothing: the same, for root too.)"""
    user, run = _project(tmp_path)
    for name in ("ro.txt", "kept.txt"):
        (user / name).write_text(name)
        _age(user / name)
    (user / "ro.txt").chmod(0o444)
    monkeypatch.chdir(user)
    for mode in (Guard.RESTORE, Guard.REPORT):
        run_dir = run.parent / f"r-{mode}"
        run_dir.mkdir()
        proc, touched = _run(user, run_dir, """
            if os.getuid() != 0:
                try:
                    open("ro.txt", "w")
                except PermissionError:
                    pass
            open("kept.txt", "a").close()  # opened to write, nothing written
        """, mode=mode)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert touched.changed == [] and not touched.any, touched
        assert files_lines(touched) == ["your files: the script wrote none outside the run folder"]


def test_a_hard_link_to_a_restored_file_is_not_reported_unprotected(tmp_path, monkeypatch):
    """Seen: hard links reported "NOT protected" when they had been restored (one inode)."""
    user, run = _project(tmp_path)
    (user / "a.bin").write_bytes(b"A" * 100)
    os.link(user / "a.bin", user / "b.bin")
    _age(user / "a.bin")
    monkeypatch.chdir(user)
    proc, touched = _run(user, run, "open('a.bin', 'r+b').write(b'trial')\n")
    assert proc.returncode == 0, proc.stderr
    assert (user / "b.bin").read_bytes() == b"A" * 100
    assert touched.unwatched == [] and touched.restored
    assert "NOT protected" not in "\n".join(files_lines(touched))


def test_a_manifest_entry_for_a_copy_never_completed_changes_nothing(tmp_path, monkeypatch):
    """The copy is recorded before it completes: a child killed between the two never
    changed the file (the change comes after the copy), so nothing is put back."""
    user, run = _project(tmp_path)
    (user / "f.txt").write_text("mine")
    monkeypatch.chdir(user)
    st = os.stat(user / "f.txt")
    entry = {"kind": "saved", "path": str(user / "f.txt"),
             "copy": str(run / "files_saved" / "never"), "mode": st.st_mode, "atime_ns": 1,
             "mtime_ns": st.st_mtime_ns}  # fmt: skip
    (run / MANIFEST).write_text(json.dumps(entry) + "\n")
    touched = settle(run, Guard.RESTORE, None)
    assert touched.changed == [] and touched.failed == [] and touched.restored
    assert (user / "f.txt").read_text() == "mine"


def test_a_commit_the_script_makes_is_reported_and_left_alone(tmp_path, monkeypatch):
    """Seen: a script that committed (8 commits and tags) was said to have written "none
    outside the run folder": the repository's folder was not looked at."""
    user, run = _project(tmp_path)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=user, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "mine"], cwd=user, check=True)
    monkeypatch.chdir(user)
    _proc, touched = _run(user, run, """
        import subprocess
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "trial"], check=True)
        subprocess.run([*git, "tag", "v1"], check=True)
    """)  # fmt: skip
    unwatched = {os.path.relpath(p, user) for p in touched.unwatched}
    assert {".git/refs/heads/main", ".git/refs/tags/v1", ".git/logs/HEAD"} <= unwatched
    assert (user / ".git" / "refs" / "tags" / "v1").is_file()  # reported, never moved out
    assert touched.created == []
    assert "NOT protected: .git/" in "\n".join(files_lines(touched))


def test_a_file_not_put_back_is_never_also_said_put_back():
    """Seen: "each put back as it was" and "NOT restored (No space left on device)" for
    the same file, with restored: true in the JSON."""
    from torchpace.capture.file_restore import FilesTouched

    run = FilesTouched(changed=["/p/a.pt", "/p/b.log"], protected=True, restored=False,
                       failed=["/p/a.pt: could not be put back (No space left)"])  # fmt: skip
    lines = files_lines(run)
    assert lines[0].startswith("your files: the script wrote 1 that existed, each put back")
    assert lines[0].endswith("/p/b.log")
    assert lines[-1].startswith("NOT restored: /p/a.pt")
    tune = FilesTouched(restored=True, protected=True)
    tune.merge(run)
    assert tune.restored is False and tune.to_dict()["restored"] is False
