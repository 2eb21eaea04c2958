"""The child's side of "tune leaves your folder as it found it": an audit hook that sees every
change Python is about to make to a file and records it, before it happens, in a manifest the
parent reads (capture/file_restore.py restores from it, even after the child was killed).

``sys.addaudithook`` is called with ``open`` (for writing: a mode with w/a/x/+, or flags with
O_WRONLY/O_RDWR/O_CREAT/O_TRUNC), ``os.remove``, ``os.rename`` (and replace), ``os.truncate``,
``os.mkdir``, ``os.rmdir``, ``shutil.rmtree``, ``os.utime``/``os.chmod`` *before* the change.
With RESTORE the first change to a file that existed copies it aside (copy2: its bytes, mode
and times) into the run folder; a file that did not exist is recorded as created; with
REPORT the paths are only recorded (the doctor runs the script as the user would).

torch.save writes through C++ (PyTorchFileWriter opens the path itself), so its writer is
wrapped to raise the same ``open`` event first. Writes from other C code and from
subprocesses are not seen here: the parent's snapshot of the folder (file_restore.py) finds
them afterwards and says so.

Stdlib only, and cheap: the hook returns at once for the hundreds of events it does not
watch (imports, compiles), so trials are timed as the script runs alone.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
import sys
import threading
from enum import Enum

MANIFEST = "files_touched.jsonl"  # in the capture's folder: one JSON object per line
ASIDE = "files_saved"  # in the capture's folder: the copies of files as they were
RUNS = "torchpace-runs"  # in each guarded folder: torchpace's own (runs, lock, journal)


class Guard(str, Enum):
    OFF = "off"
    REPORT = "report"  # record what the script writes (the doctor)
    RESTORE = "restore"  # also copy each file aside before its first change (tune)

    def __str__(self) -> str:
        return self.value


_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# events that change a path's content or metadata in place (the file must be saved)
_MODIFY = frozenset({"os.truncate", "os.utime", "os.chmod", "os.chown"})
_WATCHED = frozenset({"open", "os.remove", "os.rename", "os.rmdir", "os.mkdir", "shutil.rmtree",
                      "os.link", "os.symlink"}) | _MODIFY  # fmt: skip


def excluded_roots(run_roots: list[str]) -> list[str]:
    """Places that are not the user's work: the run folder, temporary files, the Python
    installation, the caches of torch/triton/pip, and the kernel's file systems."""
    home = os.path.expanduser("~")
    import sysconfig
    import tempfile

    roots = [*run_roots, tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev", "/proc", "/sys",
             "/run", sys.prefix, sys.base_prefix, sys.exec_prefix,
             os.path.join(home, ".cache"), os.path.join(home, ".triton"),
             os.path.join(home, ".nv"), os.path.join(home, ".config", "matplotlib"),
             os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]  # fmt: skip
    roots += [p for p in sysconfig.get_paths().values() if p]
    for variable in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR", "XDG_CACHE_HOME"):
        if os.environ.get(variable):
            roots.append(os.environ[variable])
    return sorted({os.path.realpath(r) for r in roots})


class Scope:
    """Which paths are guarded: everything under the user's folders (the working folder and
    the script's) except the run folder and the caches inside them, and everything outside
    them that is not an excluded place. The longest matching prefix decides, so a project
    under /tmp is guarded although /tmp is not."""

    def __init__(self, user_roots: list[str], run_roots: list[str]):
        self.user_roots = sorted({os.path.realpath(r) for r in user_roots})
        self.excluded = [r for r in excluded_roots(run_roots) if r != "/"]
        rules = [(r, True) for r in self.user_roots] + [(r, False) for r in self.excluded]
        # the run folders: never, wherever they are
        rules += [(os.path.realpath(r), False) for r in run_roots]
        self._rules = sorted(
            ((r.rstrip("/") + "/", keep) for r, keep in rules), key=lambda rule: -len(rule[0])
        )
        self._run_roots = tuple(os.path.realpath(r).rstrip("/") + "/" for r in run_roots)

    def in_run_folder(self, path: str) -> bool:
        return (path + "/").startswith(self._run_roots)

    def guarded(self, path: str) -> bool:
        probe = path + "/"
        for prefix, keep in self._rules:
            if probe.startswith(prefix):
                return keep
        return True

    def excluded_inside(self) -> list[str]:
        """The excluded places within the user's folders (the snapshot skips them)."""
        return [r for r in self.excluded if any(r.startswith(u + "/") for u in self.user_roots)]


class WriteRefused(OSError):
    """A write the guard did not let happen: the file's original could not be saved."""


