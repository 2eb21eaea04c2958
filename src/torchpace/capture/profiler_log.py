"""The profiler's own log lines kept off the user's terminal.

torch.profiler's C++ side (Kineto, and c10 warnings such as CPUAllocator's "Memory block of
unknown size was allocated before the profiling started") writes straight to file
descriptor 2, between the script's output and the report. While the profiled window is open
the capture child points fd 2 at a pipe read by a small filter *process*: lines that look
like C++ log lines go to ``profiler.log`` in the run folder, everything else goes through to
the real stderr unchanged and in order. A process and not a thread, because the C++ code
can write while holding the GIL: a thread that needs the GIL to drain the pipe could
deadlock the training step; and a process outlives a crash of the child, so a native crash
message written during the window still reaches the terminal.

The parent reads the log afterwards (``summarize``) to say in one line when an error was
among the lines.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from torchpace import run_files

LOG_NAME = run_files.PROFILER_LOG
# Once the window closes, the filter gets this long to pass on what was written in it, so
# that the window's lines come out before the lines after it. It can only take longer when
# a DataLoader worker started inside the window still holds the pipe (the filter then
# serves it until it exits).
DRAIN_TIMEOUT_S = 1.0
# How long the filter holds a partial line that could be the start of a log line.
HOLD_S = 0.2

# One pattern for the filter process and for `summarize` (the filter gets it as source).
# A C++ log line starts with its level and names the source file and line before "]":
#   glog and c10 since torch 2.4: "[W1123 19:10:00.123456 4242 CPUAllocator.cpp:249] ..."
#   older c10:                    "[W CPUAllocator.cpp:249] ..."
#   Kineto: "STAGE:2024-05-01 10:00:00 42:42 ActivityProfilerController.cpp:312] ..."
#           "USDT:2026-11-23 19:27:29 42:42 SyncActivityProfilerHandler.cpp:39] profiler_start"
#           "ERROR:2024-05-01 10:00:00 42:42 CuptiActivityProfiler.cpp:205] ..."
LOG_LINE = (
    rb"^\s*\[?(?:[IWEF]\d{0,4}\b|[A-Z]{2,10}:)[^\]\n]{0,160}?"
    rb"[\w.-]+\.(?:cpp|cc|cu|h|hpp):\d+\]"
)
# The levels that count as errors (E, F; ERROR, FATAL).
ERROR_LINE = rb"^\s*\[?(?:[EF]\d{0,4}\b|ERROR|FATAL)"

# The filter's whole program, run as `python -I -S -c FILTER LOG_PATH` (no site, no imports
# but os and re: it starts in milliseconds). stdin is the pipe, stdout the real stderr.
FILTER = f"""
import os, re, select, signal, sys
# Ctrl-C reaches the whole process group: the filter ends at the end of its input instead,
# so that the child's last lines still pass.
signal.signal(signal.SIGINT, signal.SIG_IGN)
log_line = re.compile({LOG_LINE!r})
log = open(sys.argv[1], "ab")
pending = b""
while True:
    try:
        # a partial line still held after a moment is someone's prompt: let it through
        if pending and not select.select([0], [], [], {HOLD_S})[0]:
            os.write(1, pending)
            pending = b""
            continue
        chunk = os.read(0, 65536)
    except InterruptedError:
        continue
    if not chunk:
        break
    pending += chunk
    lines = pending.splitlines(keepends=True)
    pending = b"" if lines[-1].endswith((b"\\n", b"\\r")) else lines.pop()
    for line in lines:
        if log_line.match(line):
            log.write(line)
            log.flush()
        else:
            os.write(1, line)
    # a partial line that cannot become a log line (a progress bar's) goes through now; one
    # that can (C++ loggers write a line in several pieces) waits for its end
    head = pending.lstrip()[:1]
    if pending and head and not (head == b"[" or head.isupper()):
        os.write(1, pending)
        pending = b""
if pending:
    (log if log_line.match(pending) else os.fdopen(1, "wb")).write(pending)
"""


class StderrFilter:
    """Routes fd 2 through the filter process between ``start()`` and ``stop()``."""

    def __init__(self, log_path: Path):
        self.log_path = Path(log_path)
        self._saved_fd: int | None = None
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        try:
            saved = os.dup(2)
        except OSError:  # no stderr at all: nothing to keep clean
            return
        read_fd, write_fd = os.pipe()
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", FILTER, str(self.log_path)],
                stdin=read_fd,
                stdout=saved,
                stderr=saved,
            )
        except OSError:
            for fd in (read_fd, write_fd, saved):
                os.close(fd)
            return
        os.close(read_fd)
        _flush_python_stderr()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._saved_fd = saved

    def stop(self) -> None:
        if self._saved_fd is None:
            return
        _flush_python_stderr()
        os.dup2(self._saved_fd, 2)  # closes this process's write end of the pipe
        os.close(self._saved_fd)
        self._saved_fd = None
        # on a timeout a worker holds the pipe; the filter serves it until it exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._process.wait(timeout=DRAIN_TIMEOUT_S)
        self._process = None


def _flush_python_stderr() -> None:
    with contextlib.suppress(AttributeError, OSError, ValueError):
        sys.stderr.flush()


@dataclass(frozen=True)
class LogSummary:
    path: Path
    lines: int
    errors: list[str]  # the error lines themselves, without their line ends

    def to_dict(self) -> dict:
        return {"path": str(self.path), "lines": self.lines, "errors": self.errors}


def summarize(run_dir: Path) -> LogSummary | None:
    """What the profiler logged in a run folder's window; None when it logged nothing."""
    path = Path(run_dir) / LOG_NAME
    try:
        data = path.read_bytes()
    except OSError:
        return None
    lines = data.splitlines()
    if not lines:
        return None
    error = re.compile(ERROR_LINE)
    errors = [x.decode(errors="replace").strip() for x in lines if error.match(x)]
    return LogSummary(path, len(lines), errors)
