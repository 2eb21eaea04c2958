"""Signals, both ways: what a child's return code says (a signal is not an exit code), and
SIGTERM and SIGHUP to a verb handled as Ctrl-C is (the partial report written, the child's
process group stopped, the user's files put back) instead of the default death that leaves
the child running."""

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


# Ended as Ctrl-C is: SIGTERM (kill, a job scheduler) and SIGHUP (a closed terminal, a
# dropped ssh session), whose default is a death that leaves the child running and the
# user's files as the run left them.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
# The stop signals this process received under terminate_as_interrupt(), in order: what
# stopped a verb is named by them ("SIGTERM"), not assumed to be Ctrl-C.
_RECEIVED: list[int] = []


def interrupt_name() -> str:
    """What interrupted this process, in the user's words: the last stop signal received
    ("SIGTERM", "SIGHUP"), else "Ctrl-C" (SIGINT, which raises KeyboardInterrupt itself)."""
    return signal.Signals(_RECEIVED[-1]).name if _RECEIVED else "Ctrl-C"


@contextmanager
def terminate_as_interrupt() -> Iterator[list[int]]:
    """SIGTERM and SIGHUP raise KeyboardInterrupt in the main thread, as SIGINT does, so every
    path that handles Ctrl-C (a child stopped with its process group, the user's files put
    back, the partial report) handles them too. Yields the list of the signals received
    (the verb exits 128 + the signal then). After SIGHUP the terminal is gone: what would
    have been printed on it goes to /dev/null instead of failing the report's writes."""
    received: list[int] = []
    _RECEIVED.clear()  # this verb's signals only
    with suppress(ValueError):  # not the main thread
        interrupt_on_sigint()  # a verb started in the background: Ctrl-C paths still work

    def _handler(signum, frame):
        received.append(signum)
        _RECEIVED.append(signum)
        if signum == signal.SIGHUP:
            _leave_the_terminal()
        raise KeyboardInterrupt

    try:
        previous = {s: signal.signal(s, _handler) for s in STOP_SIGNALS}
    except ValueError:  # not the main thread (a test calling the verb): nothing to handle
        yield received
        return
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        _RECEIVED.clear()


def _leave_the_terminal() -> None:
    """Standard output and error that are a terminal (hung up: writes fail with EIO) are
    pointed at /dev/null; a file or a pipe is kept (the lines still reach it)."""
    import os

    null = os.open(os.devnull, os.O_WRONLY)
    try:
        for fd in (1, 2):
            with suppress(OSError):
                if os.isatty(fd):
                    os.dup2(null, fd)
    finally:
        os.close(null)


def interrupted_status(received: list[int], default: int) -> int:
    """The exit status of a verb that was interrupted: 128 + the signal after SIGTERM or
    SIGHUP (143, 129), else ``default``."""
    stops = [s for s in received if s in STOP_SIGNALS]
    return 128 + stops[0] if stops else default
