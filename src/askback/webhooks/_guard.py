"""The connect-time half of `webhooks._destinations`: an httpcore network backend that resolves a webhook's host
itself, judges every address it resolves to (`destination_problem`), and connects to the addresses it judged, never
resolving twice, while TLS is still checked against the URL's name. `guarded_transport` puts it under an httpx
transport; the dispatcher's client is built on it (`dispatcher._http_client`).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence

import anyio
import httpcore
import httpx

from askback.webhooks._destinations import destination_problem
from askback.webhooks.endpoints import redacted_url

__all__ = ["DestinationRefused", "GuardedBackend", "Resolve", "guarded_transport", "origin"]

logger = logging.getLogger("askback.webhooks")

Resolve = Callable[[str, int], Awaitable[Sequence[str]]]
"""A resolver: the addresses (as text) a host name and port resolve to, in the order to try them."""


class DestinationRefused(httpx.TransportError):
    """The dispatcher refused to connect: the webhook's host resolved to an address it may not go to. An attempt
    that meets it fails (its error is this class's name) and is retried on the usual schedule, in case the name
    resolves elsewhere later."""


async def _system_resolve(host: str, port: int) -> Sequence[str]:
    found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in found))


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Connects only where `destination_problem` allows: resolves the host with `resolve` (the system's by
    default), refuses the connection (`DestinationRefused`) if any address it resolves to is refused, else
    connects to those addresses in turn. `allowed` holds the (host, port) pairs whose endpoints say
    `allow_private`."""

    def __init__(self, allowed: Iterable[tuple[str, int]] = (), *, resolve: Resolve | None = None) -> None:
        self._allowed = frozenset((host.lower(), port) for host, port in allowed)
        self._resolve = resolve or _system_resolve
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            with anyio.fail_after(timeout):
                addresses = await self._resolve(host, port)
        except TimeoutError:
            raise httpcore.ConnectTimeout(f"resolving {host} took too long") from None
        except OSError as exc:
            raise httpcore.ConnectError(f"{host} does not resolve ({exc.strerror or exc})") from None
        allow = (host.lower(), port) in self._allowed
        for address in addresses:
            problem = destination_problem(address, allow_private=allow)
            if problem is not None:
                remedy = (
                    "a webhook never goes to a cloud metadata service"
                    if destination_problem(address, allow_private=True) is not None
                    else "set allow_private = true on the endpoint if it is meant to be reached there"
                )
                logger.warning("askback webhooks: not connecting to %s port %d: %s; %s", host, port, problem, remedy)
                raise DestinationRefused(f"{host} resolves to {address}, and {problem}")
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                failure = exc
        raise failure or httpcore.ConnectError(f"{host} resolves to no address")

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise DestinationRefused("webhooks are sent over TCP only")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _RedactedRequestLines(logging.Filter):
    """httpx logs every request's whole URL at INFO ("HTTP Request: POST https://...?token=..."), and a webhook URL's
    query string may hold the receiver's token: the line keeps the URL as `redacted_url` shows it."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > 1 and isinstance(args[1], httpx.URL):
            record.args = (args[0], redacted_url(str(args[1])), *args[2:])
        return True


def _redact_httpx_request_lines() -> None:
    httpx_logger = logging.getLogger("httpx")
    if not any(isinstance(f, _RedactedRequestLines) for f in httpx_logger.filters):
        httpx_logger.addFilter(_RedactedRequestLines())


def guarded_transport(
    allowed: Iterable[tuple[str, int]] = (), *, resolve: Resolve | None = None
) -> httpx.AsyncHTTPTransport:
    """An httpx transport whose connections go through `GuardedBackend(allowed, resolve=resolve)`; certificates
    are checked as httpx checks them (its default context, `SSL_CERT_FILE` and `SSL_CERT_DIR` included). httpx's own
    request log lines show URLs redacted from then on."""
    _redact_httpx_request_lines()
    transport = httpx.AsyncHTTPTransport()
    # httpx gives no way to choose the network backend of its pool: the transport keeps its request and response
    # mapping, and its pool is replaced by one built the same way around the guard (the test of the guard fails
    # if a new httpx moves this attribute).
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=100,  # httpx's own defaults
        max_keepalive_connections=20,
        keepalive_expiry=5.0,
        network_backend=GuardedBackend(allowed, resolve=resolve),
    )
    return transport


def origin(url: str) -> tuple[str, int]:
    """The (host, port) pair the guard sees for `url`: the host as httpx sends it (IDNA, no brackets)."""
    parsed = httpx.URL(url)
    return parsed.raw_host.decode("ascii").lower(), parsed.port or (443 if parsed.scheme == "https" else 80)
