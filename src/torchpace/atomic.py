"""The one way torchpace replaces a file: write a temporary beside it, fsync, rename.

A reader (another torchpace process, the user's editor) sees the old content or the new,
never half of it, and a crash mid-write leaves the old file in place. Every file torchpace
writes goes through here: run facts, reports, configs, fixed sources.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_bytes_atomic(path: Path | str, data: bytes, *, keep_mode: bool = True) -> None:
    """Replace ``path`` (or create it) with ``data``.

    Links are followed: the file they point to is replaced, the link stays. With
    ``keep_mode`` an existing file keeps its permission bits.
    """
    with atomic_file(path, keep_mode=keep_mode) as f:
        f.write(data)


def write_text_atomic(path: Path | str, text: str, *, encoding: str = "utf-8") -> None:
    write_bytes_atomic(path, text.encode(encoding))


@contextlib.contextmanager
def atomic_file(path: Path | str, *, keep_mode: bool = False):
    """A binary file to stream into (``torch.save(obj, f)``) that replaces ``path`` only when
    the block ends without an exception: a crash or an error mid-write leaves the previous
    file intact and no temporary behind. For content too large to hold as bytes. With
    ``keep_mode`` an existing file keeps its permission bits; otherwise the result gets what
    the umask allows, as open() would."""
    real = Path(os.path.realpath(path))
    mode = None
    if keep_mode and real.exists():
        mode = stat.S_IMODE(real.stat().st_mode)
    try:
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".torchpace")
    except OSError as e:
        raise OwnFileError.of(e, real) from e
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if mode is None:  # mkstemp makes 0600
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.chmod(tmp, mode)
        os.replace(tmp, real)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and not isinstance(e, OwnFileError):
            raise OwnFileError.of(e, real) from e
        raise


class OwnFileError(OSError):
    """One of torchpace's own files could not be written (a full disk, a quota): named with
    its path, so that it is never read as the user's script failing. Nothing half-written
    is left (the temporary is removed; the previous file, if any, is intact)."""

    @classmethod
    def of(cls, error: OSError, path: Path) -> OwnFileError:
        return cls(error.errno, error.strerror or str(error), str(path))

    def __str__(self) -> str:
        return f"{(self.strerror or 'error').lower()} writing {self.filename}"
