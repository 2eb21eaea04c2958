"""The parent's side of "tune leaves your folder as it found it": after each capture, read
the manifest the child's audit hook wrote (capture/file_guard.py), put every file that
existed back as it was (bytes, mode, times), move the files the run created into the
capture's folder, and put the folders' times back.

The manifest is written before each change happens, so a child killed mid-write (SIGKILL,
a segfault, the timeout) is restored as well as one that ended. A snapshot of the user's
folder taken before the capture (names, sizes, times) finds what the hook could not see:
writes from C code and from subprocesses. New files found that way are moved out too; a
changed file found that way cannot be put back (no copy was taken) and is reported.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from torchpace.capture.file_guard import ASIDE, MANIFEST, Guard

CREATED = "files_created"  # in the capture's folder: what the run created, under its path
REPLACED = "files_replaced"  # a saved folder's later version, moved aside before the restore
# More entries than this in the user's folder: the snapshot stops (and says so).
SNAPSHOT_LIMIT = 200_000
_SKIPPED_NAMES = frozenset({".git", ".hg", ".svn"})


@dataclass
class FilesTouched:
    """What one capture (or a whole tune, merged) did to files outside the run folder."""

    changed: list[str] = field(default_factory=list)  # existed before; written or removed
    created: list[str] = field(default_factory=list)  # did not exist before
    unwatched: list[str] = field(default_factory=list)  # changed by C code or a subprocess
    failed: list[str] = field(default_factory=list)  # "path: why" a restore that failed
    restored: bool = False  # RESTORE: changed files put back, created ones moved out
    note: str = ""  # e.g. the folder was too large to snapshot

    @property
    def any(self) -> bool:
        return bool(self.changed or self.created or self.unwatched or self.failed)

    def merge(self, other: FilesTouched) -> None:
        """Another run's, after this one's: a file an earlier run created stays "created"
        (the later run found it existing)."""
        for name in ("changed", "created", "unwatched", "failed"):
            mine = getattr(self, name)
            mine.extend(p for p in getattr(other, name) if p not in mine and p not in self.created)
        self.restored = self.restored or other.restored
        self.note = self.note or other.note

    def to_dict(self) -> dict:
        return {"changed": self.changed, "created": self.created, "unwatched": self.unwatched,
                "failed": self.failed, "restored": self.restored, "note": self.note}  # fmt: skip

    @classmethod
    def from_dict(cls, d: dict) -> FilesTouched:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


# --- the snapshot of the user's folder -------------------------------------------------------
@dataclass
class Snapshot:
    entries: dict[str, tuple[bool, int, int]]  # path -> (is a folder, size, mtime_ns)
    complete: bool
    roots: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)

    def again(self) -> Snapshot:
        return Snapshot.take(self.roots, self.excluded)

    @classmethod
    def take(cls, roots: list[str], excluded: list[str]) -> Snapshot:
        entries: dict[str, tuple[bool, int, int]] = {}
        skip = tuple(e.rstrip("/") + "/" for e in excluded)
        stack = [r for r in _outermost(roots) if not (r + "/").startswith(skip)]
        for root in stack:
            try:
                st = os.stat(root)
                entries[root] = (True, 0, st.st_mtime_ns)
            except OSError:
                pass
        while stack:
            folder = stack.pop()
            try:
                with os.scandir(folder) as it:
                    for entry in it:
                        path = entry.path
                        if entry.name in _SKIPPED_NAMES or (path + "/").startswith(skip):
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        is_dir = entry.is_dir(follow_symlinks=False)
                        entries[path] = (is_dir, 0 if is_dir else st.st_size, st.st_mtime_ns)
                        if len(entries) > SNAPSHOT_LIMIT:
                            return cls(entries, False, list(roots), list(excluded))
                        if is_dir:
                            stack.append(path)
            except OSError:
                continue
        return cls(entries, True, list(roots), list(excluded))


def _outermost(roots: list[str]) -> list[str]:
    real = sorted({os.path.realpath(r) for r in roots})
    return [r for r in real if not any(r != o and (r + "/").startswith(o + "/") for o in real)]


# --- after a capture -------------------------------------------------------------------------
def read_manifest(out_dir: Path) -> list[dict]:
    path = Path(out_dir) / MANIFEST
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        try:  # a child killed mid-line leaves a torn last line
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            entries.append(entry)
    return entries


@contextmanager
def held_interrupts() -> Iterator[list[int]]:
    """Ctrl-C and SIGTERM are held while the block runs (a restore half done would leave the
    user's folder worse than either state) and handled as usual right after it. Handlers,
    not a signal mask: a masked main thread lets another thread take the signal, and Python
    then raises it in the main thread all the same."""
    held: list[int] = []

    def _hold(signum, frame):
        held.append(signum)

    try:
        previous = {s: signal.signal(s, _hold) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no handler to swap
        yield held
        return
    try:
        yield held
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(held):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)  # raises KeyboardInterrupt (SIGINT; SIGTERM in a verb)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), signum)


def settle(out_dir: Path, mode: Guard, before: Snapshot | None) -> FilesTouched:
    """What the capture in ``out_dir`` did to files; with RESTORE, undone."""
    if mode == Guard.OFF:
        return FilesTouched()
    with held_interrupts():
        return _settle(Path(out_dir), mode, before)


def _settle(out_dir: Path, mode: Guard, before: Snapshot | None) -> FilesTouched:
    entries = read_manifest(out_dir)
    first: dict[str, dict] = {}
    whole: list[str] = []  # folders saved whole: what is inside comes back with them
    for entry in entries:
        path = entry["path"]
        if entry.get("kind") == "folder" or any(path.startswith(w + "/") for w in whole):
            continue
        first.setdefault(path, entry)
        if entry.get("folder") and first[path] is entry:
            whole.append(path)
    folders = {}
    for entry in entries:
        if entry.get("kind") == "folder":
            folders.setdefault(entry["path"], entry)
    touched = FilesTouched(restored=mode == Guard.RESTORE)
    for path, entry in first.items():
        if entry["kind"] == "created":
            if os.path.lexists(path):  # not a temporary file, renamed or removed since
                touched.created.append(path)
        else:
            touched.changed.append(path)
        if entry["kind"] == "unsaved":
            touched.failed.append(f"{path}: not copied before the change ({entry.get('why')})")
    unwatched_new: list[str] = []
    if before is not None and not before.complete:
        touched.note = (
            f"the folder holds more than {SNAPSHOT_LIMIT} entries: writes from C code or "
            "subprocesses were not looked for"
        )
    elif before is not None:
        after = before.again()
        known = set(first)
        for path, (is_dir, size, mtime) in after.entries.items():
            old = before.entries.get(path)
            if path in known or _under_any(path, known):
                continue
            if old is None:
                unwatched_new.append(path)
            elif not is_dir and (old[1], old[2]) != (size, mtime) and not old[0]:
                touched.unwatched.append(path)
        for path in before.entries:
            if path not in after.entries and path not in known and not _under_any(path, known):
                touched.unwatched.append(path)  # removed by code the hook did not see
    if mode == Guard.RESTORE:
        created = [p for p, e in first.items() if e["kind"] == "created"]
        for path in _outermost_paths(created + unwatched_new):
            _move_out(path, out_dir, touched)
        for entry in first.values():
            if entry["kind"] == "saved":
                _put_back(entry, out_dir, touched)
        if not touched.failed:  # else the copies are what is left of the user's files
            shutil.rmtree(out_dir / ASIDE, ignore_errors=True)
        _restore_folder_times(folders, before, touched)
    touched.created.extend(p for p in unwatched_new if p not in touched.created)
    touched.unwatched = [p for p in touched.unwatched if p not in touched.created]
    return touched


def _under_any(path: str, parents: set[str]) -> bool:
    parent = os.path.dirname(path)
    while parent and parent != "/":
        if parent in parents:
            return True
        parent = os.path.dirname(parent)
    return False


def _outermost_paths(paths: list[str]) -> list[str]:
    chosen: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(path.startswith(c + "/") for c in chosen):
            chosen.append(path)
    return chosen


def _keep_path(out_dir: Path, folder: str, path: str) -> Path:
    """Under the user's working folder: the same relative path; elsewhere: the whole path."""
    cwd = os.getcwd()
    inside = path.startswith(cwd + "/")
    return out_dir / folder / (os.path.relpath(path, cwd) if inside else path.lstrip("/"))


def _move_out(path: str, out_dir: Path, touched: FilesTouched) -> None:
    if not os.path.lexists(path):
        return  # created then removed (a temporary file renamed over a checkpoint)
    target = _keep_path(out_dir, CREATED, path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, target)
    except OSError as e:
        touched.failed.append(f"{path}: created by the run, could not be moved out ({e})")


def _put_back(entry: dict, out_dir: Path, touched: FilesTouched) -> None:
    path, copy = entry["path"], entry["copy"]
    try:
        if entry.get("link"):
            if os.path.lexists(path):
                _move_aside_or_remove(path, out_dir)
            os.symlink(os.readlink(copy), path)
        elif entry.get("folder"):
            if os.path.lexists(path):
                _move_aside_or_remove(path, out_dir)
            shutil.copytree(copy, path, symlinks=True)
        else:
            if os.path.isdir(path) and not os.path.islink(path):
                _move_aside_or_remove(path, out_dir)
            elif os.path.islink(path):
                os.unlink(path)  # the run put a link where a file was
            shutil.copyfile(copy, path)  # in place when the file is still there: same inode
            os.chmod(path, entry["mode"] & 0o7777)
        os.utime(path, ns=(entry["atime_ns"], entry["mtime_ns"]), follow_symlinks=False)
    except OSError as e:
        touched.failed.append(f"{path}: could not be put back from {copy} ({e})")


def _move_aside_or_remove(path: str, out_dir: Path) -> None:
    target = _keep_path(out_dir, REPLACED, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(path, target)


def _restore_folder_times(
    folders: dict[str, dict], before: Snapshot | None, touched: FilesTouched
) -> None:
    """Deepest first: putting a folder's time back does not change its parent's."""
    times = {p: (e["atime_ns"], e["mtime_ns"]) for p, e in folders.items()}
    if before is not None:
        for path, (is_dir, _size, mtime) in before.entries.items():
            if is_dir:
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if st.st_mtime_ns != mtime:
                    times.setdefault(path, (st.st_atime_ns, mtime))
    for path in sorted(times, key=lambda p: p.count("/"), reverse=True):
        with contextlib.suppress(OSError):  # a folder the run removed, not recreated
            os.utime(path, ns=times[path])
