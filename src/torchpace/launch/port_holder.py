"""Who holds a local TCP port a job's rendezvous is named by, before torchrun starts.

A c10d rendezvous whose port is already taken joins the store listening there as a client
(that is how a second node's launcher on the same machine meets the first). When the port
is held by some other program, torch's client waits for a store reply that never comes,
without a word and past its own timeout. So, for a loopback endpoint only, torchpace looks
up the listening socket's owner (Linux: /proc/net/tcp*, then /proc/PID/fd): a process that
is not a torch program is named, and the launch stops. An owner it cannot see (another
user's process, another OS) is left to torch, as before.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

LISTEN = "0A"  # the TCP state of a listening socket in /proc/net/tcp


def port_in_use(address: str, family: socket.AddressFamily, port: int) -> bool:
    """Whether ``address:port`` cannot be bound because another socket holds it."""
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
    except OSError as e:
        return e.errno == errno.EADDRINUSE
    finally:
        sock.close()
    return False


def listening_inodes(port: int, proc: Path = Path("/proc")) -> set[str]:
    """The inodes of the sockets listening on ``port`` (any address), from /proc/net."""
    inodes = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if (
                len(fields) > 9
                and fields[3] == LISTEN
                and int(fields[1].rsplit(":", 1)[1], 16) == port
            ):
                inodes.add(fields[9])
    return inodes


def holder(port: int, proc: Path = Path("/proc")) -> tuple[int, str] | None:
    """(pid, command line) of a process listening on ``port``; None when none can be seen."""
    wanted = {f"socket:[{inode}]" for inode in listening_inodes(port, proc)}
    if not wanted:
        return None
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = {os.readlink(fd) for fd in (entry / "fd").iterdir()}
            if links & wanted:
                raw = (entry / "cmdline").read_bytes()
                return int(entry.name), " ".join(raw.decode(errors="replace").split("\0")).strip()
        except OSError:  # gone, or not ours to read
            continue
    return None


def foreign_holder(address: str, family: socket.AddressFamily, port: int) -> str | None:
    """Why the rendezvous at ``address:port`` would wait forever: the port is held by a
    program that is not a torch one (named, with its pid); None when the port is free, its
    holder is a torch program (another launcher's store), or the holder cannot be seen."""
    if port == 0 or not port_in_use(address, family, port):
        return None
    found = holder(port)
    if found is None:
        return None
    pid, command = found
    if "torch" in command:
        return None
    return f"port {port} is already held by another program (pid {pid}: {command[:120]})"