class FileGuard:
    """``out_dir``: where the manifest and the copies go; every process of one run (the
    ranks of a job, forked workers) shares it."""

    def __init__(self, mode: Guard, out_dir: str, scope: Scope):
        self.mode = mode
        self.aside = os.path.join(out_dir, ASIDE)
        self.scope = scope
        self._manifest = os.open(
            os.path.join(out_dir, MANIFEST), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        self._seen: set[str] = set()
        self._dirs: set[str] = set()
        self._links: set[str] = set()
        # folders copied whole (before shutil.rmtree, a rename): what is inside is covered
        self._whole: list[str] = []
        self._lock = threading.RLock()
        self._busy = threading.local()  # our own file operations raise events too

    # --- the hook ------------------------------------------------------------------------
    def hook(self, event: str, args: tuple) -> None:
        if event not in _WATCHED or getattr(self._busy, "on", False):
            return
        self._busy.on = True
        try:
            self._handle(event, args)
        except WriteRefused:  # raised in the script: the file stays as it was
            raise
        except Exception:  # the script's own write must go ahead, whatever ours did
            pass
        finally:
            self._busy.on = False

    def _handle(self, event: str, args: tuple) -> None:
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            writes = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & _WRITE_FLAGS
            )
            if writes and isinstance(path, (str, bytes, os.PathLike)):
                self._before_change(*self._through_link(self._path(path)), creates=True)
        elif event in _MODIFY:
            path = self._path(args[0])
            if path is not None:
                self._before_change(*self._through_link(path), creates=False)
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
            self._before_change(self._path(args[0], args[1]), creates=False)
        elif event == "os.rename":
            self._before_change(self._path(args[0], args[2]), creates=False)
            self._before_change(self._path(args[1], args[3]), creates=True)
        elif event in ("os.link", "os.symlink"):
            self._before_change(self._path(args[1], args[-1]), creates=True, only_new=True)
        elif event == "os.mkdir":  # makedirs(exist_ok=True) tries existing folders too
            self._before_change(self._path(args[0], args[2]), creates=True, only_new=True)

    def _path(self, path, dir_fd=None) -> str | None:
        """An absolute path without symbolic links in its folders (the file itself may be a
        link: renaming a link changes the link, not what it points to)."""
        if isinstance(path, int):  # os.truncate(fd, n): the file behind the descriptor
            try:
                return os.readlink(f"/proc/self/fd/{path}")
            except OSError:
                return None
        path = os.fsdecode(path)
        if dir_fd not in (None, -1) and not os.path.isabs(path):
            try:
                path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
            except OSError:
                return None
        path = os.path.abspath(path)
        return os.path.join(os.path.realpath(os.path.dirname(path)), os.path.basename(path))

    def _through_link(self, path: str | None) -> tuple[str | None, bool]:
        """A write to a symbolic link (open, truncate, chmod) changes what it points to: that
        file is the one to save, wherever it is (a link in the user's folder to a file
        outside it: the user's file all the same), unless it is a run folder's. The link is
        recorded, for the report. (path, whether it is guarded because a guarded link
        leads to it)."""
        if path is None or not os.path.islink(path) or not self.scope.guarded(path):
            return path, False
        target = os.path.realpath(path)
        if self.scope.in_run_folder(target):
            return target, False
        if path not in self._links:
            self._links.add(path)
            self._write({"kind": "link", "path": path, "target": target})
        return target, True

    def _before_change(
        self, path: str | None, linked: bool = False, *, creates: bool, only_new: bool = False
    ) -> None:
        """``creates``: the change makes the path when it is absent; ``only_new``: the change
        fails when the path exists (mkdir, link), so an existing path is left unrecorded;
        ``linked``: reached through a guarded link (guarded wherever it is)."""
        if path is None or path in self._seen or not (linked or self.scope.guarded(path)):
            return
        with self._lock:
            if path in self._seen:
                return
            exists = os.path.lexists(path)
            if (not exists and not creates) or (exists and only_new):
                return
            if any(path.startswith(folder + "/") for folder in self._whole):
                return
            self._seen.add(path)
            self._note_folder(os.path.dirname(path))
            if not exists:
                self._write({"kind": "created", "path": path})
            elif self.mode == Guard.RESTORE:
                try:
                    self._save(path)
                except WriteRefused:
                    self._seen.discard(path)  # its next write is refused too
                    raise
            else:  # as it was, to tell a write that happened from one that failed (EACCES)
                st = os.lstat(path)
                self._write({"kind": "changed", "path": path, "size": st.st_size,
                             "mode": st.st_mode, "mtime_ns": st.st_mtime_ns})  # fmt: skip

    def _note_folder(self, folder: str) -> None:
        """A folder's time changes when an entry is added or removed: kept to be put back."""
        if folder in self._dirs or not self.scope.guarded(folder):
            return
        self._dirs.add(folder)
        try:
            st = os.stat(folder)
        except OSError:
            return
        self._write({"kind": "folder", "path": folder, "atime_ns": st.st_atime_ns,
                     "mtime_ns": st.st_mtime_ns})  # fmt: skip

    def _save(self, path: str) -> None:
        """The file (or folder) as it is now, into the run folder, before the change. The
        copy is claimed with O_EXCL: another process of the run (a forked DataLoader worker,
        another rank) that is about to change the same file finds it claimed and waits until
        the copy (of the original) is complete, so that it never changes it half-copied.

        A copy that cannot be made (a full disk, a quota) refuses the change: WriteRefused
        is raised in the script, and the manifest says so (the parent stops the tune). A
        file is never changed without its original saved and recorded first."""
        name = hashlib.sha1(path.encode("utf-8", "surrogateescape")).hexdigest()[:20]
        copy = os.path.join(self.aside, name)
        try:
            os.makedirs(self.aside, exist_ok=True)
            os.close(os.open(copy + ".claim", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            if not _wait_for(copy):
                self._refuse(path, "another process of the run could not save it first")
            return
        except OSError as e:
            self._refuse(path, e.strerror or str(e))
        st = os.lstat(path)
        entry = {"kind": "saved", "path": path, "copy": copy, "mode": st.st_mode,
                 "atime_ns": st.st_atime_ns, "mtime_ns": st.st_mtime_ns}  # fmt: skip
        part = copy + ".part"
        try:
            if os.path.islink(path):
                os.symlink(os.readlink(path), part)
                entry["link"] = True
            elif os.path.isdir(path):
                shutil.copytree(path, part, symlinks=True)
                entry["folder"] = True
            else:
                shutil.copy2(path, part)
            # recorded before the copy is complete: a copy the parent does not know of
            # would not be put back
            self._write(entry)
            os.rename(part, copy)  # complete: a process waiting on the claim goes on
        except OSError as e:
            self._discard(part, copy)
            self._refuse(path, e.strerror or str(e))
        if entry.get("folder"):
            self._whole.append(path)

    def _discard(self, part: str, copy: str) -> None:
        """What a failed copy left (the space it took is the user's), marked failed for a
        process waiting on its claim."""
        if os.path.isdir(part) and not os.path.islink(part):
            shutil.rmtree(part, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                os.unlink(part)
        with contextlib.suppress(OSError):
            os.close(os.open(copy + ".failed", os.O_WRONLY | os.O_CREAT, 0o600))

    def _refuse(self, path: str, why: str) -> None:
        """The change to ``path`` does not happen: recorded (for the parent's report), and
        raised in the script where its write was."""
        with contextlib.suppress(OSError):
            self._write({"kind": "refused", "path": path, "why": why})
        raise WriteRefused(
            errno.ENOSPC if "space" in why else errno.EIO,
            f"torchpace refused this write: it could not save a copy of {path} first ({why}), "
            "and a file is never changed without its original saved; the tune stops",
            path,
        )

    def _write(self, entry: dict) -> None:
        # one write per line on an O_APPEND descriptor: lines from forked workers do not mix
        os.write(self._manifest, (json.dumps(entry) + "\n").encode())


def _wait_for(copy: str, limit_s: float = 60.0) -> bool:
    """Until another process's copy is complete (True) or failed, or it died (the limit)."""
    import time

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if os.path.lexists(copy):
            return True
        if os.path.exists(copy + ".failed"):
            return False
        time.sleep(0.01)
    return os.path.lexists(copy)


def _wrap_torch_save(guard: FileGuard) -> None:
    """torch.save(obj, "path") opens the path in C++; raise Python's own ``open`` event for
    it first, so the hook (and any other audit hook) sees the write."""
    try:  # the script imports torch anyway; imported here, its saves are seen from the first
        import torch.serialization as serialization
    except ImportError:
        return
    if not hasattr(serialization, "_open_zipfile_writer"):
        return
    original = serialization._open_zipfile_writer

    def _open_zipfile_writer(name_or_buffer):
        if isinstance(name_or_buffer, (str, bytes, os.PathLike)):
            sys.audit("open", name_or_buffer, "wb", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        return original(name_or_buffer)

    serialization._open_zipfile_writer = _open_zipfile_writer


def user_folders(target: str, is_module: bool) -> list[str]:
    """The folders whose files a run of ``target`` is guarded in: the working folder, and
    the script's (the outermost of them, resolved)."""
    roots = [os.getcwd()] + ([] if is_module else [os.path.dirname(os.path.abspath(target))])
    real = sorted({os.path.realpath(r) for r in roots})
    return [r for r in real if not any(r != o and r.startswith(o + "/") for o in real)]


def scope_for(target: str, is_module: bool, guard_root: str) -> Scope:
    """The user's folders of a capture: the working folder, and the script's folder.
    ``guard_root``: the run folder (a tune's, holding every trial's); the torchpace-runs/
    folder around it and in each user folder too, where other runs write."""
    roots = user_folders(target, is_module)
    # each folder's torchpace-runs/ (its runs, the tune's lock and journal) is torchpace's
    run_roots = [guard_root, *(os.path.join(r, RUNS) for r in roots)]
    parent = os.path.dirname(os.path.realpath(guard_root))
    if os.path.basename(parent) == RUNS:
        run_roots.append(parent)
    return Scope(roots, run_roots)


def install(mode: Guard, out_dir: str, scope: Scope) -> FileGuard | None:
    """Before the script runs (torch is imported here if it is not yet: torch.save is seen
    only through torch.serialization's wrapper)."""
    if mode == Guard.OFF:
        return None
    guard = FileGuard(mode, os.path.abspath(out_dir), scope)
    sys.addaudithook(guard.hook)
    _wrap_torch_save(guard)
    return guard
