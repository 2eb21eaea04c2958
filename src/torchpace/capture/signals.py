"""Signals, both ways: what a child's return code says (a signal is not an exit code), and
SIGTERM to a verb handled as Ctrl-C is (the partial report written, the child's process
group stopped) instead of the default death that leaves the child running."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager

# What each deadly signal most often means for a training script.
_MEANING = {
    signal.SIGKILL: "maybe the OOM killer; check dmesg",
    signal.SIGSEGV: "a crash in native code",
    signal.SIGBUS: "a crash in native code, or /dev/shm full",
    signal.SIGABRT: "aborted by native code",
    signal.SIGFPE: "an arithmetic fault in native code",
    signal.SIGILL: "an instruction this CPU does not have",
}


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_returncode(returncode: int) -> str:
    """ "killed by SIGSEGV (signal 11: a crash in native code)", "ended with exit code 3"."""
    if returncode >= 0:
        return f"ended with exit code {returncode}"
    signum = -returncode
    meaning = _MEANING.get(signum)
    return f"killed by {signal_name(signum)} (signal {signum}" + (
        f": {meaning})" if meaning else ")"
    )


def exit_status(returncode: int) -> int:
    """A child's return code as a shell's exit status: death by signal N is 128 + N (139 for
    a segfault), never the negative number Popen gives (which would read 245)."""
    return 128 - returncode if returncode < 0 else returncode


@contextmanager
def terminate_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does, so every path that
    handles Ctrl-C (a child stopped with its process group, the partial report) handles it
    too. Yields the list of the signals received (the verb exits 128 + SIGTERM then)."""
    received: list[int] = []

    def _handler(signum, frame):
        received.append(signum)
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, _handler)
    except ValueError:  # not the main thread (a test calling the verb): nothing to handle
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def interrupted_status(received: list[int], default: int) -> int:
    """The exit status of a verb that was interrupted: 143 after SIGTERM, else ``default``."""
    return 128 + signal.SIGTERM if signal.SIGTERM in received else default
