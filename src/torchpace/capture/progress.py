"""How far a capture has got, told by the child to its parent while the script runs.

The parent opens a pipe and passes its write end to the child (``CaptureSpec.progress_fd``);
the child writes one line per step, ``<phase> <done> <total>``, and the parent's reader
thread hands each as a ``CaptureProgress`` to its callback (the doctor's progress display).
The write end is non-blocking and a failed write switches the reporter off: a parent that
reads slowly or has gone away never slows or breaks the user's training.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

# Phases whose lines wait at most (a capture has fewer): their lines stay under PIPE_BUF.
MAX_UNSENT = 16


@dataclass(frozen=True)
class CaptureProgress:
    phase: str  # the session's phase (capture/session.Phase): "warmup", "window", ...
    done: int  # steps of this phase finished
    total: int | None  # steps this phase will take, when known


class ProgressReporter:
    """The child's end: ``say()`` once per step; does nothing without a pipe.

    A line the pipe has no room for waits and goes with the next one: only the latest of a
    phase waits (a step's count is stale once the next is known), but a phase's first line
    is never lost, so a one-step phase (the FLOP count) still shows in the parent."""

    def __init__(self, fd: int | None):
        self._fd = fd
        self._unsent: list[tuple[str, str]] = []  # (phase, line) the pipe had no room for
        if fd is not None:
            try:
                flags = fcntl.fcntl(fd, fcntl.F_GETFL)
                fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
            except OSError:
                self._fd = None

    def say(self, phase: str, done: int, total: int | None) -> None:
        if self._fd is None:
            return
        line = f"{phase} {done} {total if total is not None else '-'}\n"
        if self._unsent and self._unsent[-1][0] == phase:
            self._unsent[-1] = (phase, line)  # the same phase, further on
        else:
            self._unsent.append((phase, line))
            del self._unsent[:-MAX_UNSENT]
        # a few short lines: under PIPE_BUF, so the write is all or nothing
        data = "".join(text for _, text in self._unsent).encode()
        try:
            os.write(self._fd, data)
            self._unsent.clear()
        except BlockingIOError:
            pass  # the parent is behind: the lines go with the next step's
        except OSError:
            self._fd = None  # the parent has gone: stop telling it
            self._unsent.clear()


class ProgressPipe:
    """The parent's end: a pipe whose lines are read by a thread and handed to ``on_progress``."""

    def __init__(self, on_progress: Callable[[CaptureProgress], None]):
        self.on_progress = on_progress
        self.read_fd, self.write_fd = os.pipe()
        self._thread = threading.Thread(target=self._read, name="torchpace-progress", daemon=True)

    def child_started(self) -> None:
        """The child holds its copy of the write end now: close ours, so that the reader
        sees the end of the pipe when the child exits."""
        os.close(self.write_fd)
        self._thread.start()

    def close(self) -> None:
        # The child has exited: its lines are all in the pipe, read within moments (seconds on
        # a loaded machine). DataLoader workers inherit the write end and may hold it after
        # the child has gone; past this, what is left is not worth waiting for.
        self._thread.join(timeout=5.0)

    def _read(self) -> None:
        with os.fdopen(self.read_fd, "rb") as pipe:
            for raw in pipe:
                event = parse(raw)
                # a display problem must not stop the capture
                if event is not None:
                    with contextlib.suppress(Exception):
                        self.on_progress(event)


def parse(raw: bytes) -> CaptureProgress | None:
    parts = raw.decode(errors="replace").split()
    if len(parts) != 3 or not parts[1].isdigit():
        return None
    total = int(parts[2]) if parts[2].isdigit() else None
    return CaptureProgress(parts[0], int(parts[1]), total)
