"""Which server an account event speaks for when it was taken in a way that names none (deprecated forms).

Events are bound to the server that sent them: the receiver knows it from the secret that signed the event
(`webhook_receiver(servers=...)`, `--webhook-secret-env URL=VAR`), an in-process subscription from `server=`. The
forms of the previous release named no server (`webhook_receiver(secrets=...)`, `--webhook-secret-env VAR`,
`resume_on_account_events` without `server=`), and an event then resumed the calls waiting for that account on any
server. Those forms still work, deprecated, and bind as narrowly as the runtime's parked calls allow:

- no call parked yet: nothing is decided (nothing could be resumed either), and the next event looks again;
- every parked call goes to one server: the events speak for that server alone, from then on;
- parked calls go to several servers: the events speak for any server, as they did before servers were named, and
  the log says once that an event from one server can resume calls to another until the servers are named.

`binding` is that decision as a pure function of the servers the parked calls go to; `UnnamedServer` reads them
once, at the first event that finds some.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import anyio

from askback.runtime._account_events import same_server

if TYPE_CHECKING:
    from askback.runtime.calls import Runtime

__all__ = ["AnyServer", "Bound", "Undecided", "UnnamedServer", "binding"]

log = logging.getLogger("askback.runtime.webhooks")


@dataclass(frozen=True)
class Bound:
    """Every parked call goes to `server`: the events speak for it alone."""

    server: str
    kind: Literal["bound"] = "bound"


@dataclass(frozen=True)
class AnyServer:
    """Parked calls go to several servers (`servers`, two of them): the events speak for any server."""

    servers: tuple[str, str]
    kind: Literal["any"] = "any"


@dataclass(frozen=True)
class Undecided:
    """No call is parked: nothing to bind to yet."""

    kind: Literal["undecided"] = "undecided"


def binding(servers: Sequence[str]) -> Bound | AnyServer | Undecided:
    """What events naming no server speak for, given the servers the parked calls go to (URLs that name one server,
    `same_server`, count once)."""
    if not servers:
        return Undecided()
    first = servers[0]
    other = next((s for s in servers[1:] if not same_server(s, first)), None)
    return Bound(first) if other is None else AnyServer((first, other))


async def _parked_servers(runtime: Runtime) -> list[str]:
    """The servers the parked calls go to, until two that differ are found."""
    found: list[str] = []
    async for page in runtime.calls.pages():
        for record in page:
            if not any(same_server(record.server, seen) for seen in found):
                found.append(record.server)
                if len(found) == 2:
                    return found
    return found


class UnnamedServer:
    """The server the events of one deprecated `form` speak for (`instead`: the form naming it), decided once."""

    def __init__(self, runtime: Runtime, *, form: str, instead: str) -> None:
        self._runtime = runtime
        self._form = form
        self._instead = instead
        self._decided: Bound | AnyServer | None = None
        self._deciding = anyio.Lock()

    async def server(self) -> str | None:
        """The server an event speaks for; `None`: any server (or none decided yet, while no call is parked)."""
        if self._decided is None:
            async with self._deciding:
                if self._decided is None:
                    decided = binding(await _parked_servers(self._runtime))
                    if isinstance(decided, Undecided):
                        return None
                    self._decided = decided
                    self._say(decided)
        return self._decided.server if isinstance(self._decided, Bound) else None

    def _say(self, decided: Bound | AnyServer) -> None:
        if isinstance(decided, Bound):
            shown = _origin(decided.server)
            log.info("%s (deprecated): account events are taken as the events of %s", self._form, shown)
            return
        log.warning(
            "%s (deprecated) names no server, and parked calls go to several (%s and %s): an account event from one "
            "server can resume calls waiting for the same account on another, until the servers are named: %s",
            self._form,
            *map(_origin, decided.servers),
            self._instead,
        )


def _origin(url: str) -> str:
    """A server as the log shows it: its scheme, host and port, never a user-info, a path or a query."""
    try:
        parts = urlsplit(url)
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "a server whose URL does not parse"
    host = parts.hostname or ""
    return f"{parts.scheme}://{f'[{host}]' if ':' in host else host}{port}"
