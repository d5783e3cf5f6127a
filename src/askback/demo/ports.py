"""Where `askback demo` listens: one `--port P` places every port it opens, the demo server on P, Demo Mail on P + 1
and the agent runtime's webhook receiver on P + 2, all on loopback; without it (`--port 0`) each takes a free one.
Every port is checked before anything starts, so a taken one is one error naming it and what to pass instead."""

from __future__ import annotations

import errno
import socket
from dataclasses import dataclass

from askback.errors import ListenError

__all__ = ["DemoPorts", "check_free", "demo_ports", "loopback_socket"]

HOST = "127.0.0.1"
SPAN = 3  # the ports from --port on that the demo opens


@dataclass(frozen=True)
class DemoPorts:
    """The demo's ports: the demo server's (`server`, never 0), Demo Mail's and the receiver's (0: a free one)."""

    server: int
    mail: int
    receiver: int

    def named(self) -> dict[str, int]:
        return {"the demo server": self.server, "Demo Mail": self.mail, "the webhook receiver": self.receiver}


def demo_ports(port: int, free: int) -> DemoPorts:
    """The ports for `--port port`; with 0, the server on `free` and the others on free ones of their own."""
    if port == 0:
        return DemoPorts(server=free, mail=0, receiver=0)
    return DemoPorts(server=port, mail=port + 1, receiver=port + 2)


def _taken(port: int, what: str, given: int, reason: str) -> ListenError:
    layout = (
        f" (--port {given} puts the demo server on {given}, Demo Mail on {given + 1} and the webhook receiver on "
        f"{given + 2})"
        if given
        else ""
    )
    return ListenError(
        f"cannot listen on {HOST}:{port} for {what}{layout}: {reason}; pass another --port, or --port 0 for free ones"
    )


def loopback_socket(port: int, what: str, *, given: int = 0) -> socket.socket:
    """A socket bound to `port` on loopback (0: a free one), listening; `ListenError` naming `what` if it cannot be."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        # Listening before uvicorn starts: a request sent right away waits in the backlog rather than being refused.
        sock.listen(64)
    except OSError as exc:
        sock.close()
        in_use = exc.errno == errno.EADDRINUSE
        raise _taken(port, what, given, "another program listens there" if in_use else str(exc)) from None
    return sock


def check_free(ports: DemoPorts, given: int) -> None:
    """`ListenError` for the first of `ports` that cannot be had now, before the demo starts anything."""
    for what, port in ports.named().items():
        if port:
            loopback_socket(port, what, given=given).close()
