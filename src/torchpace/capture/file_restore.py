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
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from torchpace.capture.file_guard import ASIDE, MANIFEST, Guard
from torchpace.capture.signals import STOP_SIGNALS

CREATED = "files_created"  # in the capture's folder: what the run created, under its path
REPLACED = "files_replaced"  # a saved folder's later version, moved aside before the restore
# More entries than this in the user's folder: the snapshot stops (and says so).
SNAPSHOT_LIMIT = 200_000
# A repository's folder: its objects are not snapshotted (a large repository would take
# the snapshot's whole limit); what says a commit, a tag or a checkout happened is.
_REPOSITORY_NAMES = frozenset({".git", ".hg", ".svn"})
_REPOSITORY_STATE = ("HEAD", "index", "packed-refs", "config", "ORIG_HEAD", "FETCH_HEAD",
                     "logs/HEAD", "refs", "dirstate", "bookmarks", "wc.db")  # fmt: skip


@dataclass
class FilesTouched:
    """What one capture (or a whole tune, merged) did to files outside the run folder."""

    changed: list[str] = field(default_factory=list)  # existed before; written or removed
    created: list[str] = field(default_factory=list)  # did not exist before
    unwatched: list[str] = field(default_factory=list)  # changed by C code or a subprocess
    failed: list[str] = field(default_factory=list)  # "path: why" a restore that failed
    # RESTORE: every changed file put back, every created one moved out (none failed)
    restored: bool = False
    note: str = ""  # e.g. the folder was too large to snapshot
    protected: bool = False  # RESTORE was on (restored or not)
    links: list[str] = field(default_factory=list)  # "link -> target": written through
    # "path: why": writes refused because the original could not be saved (the tune stops)
    refused: list[str] = field(default_factory=list)

    @property
    def any(self) -> bool:
        return bool(self.changed or self.created or self.unwatched or self.failed or self.refused)

    def merge(self, other: FilesTouched) -> None:
        """Another run's, after this one's: a file an earlier run created stays "created"
        (the later run found it existing)."""
        for name in ("changed", "created", "unwatched", "failed", "links", "refused"):
            mine = getattr(self, name)
            mine.extend(p for p in getattr(other, name) if p not in mine and p not in self.created)
        self.protected = self.protected or other.protected or other.restored
        self.restored = (self.restored or other.restored) and not (self.failed or self.refused)
        self.note = self.note or other.note

    def to_dict(self) -> dict:
        return {"changed": self.changed, "created": self.created, "unwatched": self.unwatched,
                "failed": self.failed, "restored": self.restored, "note": self.note,
                "protected": self.protected, "links": self.links,
                "refused": self.refused}  # fmt: skip

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
        streams = _own_streams()
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
                        if (path + "/").startswith(skip):
                            continue
                        if entry.name in _REPOSITORY_NAMES:
                            _repository_state(path, entries)
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if (st.st_dev, st.st_ino) in streams:  # torchpace's own output
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


def _repository_state(folder: str, entries: dict[str, tuple[bool, int, int]]) -> None:
    """A repository folder's state files and refs (a commit moves HEAD's branch, a tag adds
    a ref, a checkout rewrites the index), not its objects."""
    for name in _REPOSITORY_STATE:
        path = os.path.join(folder, name)
        for where, _dirs, files in os.walk(path) if os.path.isdir(path) else [("", [], [path])]:
            for file in files:
                full = os.path.join(where, file)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                entries[full] = (False, st.st_size, st.st_mtime_ns)
            if len(entries) > SNAPSHOT_LIMIT:
                return


def in_repository(path: str) -> bool:
    return any(f"/{name}/" in path for name in _REPOSITORY_NAMES)


def _own_streams() -> set[tuple[int, int]]:
    """The files this process's stdout and stderr go to (`torchpace tune ... > tune.log`):
    torchpace writes them, and the script's runs inherit them; not the script's writes."""
    out = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            out.add((st.st_dev, st.st_ino))
    return out


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
    """Ctrl-C, SIGTERM and SIGHUP are held while the block runs (a restore half done would leave the
    user's folder worse than either state) and handled as usual right after it. Handlers,
    not a signal mask: a masked main thread lets another thread take the signal, and Python
    then raises it in the main thread all the same."""
    held: list[int] = []

    def _hold(signum, frame):
        held.append(signum)

    try:
        previous = {s: signal.signal(s, _hold) for s in (signal.SIGINT, *STOP_SIGNALS)}
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


def settle(
    out_dir: Path, mode: Guard, before: Snapshot | None, keep_current: bool = False
) -> FilesTouched:
    """What the capture in ``out_dir`` did to files; with RESTORE, undone. ``keep_current``:
    a file's later version is moved into the capture's folder before the original goes back
    (a recovery after the tune was killed: the user may have written it since)."""
    if mode == Guard.OFF:
        return FilesTouched()
    with held_interrupts():
        return _settle(Path(out_dir), mode, before, keep_current)


