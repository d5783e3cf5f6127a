"""Listen streams, closed when the server stops.

A 2025-11-25 client may open a standalone GET stream on `/mcp` to hear from the server outside any request (the MCP
Inspector keeps one open). It ends only when the client leaves, so a stopping server would wait for it its whole
graceful timeout, then cancel it and log an error. `ListenStreams` holds the open ones; `CloseListenStreams`, the ASGI
piece in front of `/mcp`, ends each cleanly (its response finished, so the connection closes) once `close()` is
called, which `askback serve` does as soon as its process is told to stop. Requests in flight are left to finish.
"""

from __future__ import annotations

import anyio
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CloseListenStreams", "ListenStreams"]


class ListenStreams:
    """The listen streams open in this process; `close()` ends them, and any opened afterwards at once."""

    def __init__(self) -> None:
        self._open: set[anyio.CancelScope] = set()
        self.closed = False

    def close(self) -> None:
        """End every listen stream (call it in the event loop's thread)."""
        self.closed = True
        for scope in list(self._open):
            scope.cancel()

    def _add(self, scope: anyio.CancelScope) -> None:
        self._open.add(scope)
        if self.closed:
            scope.cancel()

    def _discard(self, scope: anyio.CancelScope) -> None:
        self._open.discard(scope)


class CloseListenStreams:
    """Hazard: a GET stream on `path` that the client never closes holds a stopping server for its whole graceful
    timeout. Such a request runs under a cancel scope that `streams.close()` cancels; its response is then finished
    here (or, if it had not started, answered 503), so that the server sees the connection end."""

    def __init__(self, app: ASGIApp, *, path: str, streams: ListenStreams) -> None:
        self.app = app
        self.path = path
        self.streams = streams

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "GET" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        started = ended = False

        async def sending(message: Message) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                ended = True
            await send(message)

        with anyio.CancelScope() as stream:
            self.streams._add(stream)
            try:
                await self.app(scope, receive, sending)
            finally:
                self.streams._discard(stream)
        if not stream.cancelled_caught or ended:
            return
        if not started:
            await send({"type": "http.response.start", "status": 503, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
