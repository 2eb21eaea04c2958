"""Processes a run of the script left behind, found and ended.

Ending the run's process group stops the script, its DataLoader workers and its plain
subprocesses; a daemon it started in a session of its own (``setsid``, a double fork) is in
none of them and went on writing into the folder that tune had just put back. So the verb's
process becomes a child subreaper (Linux's PR_SET_CHILD_SUBREAPER): a descendant orphaned
by the run is re-parented to it rather than to init, and after the run the processes that
are its children, started since the run did, are the run's leftovers. Each gets SIGTERM,
then SIGKILL, and is named.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time

from torchpace.printable import printable

_PR_SET_CHILD_SUBREAPER = 36
# How long a leftover gets to end after SIGTERM before SIGKILL.
TERM_GRACE_S = 2.0


def adopt_orphans() -> bool:
    """Make this process the subreaper of what it starts (once; idempotent). False where
    the system has none (not Linux): leftovers are then not found."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def ticks_now() -> int | None:
    """Now, in the clock ticks since boot that /proc/PID/stat's start times count (rounded
    down: a process started from here on started at this or later); None without /proc."""
    try:
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return int(uptime * os.sysconf("SC_CLK_TCK")) - 1


def end_leftovers(since: int | None) -> list[str]:
    """End this process's children started at ``since`` (ticks) or later (the run's orphans:
    the run's own process was waited for already), and their descendants. Returns them as
    "pid N (command line)"."""
    if since is None:
        return []
    named: dict[int, str] = {}
    for _ in range(3):  # one killed may have had a child of its own, now ours
        found = [pid for pid in _adopted(since) if pid not in named]
        if not found:
            break
        named.update({pid: _command_line(pid) for pid in found})
        _terminate(found)
    return [f"pid {pid} ({named[pid]})" for pid in sorted(named)]


def _terminate(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + TERM_GRACE_S
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if not _gone(pid)}
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + TERM_GRACE_S
    while alive and time.monotonic() < deadline:
        alive = {pid for pid in alive if not _gone(pid)}
        time.sleep(0.02)


def leftovers_line(names: list[str]) -> str:
    return (
        f"the script left {len(names)} process{'es' if len(names) != 1 else ''} running after "
        f"its run (started in a session of their own): {', '.join(names)}; torchpace ended "
        "them (SIGTERM, then SIGKILL) so that they write nothing more into your folder"
    )


def _adopted(since: int) -> list[int]:
    """This process's children started since ``since`` and all their descendants; the ones
    that ended already are reaped, not named."""
    me = os.getpid()
    table = {}
    for name in os.listdir("/proc") if os.path.isdir("/proc") else ():
        stat = _stat(int(name)) if name.isdigit() and int(name) != me else None
        if stat:
            table[int(name)] = (stat[0], int(stat[1]), int(stat[19]))
    found = [pid for pid, (_, ppid, start) in table.items() if ppid == me and start >= since]
    for pid in found:  # grows as it goes: each one's children after it
        found += [child for child, (_, ppid, _) in table.items() if ppid == pid]
    living = []
    for pid in found:
        if table[pid][0] == "Z":
            _gone(pid)
        else:
            living.append(pid)
    return living


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields from the state on (the command's name may hold spaces)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text.rpartition(")")[2].split()


def _gone(pid: int) -> bool:
    """Ended (and reaped, where it was this process's child)."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not ours (yet): gone when /proc has it no more, or a zombie
        stat = _stat(pid)
        return stat is None or stat[0] == "Z"
    return done == pid


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(w.decode(errors="replace") for w in words if w)
    return printable(text[:200]) or "?"