def _first_entries(entries: list[dict]) -> tuple[dict[str, dict], dict[str, dict]]:
    """Each path's first change (what is inside a folder saved whole comes back with it),
    and each folder's time before its first entry was added or removed."""
    first: dict[str, dict] = {}
    folders: dict[str, dict] = {}
    whole: list[str] = []
    for entry in entries:
        path, kind = entry["path"], entry.get("kind")
        if kind == "folder":
            folders.setdefault(path, entry)
        elif kind != "link" and not any(path.startswith(w + "/") for w in whole):
            first.setdefault(path, entry)
            if entry.get("folder") and first[path] is entry:
                whole.append(path)
    return first, folders


def _settle(
    out_dir: Path, mode: Guard, before: Snapshot | None, keep_current: bool = False
) -> FilesTouched:
    entries = read_manifest(out_dir)
    first, folders = _first_entries(entries)
    touched = FilesTouched(protected=mode == Guard.RESTORE)
    touched.links = list(dict.fromkeys(
        f"{e['path']} -> {e.get('target')}" for e in entries if e.get("kind") == "link"
    ))  # fmt: skip
    for path, entry in list(first.items()):
        kind = entry["kind"]
        if kind == "refused":
            touched.refused.append(f"{path}: {entry.get('why')}")
        elif kind == "created":
            if os.path.lexists(path):  # not a temporary file, renamed or removed since
                touched.created.append(path)
        elif _unchanged(entry):  # a write the system refused (a read-only file): not one
            del first[path]
        else:
            touched.changed.append(path)
        if kind == "unsaved":  # a manifest of an earlier torchpace: written without a copy
            touched.failed.append(f"{path}: not copied before the change ({entry.get('why')})")
    unwatched_new = _unwatched(before, set(first), touched)
    if mode == Guard.RESTORE:
        created = [p for p, e in first.items() if e["kind"] == "created"]
        for path in _outermost_paths(created + unwatched_new):
            _move_out(path, out_dir, touched)
        for entry in first.values():
            if entry["kind"] == "saved":
                _put_back(entry, out_dir, touched, keep_current)
        if not touched.failed:  # else the copies are what is left of the user's files
            shutil.rmtree(out_dir / ASIDE, ignore_errors=True)
        _restore_folder_times(folders, before, touched)
        # a hard link to a file put back is back too (the same inode): not unprotected
        touched.unwatched = [p for p in touched.unwatched if not _as_before(p, before)]
    touched.created.extend(p for p in unwatched_new if p not in touched.created)
    touched.unwatched = [p for p in touched.unwatched if p not in touched.created]
    touched.restored = touched.protected and not (touched.failed or touched.refused)
    return touched


def _unchanged(entry: dict) -> bool:
    """The file is as it was when the hook saw the write coming: the write did not happen
    (the system refused it: a read-only file) or wrote nothing. A copy never completed
    means the script was stopped before its change (the copy comes first)."""
    path = entry["path"]
    if entry["kind"] == "saved" and not os.path.lexists(entry["copy"]):
        return True
    try:
        st = os.lstat(path)
    except OSError:
        return False  # removed
    if (st.st_mode, st.st_mtime_ns) != (entry.get("mode"), entry.get("mtime_ns")):
        return False
    if entry["kind"] == "changed":
        return st.st_size == entry.get("size")
    if entry.get("folder") or entry.get("link") or not stat.S_ISREG(st.st_mode):
        return False
    import filecmp

    try:
        return filecmp.cmp(entry["copy"], path, shallow=False)
    except OSError:
        return False


def _unwatched(before: Snapshot | None, known: set[str], touched: FilesTouched) -> list[str]:
    """Changes the hook did not see (C code, subprocesses), from the snapshot: the changed
    and removed files into ``touched.unwatched``; the new paths returned."""
    new: list[str] = []
    if before is not None and not before.complete:
        touched.note = (
            f"the folder holds more than {SNAPSHOT_LIMIT} entries: writes from C code or "
            "subprocesses were not looked for"
        )
        return new
    if before is None:
        return new
    after = before.again()
    for path, (is_dir, size, mtime) in after.entries.items():
        old = before.entries.get(path)
        if path in known or _under_any(path, known):
            continue
        if old is None and in_repository(path):
            touched.unwatched.append(path)  # a new ref, a commit: reported, never moved out
        elif old is None:
            new.append(path)
        elif not is_dir and (old[1], old[2]) != (size, mtime) and not old[0]:
            touched.unwatched.append(path)
    for path in before.entries:
        if path not in after.entries and path not in known and not _under_any(path, known):
            touched.unwatched.append(path)  # removed by code the hook did not see
    return new


def _as_before(path: str, before: Snapshot | None) -> bool:
    old = before.entries.get(path) if before is not None else None
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return old is not None and not old[0] and (old[1], old[2]) == (st.st_size, st.st_mtime_ns)


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


def _put_back(entry: dict, out_dir: Path, touched: FilesTouched, keep_current: bool) -> None:
    path, copy = entry["path"], entry["copy"]
    try:
        if keep_current and os.path.lexists(path):
            _keep_a_copy(path, out_dir)
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


def _keep_a_copy(path: str, out_dir: Path) -> None:
    """The version found now, copied into the capture's folder (files_replaced/)."""
    target = _keep_path(out_dir, REPLACED, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.copytree(path, target, symlinks=True, dirs_exist_ok=True)
    else:
        shutil.copy2(path, target, follow_symlinks=False)


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
