"""The HTTP application for an `Askback` server: Streamable HTTP at `/mcp` (2026-07-28, stateless), health at
`/healthz` and `/readyz`, the serving instance in an `X-Askback-Instance` response header, and bearer
authentication that feeds the SDK's principal binding of `requestState`.

Authentication: pass a `TokenVerifier` (the SDK's protocol) to check real tokens, and a request without one is
refused (401); with `demo_auth` (the demo server), a token `demo-<name>` is user `<name>` and a request without a
token is the user `anonymous`, so state minted for a signed-in user is refused to an anonymous caller and the other
way round.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from mcp_types import PROTOCOL_VERSION_META_KEY
from mcp_types.version import (
    HANDSHAKE_PROTOCOL_VERSIONS,
    LATEST_HANDSHAKE_VERSION,
    LATEST_MODERN_VERSION,
    MODERN_PROTOCOL_VERSIONS,
)
from starlette.applications import Starlette
from starlette.authentication import AuthCredentials, AuthenticationBackend, AuthenticationError
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.middleware.authentication import AuthenticationMiddleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from askback.audit import instance_id
from askback.errors import AskbackError, HeaderMismatchError, ProtocolVersionMissingError
from askback.server import Askback

__all__ = ["DemoTokenVerifier", "build_app"]

logger = logging.getLogger("askback")

ANONYMOUS = "anonymous"
_OPEN_PATHS = frozenset({"/healthz", "/readyz"})
_MCP_PATH = "/mcp"
_DEMO_TOKEN = re.compile(r"^demo-([A-Za-z0-9_.\-]{1,64})$")


class DemoTokenVerifier:
    """Demo authentication: `demo-<name>` is user `<name>`. Never use it where the users are real."""

    async def verify_token(self, token: str) -> AccessToken | None:
        match = _DEMO_TOKEN.match(token)
        if match is None:
            return None
        return AccessToken(token="demo", client_id="askback-demo", subject=match.group(1), scopes=[])


class _BearerBackend(AuthenticationBackend):
    def __init__(self, verifier: TokenVerifier, *, allow_anonymous: bool) -> None:
        self.verifier = verifier
        self.allow_anonymous = allow_anonymous

    async def authenticate(self, conn: HTTPConnection) -> tuple[AuthCredentials, AuthenticatedUser] | None:
        if conn.url.path in _OPEN_PATHS:
            return None  # probes carry no token
        header = conn.headers.get("authorization")
        if not header:
            if not self.allow_anonymous:
                raise AuthenticationError("this server needs an Authorization: Bearer <token> header")
            anonymous = AccessToken(token="anonymous", client_id="anonymous", subject=ANONYMOUS, scopes=[])
            return AuthCredentials([]), AuthenticatedUser(anonymous)
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise AuthenticationError("use an Authorization: Bearer <token> header")
        info = await self.verifier.verify_token(token.strip())
        if info is None:
            raise AuthenticationError("the bearer token was not accepted")
        return AuthCredentials(info.scopes), AuthenticatedUser(info)


def _auth_error(conn: HTTPConnection, exc: Exception) -> Response:
    return JSONResponse(
        {"error": "invalid_token", "error_description": str(exc)},
        status_code=401,
        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'},
    )


class _InstanceHeader:
    """Names the serving process on every response, so a person (or a test) can see which instance answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        value = instance_id().encode()

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-askback-instance", value)]
            await send(message)

        await self.app(scope, receive, send_with_header)


