"""Apply fixes to a syntax tree, and write a fixed file without ever losing the original.

A fix replaces one node by another; everything outside that node is kept as libcst read it.
Writing goes through ``torchpace.atomic``: a temporary file in the same directory, fsynced,
then renamed over the original, so a crash leaves either the old file or the new one. Two
kinds of file are not replaced that way: a read-only one is not written at all (its mode is
the user's word), and one with several hard links is written in place, after a verified
copy of the original beside it, so that every link sees the fix.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path

import libcst as cst

from torchpace.atomic import write_bytes_atomic
from torchpace.lint.rule import Finding


class _Replace(cst.CSTTransformer):
    def __init__(self, replacements: dict[int, cst.CSTNode]) -> None:
        super().__init__()
        self.replacements = replacements
        self.applied = 0
        self._applied_before: list[int] = []

    def on_visit(self, node) -> bool:
        self._applied_before.append(self.applied)
        return True

    def on_leave(self, original_node, updated_node):
        applied_before = self._applied_before.pop()
        replacement = self.replacements.get(id(original_node))
        if replacement is None:
            return updated_node
        if self.applied > applied_before:
            return updated_node  # a fix inside this node was applied: the next round retries
        self.applied += 1
        return replacement


def apply_fixes(module: cst.Module, findings: list[Finding]) -> tuple[cst.Module, int]:
    """The module with the findings' fixes; nested fixes are applied in later rounds."""
    replacements = {}
    for finding in findings:
        replacements.setdefault(id(finding.replace), finding.replacement)
    transformer = _Replace(replacements)
    return module.visit(transformer), transformer.applied


class NotWritten(OSError):
    """A fix was not written; the message is complete (it names the file and what to do)."""


class ReadOnlyFile(NotWritten):
    pass


def is_read_only(path: Path) -> bool:
    """No write permission bit for the owner (which root, too, takes as the user's word), or
    none for this process."""
    real = Path(os.path.realpath(path))
    return not real.stat().st_mode & stat.S_IWUSR or not os.access(real, os.W_OK)


def read_only_message(path: Path | str) -> str:
    return (
        f"{path} is read-only, so it was skipped: its fixes were not written; make it "
        "writable (chmod u+w) and run again to fix it"
    )


def write_atomic(path: Path, data: bytes, expected: bytes) -> None:
    """Replace ``path``'s content by ``data``, keeping its mode, owner and hard links.

    ``expected`` is the content the fix was computed from: if the file changed meanwhile
    (an editor saved it), nothing is written and the error says so. A read-only file (no
    write permission bit for its owner, or none for us) is not written either.
    """
    real = Path(os.path.realpath(path))
    if is_read_only(real):
        raise ReadOnlyFile(read_only_message(path))
    info = real.stat()
    if real.read_bytes() != expected:
        raise NotWritten(f"{path} changed while it was being linted; it was not rewritten")
    if info.st_nlink > 1:
        _write_in_place(path, real, data, expected)
    else:
        write_bytes_atomic(real, data, keep_mode=True)


def _write_in_place(path: Path, real: Path, data: bytes, original: bytes) -> None:
    """Overwrite ``real`` through its own inode (a rename would detach it from its other
    hard links). The original is first copied beside it and read back: if writing fails
    half way, it is put back, and if even that fails the copy is kept and named."""
    fd, backup = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".orig")
    with os.fdopen(fd, "wb") as f:
        f.write(original)
        f.flush()
        os.fsync(f.fileno())
    try:
        if Path(backup).read_bytes() != original:
            raise NotWritten(f"{path}: the copy of the original did not read back; not rewritten")
        try:
            _overwrite(real, data)
        except OSError as e:
            try:
                _overwrite(real, original)
            except OSError:
                keep = backup
                backup = None  # kept: the only intact copy of the user's file
                raise NotWritten(
                    f"{path}: writing the fixes failed ({e}) and so did restoring it; "
                    f"the original is in {keep}"
                ) from e
            raise NotWritten(f"{path}: fixes not written ({e}); the file is as it was") from e
    finally:
        if backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(backup)


def _overwrite(real: Path, data: bytes) -> None:
    with open(real, "r+b") as f:
        f.write(data)
        f.truncate()
        f.flush()
        os.fsync(f.fileno())
