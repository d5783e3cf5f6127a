"""Small ASGI pieces the products' own pages share (the hosted account pages, the runtime's web inbox).

`CappedBody` refuses (413) a request body larger than its limit: a declared `Content-Length` over it before
anything is read, and a streamed body as soon as it passes it. The refusal is raised from `receive`, inside the
route, as a Starlette `HTTPException`, so the app's own error page answers it.
"""

from __future__ import annotations

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["BodyTooLarge", "CappedBody"]


class BodyTooLarge(HTTPException):
    def __init__(self) -> None:
        super().__init__(status_code=413)


class CappedBody:
    """Refuses (413) a request body larger than `limit` bytes, declared or streamed."""

    def __init__(self, app: ASGIApp, *, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        too_large = declared.isdigit() and int(declared) > self.limit
        seen = 0

        async def capped() -> Message:
            nonlocal seen
            if too_large:
                raise BodyTooLarge()
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge()
            return message

        await self.app(scope, capped, send)
