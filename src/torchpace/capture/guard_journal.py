"""One tune per folder at a time, and what a killed tune leaves to undo.

``<folder>/torchpace-runs/tune.lock``: held (flock) by the process that guards the folder's
files (a tune, for its whole run), its text the holder's PID. A second tune finds it held
and stops before it starts (two at once would each save the other's trial output as the
user's original). The kernel lets the lock go when its process ends, SIGKILL included.

``<folder>/torchpace-runs/unfinished.json``: the journal, written before each guarded
capture starts (where its manifest and copies are: capture/file_guard.py) and removed once
its files are put back. A journal whose lock is free was left by a tune that was killed
mid-run: the next torchpace command started in that folder (cli.py) ends what is left of
that run's processes, puts the files back from the capture's manifest, and says so; where
that fails, it says where the originals are and that any torchpace command retries.

The folders are the guarded ones (capture/file_guard.scope_for): the working folder and the
script's. Their torchpace-runs/ is torchpace's own: never guarded, never snapshotted.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import time
from pathlib import Path

from torchpace.capture.file_guard import RUNS, Guard

LOCK = "tune.lock"
JOURNAL = "unfinished.json"
# What is left of a killed run's processes gets this long to die after SIGKILL.
KILL_WAIT_S = 5.0

_held: dict[str, list[int]] = {}  # lock path -> [fd, holds]: this process's locks


class FolderBusy(Exception):
    """Another live process guards the folder; the message names it and its PID."""


def lock_folders(folders: list[str], who: str = "torchpace tune") -> list[str]:
    """Each folder's lock, taken for this process (again, when it holds it already); the
    paths to give to ``unlock``. A folder that cannot be written is left (its files cannot
    be written either). FolderBusy when another process holds one."""
    taken: list[str] = []
    try:
        for folder in folders:
            path = os.path.join(folder, RUNS, LOCK)
            if path in _held:
                _held[path][1] += 1
            elif not _take(path, folder, who):
                continue
            taken.append(path)
    except FolderBusy:
        unlock(taken)
        raise
    return taken


def _take(path: str, folder: str, who: str) -> bool:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise FolderBusy(
            f"{who}: another tune (PID {holder}) is running in {folder}; two at once would "
            "each take the other's trial output for your files. Wait for it to end, or tune "
            "from a copy of the folder"
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    _held[path] = [fd, 1]
    return True


def unlock(paths: list[str]) -> None:
    for path in paths:
        held = _held.get(path)
        if held is None:
            continue
        held[1] -= 1
        if held[1] == 0:
            del _held[path]
            os.close(held[0])  # the lock goes with the descriptor


def open_journal(folders: list[str], capture_dir: Path, mark: str) -> list[str]:
    """Before a guarded capture starts: its folders locked (if this process does not hold
    them yet) and the journal written in each. ``mark``: a string on the command line of
    the capture's processes (its spec's path), to find what is left of them. The handle
    for ``close_journal``."""
    locks = lock_folders(folders)
    entry = {"pid": os.getpid(), "cwd": os.getcwd(), "capture": str(Path(capture_dir).resolve()),
             "mark": mark, "folders": folders, "locks": locks, "started": time.time()}  # fmt: skip
    from torchpace.atomic import write_text_atomic

    for lock in locks:
        with contextlib.suppress(OSError):  # a full disk: the capture still runs, unjournaled
            write_text_atomic(os.path.join(os.path.dirname(lock), JOURNAL), json.dumps(entry))
    return locks


def close_journal(locks: list[str]) -> None:
    """The capture's files are back: its journal goes, its locks are given back."""
    for lock in locks:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(os.path.dirname(lock), JOURNAL))
    unlock(locks)


# --- the next start, after a tune was killed ------------------------------------------------
def recover_here(say) -> None:
    """At the start of any torchpace command: a journal in this folder whose tune is gone
    (its lock free) is finished, its files put back. Cheap when there is none (one stat)."""
    journal = Path(RUNS) / JOURNAL
    if not journal.is_file():
        return
    try:
        entry = json.loads(journal.read_text())
        folders, capture = list(entry["folders"]), Path(entry["capture"])
    except (OSError, ValueError, KeyError, TypeError):
        return  # not ours to judge: left alone
    try:
        locks = lock_folders(folders, "torchpace")
    except FolderBusy:
        return  # its tune is alive
    try:
        _recover(entry, capture, say, locks)
    finally:
        unlock(locks)


def _recover(entry: dict, capture: Path, say, locks: list[str]) -> None:
    from torchpace.capture.file_restore import REPLACED, settle
    from torchpace.capture.files_report import files_lines

    _end_leftovers(str(entry.get("mark") or capture), entry.get("cwd"))
    touched = settle(capture, Guard.RESTORE, None, keep_current=True)
    say(f"torchpace: a tune (PID {entry.get('pid')}) ended without putting your files back "
        f"(killed while its run {capture} went on); done now:")  # fmt: skip
    for line in files_lines(touched):
        say(f"  {line}")
    if touched.changed:
        say(f"  the versions found before that are kept in {capture / REPLACED}/")
    if touched.failed:
        say(f"  the originals not put back are in {capture}/files_saved/ (which is which: "
            f"{capture}/files_touched.jsonl); any torchpace command run here, e.g. "
            "`torchpace env`, tries again")  # fmt: skip
        return
    for lock in locks:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(os.path.dirname(lock), JOURNAL))


def _end_leftovers(mark: str, cwd: str | None) -> None:
    """The killed tune's capture may still run (its own process group outlives the tune):
    the groups of the processes started in ``cwd`` with ``mark`` on their command line are
    killed, and waited for, before their files are put back."""
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark.encode() not in (entry / "cmdline").read_bytes():
                continue
            if cwd is not None and os.readlink(entry / "cwd") != cwd:
                continue
            groups.add(os.getpgid(int(entry.name)))
        except OSError:
            continue
    groups.discard(os.getpgrp())  # never this command's own group
    for group in groups:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while groups and time.monotonic() < deadline:
        groups = {g for g in groups if _alive(g)}
        time.sleep(0.05)


def _alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except OSError:
        return False
    return True