class _EraGuard:
    """R3: a request whose `MCP-Protocol-Version` header names a 2025-11-25-era version while its `_meta` names a
    2026-07-28 one is refused with -32020 (HTTP 400). The SDK routes by the header alone, so such a request would
    otherwise reach the legacy session path. Only requests with a legacy header are read here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        header = Headers(scope=scope).get(MCP_PROTOCOL_VERSION_HEADER)
        if header is None or header not in HANDSHAKE_PROTOCOL_VERSIONS:
            await self.app(scope, receive, send)
            return
        body, replay = await _read_body(receive)
        declared = _meta_version(body)
        if declared is not None and declared != header:
            message = f"MCP-Protocol-Version header {header!r} does not match _meta protocolVersion {declared!r}"
            await _rpc_error(body, HeaderMismatchError(message))(scope, receive, send)
            return
        await self.app(scope, replay, send)


_VERSION_MISSING = (
    f"The MCP-Protocol-Version header is missing. This server serves {LATEST_MODERN_VERSION}: send the header on "
    f'every request, equal to params._meta["{PROTOCOL_VERSION_META_KEY}"]; and {LATEST_HANDSHAKE_VERSION}: send '
    f"initialize first, then the header with the Mcp-Session-Id that initialize returned on every later request."
)


class _VersionHeaderRequired:
    """A POST to the MCP endpoint that carries neither an `MCP-Protocol-Version` header nor an `Mcp-Session-Id`
    and is not `initialize` is refused with -32600 (HTTP 400), naming the header to send for each revision served.
    The SDK routes by the header alone: without one, the request takes the 2025-11-25 session path and gets "Missing
    session ID", which sends a 2026-07-28 client looking for a session it must not open. `initialize` (how a
    2025-11-25 client starts), batches and bodies that are not JSON-RPC go on to the SDK. Only requests with neither
    header are read here."""

    def __init__(self, app: ASGIApp, *, path: str) -> None:
        self.app = app
        self.path = path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        if MCP_PROTOCOL_VERSION_HEADER in headers or MCP_SESSION_ID_HEADER in headers:
            await self.app(scope, receive, send)
            return
        body, replay = await _read_body(receive)
        method = _parsed(body).get("method")
        if isinstance(method, str) and method != "initialize":
            supported = [*MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS]
            await _rpc_error(body, ProtocolVersionMissingError(_VERSION_MISSING, supported))(scope, receive, send)
            return
        await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> tuple[bytes, Receive]:
    """The request body, read up to the SDK's size limit, and a `receive` that hands the SDK the same messages.

    A body over the limit is not read further: the SDK sees it all and answers 413 as it would have."""
    cached: deque[Message] = deque()
    body = bytearray()
    while True:
        message = await receive()
        cached.append(message)
        if message["type"] != "http.request":
            break  # a disconnect: the SDK notices it as well
        body += message.get("body", b"")
        if not message.get("more_body", False) or len(body) > DEFAULT_MAX_REQUEST_BODY_SIZE:
            break

    async def replay() -> Message:
        if cached:
            return cached.popleft()
        return await receive()

    return bytes(body), replay


def _rpc_error(body: bytes, exc: AskbackError) -> Response:
    """The JSON-RPC error reply of an HTTP piece, for the request in `body`."""
    error: dict[str, Any] = {"code": exc.code, "message": str(exc)}
    data = exc.wire_data()
    if data is not None:
        error["data"] = data
    return JSONResponse({"jsonrpc": "2.0", "id": _request_id(body), "error": error}, status_code=exc.http_status)


def _parsed(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _meta_version(body: bytes) -> str | None:
    params = _parsed(body).get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    version = meta.get(PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    return version if isinstance(version, str) else None


def _request_id(body: bytes) -> Any:
    return _parsed(body).get("id")


def build_app(
    server: Askback,
    *,
    token_verifier: TokenVerifier | None = None,
    host: str = "127.0.0.1",
    json_response: bool = False,
    allow_anonymous: bool | None = None,
) -> Starlette:
    """The ASGI app serving `server`. The store is opened before the first request is taken.

    `allow_anonymous` (default: only with demo authentication) serves requests without a token as the user
    `anonymous`; otherwise they get 401.
    """
    verifier = token_verifier or (DemoTokenVerifier() if server.settings.demo_auth else None)
    if allow_anonymous is None:
        allow_anonymous = token_verifier is None
    # 2026-07-28 requests are served statelessly whatever this says; a 2025-11-25 client that sends `initialize`
    # gets a session (stateful, streamed), which is how its questions can be pushed to it.
    mcp_app = server.mcp.streamable_http_app(
        streamable_http_path=_MCP_PATH, stateless_http=False, json_response=json_response, host=host
    )

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok", "instance": instance_id()})

    async def readyz(request: Request) -> Response:
        """Ready when the database answers, its schema is current, and a shared key ring is configured."""
        problems: list[str] = []
        try:
            store = await server.store()
            await store.ping()
            if await store.schema_behind():
                problems.append("the database schema is older than this release needs: run `askback db upgrade`")
        except AskbackError:
            # The details (host, user, database) go to the log, not to an unauthenticated probe.
            logger.warning("readiness: the database is unavailable", exc_info=True)
            problems.append("the database is unavailable")
        if server.ephemeral_keys:
            problems.append("no ASKBACK_STATE_KEYS: answers cannot be taken by another instance")
        if problems:
            return JSONResponse({"status": "unavailable", "problems": problems}, status_code=503)
        return JSONResponse({"status": "ready", "instance": instance_id()})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await server.store()
        async with mcp_app.router.lifespan_context(mcp_app):
            yield
        await server.aclose()

    middleware: list[Middleware] = [
        Middleware(_InstanceHeader),
        Middleware(_EraGuard),
        Middleware(_VersionHeaderRequired, path=_MCP_PATH),
    ]
    if verifier is not None:
        middleware += [
            Middleware(
                AuthenticationMiddleware,
                backend=_BearerBackend(verifier, allow_anonymous=allow_anonymous),
                on_error=_auth_error,
            ),
            Middleware(AuthContextMiddleware),
        ]
    routes: list[Any] = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Mount("/", app=mcp_app),
    ]
    return Starlette(routes=routes, middleware=middleware, lifespan=lifespan)
