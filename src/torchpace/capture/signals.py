"""Signals, both ways: what a child's return code says (a signal is not an exit code), and
SIGTERM to a verb handled as Ctrl-C is (the partial report written, the child's process
group stopped) instead of the default death that leaves the child running."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress

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


def interrupt_on_sigint() -> None:
    """SIGINT raises KeyboardInterrupt in this process even when it was started with SIGINT
    ignored, and the processes it starts get it back at its default.

    A job started in the background by a non-interactive shell (``cmd &`` in a script, a CI
    runner's step) inherits SIGINT ignored, and Python then installs no handler for it.
    torchpace stops a capture by SIGINT (the watchdog's --timeout, the parent's Ctrl-C, a
    job's ranks at the end of a trial): ignored, the child ran on until the parent's SIGKILL
    backstop, and the timeout and Ctrl-C paths of six tests failed when the suite was started
    that way. A terminal's Ctrl-C never reaches a background job (it is not in the foreground
    process group), so handling SIGINT takes nothing from the user."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


@contextmanager
def terminate_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as SIGINT does, so every path that
    handles Ctrl-C (a child stopped with its process group, the partial report) handles it
    too. Yields the list of the signals received (the verb exits 128 + SIGTERM then)."""
    received: list[int] = []
    with suppress(ValueError):  # not the main thread
        interrupt_on_sigint()  # a verb started in the background: Ctrl-C paths still work

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
