"""A run's stdout and stderr into a file of bounded size (tune's ``output.log``).

A script that prints 10 MB a step wrote 2.1 GB into one trial's log in 60 s, and tune runs it
dozens of times. The output goes through a pipe instead: the file gets the first HEAD_BYTES
as they come (a log of ordinary size is the whole log, readable while the run goes on); past
them only the last TAIL_BYTES are kept (the end is where a crash says why), written after a
line that says how much was cut.
"""

from __future__ import annotations

import os
import select
import threading
from pathlib import Path

HEAD_BYTES = 4 * 2**20
TAIL_BYTES = 2 * 2**20
# Once the run ended, its output still in the pipe gets this long to be read: a process the
# script left behind (capture/strays.py ends them) must not hold the verb up.
DRAIN_S = 5.0
_CHUNK = 2**20


def size_text(n: int) -> str:
    if n >= 2**20:
        return f"{n / 2**20:.1f} MiB"
    return f"{n / 2**10:.1f} KiB" if n >= 2**10 else f"{n} bytes"


class ScriptOutput:
    """``path`` None: the run writes to the terminal (``stdout`` is None, nothing to do).
    Else start the run with ``stdout=self.stdout, stderr=subprocess.STDOUT``, call
    ``started()`` once it runs and ``close()`` once it ended."""

    def __init__(self, path: Path | None):
        self.path = path
        self.cut_bytes = 0
        self._read_fd: int | None = None
        self.stdout: int | None = None
        if path is None:
            return
        self._file = open(path, "wb")  # noqa: SIM115 (closed by close())
        self._read_fd, self.stdout = os.pipe()
        self._written = 0
        self._tail = bytearray()
        self._past_head = 0  # bytes that came after the head
        self._stop = threading.Event()
        self._reader = threading.Thread(target=self._read, name="script-output", daemon=True)
        self._reader.start()

    def started(self) -> None:
        """The run holds its own copy of the pipe's end: the end of the output is seen when
        the run (and whatever inherited it) closed theirs."""
        if self.stdout is not None:
            os.close(self.stdout)
            self.stdout = None

    def close(self) -> int:
        """The output written out; the bytes cut from its middle (0: the whole output)."""
        if self._read_fd is None:
            return 0
        self.started()
        self._reader.join(DRAIN_S)
        self._stop.set()
        self._reader.join()
        os.close(self._read_fd)
        self._read_fd = None
        kept = bytes(self._tail[-TAIL_BYTES:])
        self.cut_bytes = self._past_head - len(kept)
        if self.cut_bytes > 0:
            self._file.write(
                f"\n[torchpace: {size_text(self.cut_bytes)} of the script's output cut here "
                f"({size_text(self._written + self._past_head)} in all); this log keeps its "
                f"first {size_text(HEAD_BYTES)} and its last {size_text(TAIL_BYTES)}]\n".encode()
            )
        self._file.write(kept)
        self._file.close()
        return self.cut_bytes

    def _read(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._read_fd], [], [], 0.2)
            if not ready:
                continue
            chunk = os.read(self._read_fd, _CHUNK)
            if not chunk:
                return
            self._take(chunk)

    def _take(self, chunk: bytes) -> None:
        room = HEAD_BYTES - self._written
        if room > 0:
            self._file.write(chunk[:room])
            self._file.flush()  # readable while the run goes on
            self._written += min(room, len(chunk))
            chunk = chunk[room:]
        if chunk:
            self._past_head += len(chunk)
            self._tail += chunk
            if len(self._tail) > 2 * TAIL_BYTES:  # trimmed now and then, not at every chunk
                del self._tail[:-TAIL_BYTES]
