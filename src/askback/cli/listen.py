"""The sockets `askback serve` listens on, made in the parent process before anything says where it serves.

`bind` resolves `--host` and binds `--port` on each address it names (as asyncio's `create_server` would), but does
not listen yet: a failure (the port in use, an address not this machine's, a host that resolves to nothing, a port
the process may not take) is a `ListenError` whose message says what to pass instead, before the server is even
imported. `listen` opens the bound sockets for connections once the database is ready; only then is the URL
announced. uvicorn gets the listening sockets, in its one process or handed to each worker.
"""

from __future__ import annotations

import contextlib
import errno
import socket
from collections.abc import Iterator, Sequence

from askback.errors import ListenError

__all__ = ["bind", "bind_failure", "bound", "close", "listen"]

_ADDRESS_FORMS = "127.0.0.1 for this machine only, 0.0.0.0 for every interface, or one of this machine's addresses"


def _shown(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_failure(host: str, port: int, code: int | None, reason: str, *, unresolved: bool = False) -> str:
    """What to tell the person when `host:port` could not be bound: `unresolved` when `host` named no address,
    else `code` is the `errno` of the failed bind or listen; `reason` is the system's own words."""
    where = f"cannot listen on {_shown(host, port)}"
    if unresolved:
        return (
            f"{where}: {host!r} is not an IP address and no address was found for it ({reason}); "
            f"pass --host {_ADDRESS_FORMS}"
        )
    if code == errno.EADDRINUSE:
        return (
            f"{where}: the address is already in use (another program listens on port {port}); stop it "
            "or pass another --port"
        )
    if code == errno.EADDRNOTAVAIL:
        return f"{where}: {host} is not an address of this machine ({reason}); pass --host {_ADDRESS_FORMS}"
    if code in (errno.EACCES, errno.EPERM):
        return (
            f"{where}: permission denied (ports below 1024 need privileges); pass a --port of 1024 or more, or "
            "give the process the right to bind it (CAP_NET_BIND_SERVICE)"
        )
    return f"{where}: {reason}; check --host and --port"


def bind(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address `host` resolves to, on `port`, not yet listening; `ListenError` if any
    cannot be bound (the others are closed)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ListenError(bind_failure(host, port, exc.errno, exc.strerror or str(exc), unresolved=True)) from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(found):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                # Each address gets its own socket: `::` must not also claim the IPv4 port bound beside it.
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.set_inheritable(True)  # handed to the worker processes
    except OSError as exc:
        close(sockets)
        raise ListenError(bind_failure(host, port, exc.errno, exc.strerror or str(exc))) from None
    return sockets


def listen(sockets: Sequence[socket.socket], host: str, port: int, backlog: int) -> None:
    """Accept connections on the bound `sockets` from now on (they wait in the backlog until a worker takes
    them); `ListenError` if another process took the port since it was bound."""
    try:
        for sock in sockets:
            sock.listen(backlog)
    except OSError as exc:
        raise ListenError(bind_failure(host, port, exc.errno, exc.strerror or str(exc))) from None


def close(sockets: Sequence[socket.socket]) -> None:
    for sock in sockets:
        sock.close()


@contextlib.contextmanager
def bound(host: str, port: int) -> Iterator[list[socket.socket]]:
    """`bind(host, port)`, closing the sockets when the block ends."""
    sockets = bind(host, port)
    try:
        yield sockets
    finally:
        close(sockets)
