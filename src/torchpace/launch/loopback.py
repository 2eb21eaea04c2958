"""Keep a single-node job's stores on the loopback interface.

torch's TCPStore server listens on every interface (``[::]``, dual-stack) whatever host name
it is given: the name only tells the clients where to connect. torchrun's agent starts two
of them, the c10d rendezvous store and the store the workers meet on (MASTER_ADDR /
MASTER_PORT), and neither has any authentication: anyone who can reach the port can join the
job or disturb it. For a job whose stores are named by a loopback address, nothing outside
this machine needs to reach them, so torchpace hands TCPStore a socket it bound to that
address itself (TCPStore's ``master_listen_fd``): the store then listens there alone.

``loopback_stores()`` does this for the stores created inside it (torchrun's ``run()``, in
the launching process); a store named by any other address is created as torch would.
"""

from __future__ import annotations

import contextlib
import datetime
import errno
import ipaddress
import socket
from collections.abc import Iterator

# Passed through to TCPStore as torch's own defaults (its signature, by keyword and position).
_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)


def loopback_bind_address(host: str) -> tuple[socket.AddressFamily, str] | None:
    """(family, address) to listen on for a store named ``host``, when every address the
    name resolves to is a loopback one (127.0.0.0/8, ::1; IPv4 first); else None."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    found = [(family, sockaddr[0]) for family, _, _, _, sockaddr in infos]
    if not found:
        return None
    try:
        if not all(ipaddress.ip_address(a.split("%")[0]).is_loopback for _, a in found):
            return None
    except ValueError:
        return None
    return next((x for x in found if x[0] == socket.AF_INET), found[0])


def bound_listener(host: str, port: int) -> tuple[int, int] | None:
    """(file descriptor, port) of a listening socket bound to ``host``'s loopback address
    and ``port`` (0: a free one), whose ownership passes to the caller; None when ``host``
    is not a loopback name. A port another process holds raises torch's own
    DistNetworkError ("address already in use"), which torch's callers expect from a
    store: the c10d rendezvous then joins as a client (several launchers on one machine)."""
    where = loopback_bind_address(host)
    if where is None:
        return None
    family, address = where
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((address, port))
        sock.listen(socket.SOMAXCONN)
        bound_port = sock.getsockname()[1]
    except OSError as e:
        sock.close()
        from torch.distributed import DistNetworkError

        why = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror or e
        raise DistNetworkError(f"the store's port {address}:{port}: {why}") from e
    return sock.detach(), bound_port


def _loopback_store_class(base: type) -> type:
    class LoopbackTCPStore(base):  # type: ignore[misc, valid-type]
        """A TCPStore whose server, for a loopback host, listens on that address alone."""

        def __init__(
            self,
            host_name: str,
            port: int,
            world_size: int | None = None,
            is_master: bool = False,
            timeout: datetime.timedelta = _DEFAULT_TIMEOUT,
            wait_for_workers: bool = True,
            multi_tenant: bool = False,
            master_listen_fd: int | None = None,
            use_libuv: bool = True,
        ):
            if is_master and master_listen_fd is None:
                listener = bound_listener(host_name, port)
                if listener is not None:
                    master_listen_fd, port = listener
            super().__init__(
                host_name,
                port,
                world_size,
                is_master,
                timeout,
                wait_for_workers,
                multi_tenant,
                master_listen_fd,
                use_libuv,
            )

    return LoopbackTCPStore


@contextlib.contextmanager
def loopback_stores() -> Iterator[None]:
    """Inside: a TCPStore server created by torchrun's agent for a loopback host listens on
    that address alone (the two places torch.distributed.elastic creates its servers)."""
    import torch.distributed as dist
    from torch.distributed.elastic.rendezvous import c10d_rendezvous_backend

    original = dist.TCPStore
    store = _loopback_store_class(original)
    dist.TCPStore = store  # dynamic_rendezvous's shared store: dist.TCPStore(...)
    c10d_rendezvous_backend.TCPStore = store  # the rendezvous store: its own imported name
    try:
        yield
    finally:
        dist.TCPStore = original
        c10d_rendezvous_backend.TCPStore = original
