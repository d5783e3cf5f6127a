"""The ASGI guards in front of an `Askback` app's `/mcp` (and of its `Signed` mounts), each a small piece that does
one thing, named for the hazard it guards against. A piece that must read the request body reads it once, up to the
SDK's size limit, and hands the SDK the same messages (`read_body`); a refusal it writes is the JSON-RPC error of the
request it read (`rpc_error`)."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any

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
from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from askback.audit.emit import instance_id
from askback.core.caller import missing_scopes
from askback.errors import AskbackError, HeaderMismatchError, ProtocolVersionMissingError
from askback.server.auth import Signed, challenge

__all__ = [
    "EraGuard",
    "InstanceHeader",
    "ScopeGuard",
    "SignedOnly",
    "TaskNameGuard",
    "VersionHeaderRequired",
]


class SignedOnly:
    """Lets a request through to a `Signed` mount only when its signature verifies; 401 otherwise."""

    def __init__(self, app: ASGIApp, policy: Signed) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            # A signature covers a request body; a websocket has none to sign, so it is never let through.
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive)
        if not await self.policy.accepts(Headers(scope=scope), body):
            refused = JSONResponse({"error": "invalid_signature"}, status_code=401)
            await refused(scope, receive, send)
            return
        await self.app(scope, replay, send)


class InstanceHeader:
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


class EraGuard:
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
        body, replay = await read_body(receive)
        declared = _meta_version(body)
        if declared is not None and declared != header:
            message = f"MCP-Protocol-Version header {header!r} does not match _meta protocolVersion {declared!r}"
            await rpc_error(body, HeaderMismatchError(message))(scope, receive, send)
            return
        await self.app(scope, replay, send)


class TaskNameGuard:
    """SEP-2663: a `tasks/*` request whose `Mcp-Name` header is not its `params.taskId` is refused with -32020 (HTTP
    400). The SDK checks the header only for its own name-bearing methods, so a router that sends by the header would
    otherwise reach a task other than the one the body names. Only requests with the header, and an `Mcp-Method`
    that is a `tasks/*` one or missing, are read here."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        header, named = headers.get("mcp-name"), headers.get("mcp-method", "tasks/")
        if header is None or not named.startswith("tasks/"):
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive)
        message = _parsed(body)
        method, params = message.get("method"), message.get("params")
        task_id = params.get("taskId") if isinstance(params, dict) else None
        if isinstance(method, str) and method.startswith("tasks/") and task_id != header.strip():
            error = HeaderMismatchError(f"the Mcp-Name header does not match params.taskId of this {method} request")
            await rpc_error(body, error)(scope, receive, send)
            return
        await self.app(scope, replay, send)


_VERSION_MISSING = (
    f"The MCP-Protocol-Version header is missing. This server serves {LATEST_MODERN_VERSION}: send the header on "
    f'every request, equal to params._meta["{PROTOCOL_VERSION_META_KEY}"]; and {LATEST_HANDSHAKE_VERSION}: send '
    f"initialize first, then the header with the Mcp-Session-Id that initialize returned on every later request."
)


class VersionHeaderRequired:
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
        body, replay = await read_body(receive)
        method = _parsed(body).get("method")
        if isinstance(method, str) and method != "initialize":
            supported = [*MODERN_PROTOCOL_VERSIONS, *HANDSHAKE_PROTOCOL_VERSIONS]
            await rpc_error(body, ProtocolVersionMissingError(_VERSION_MISSING, supported))(scope, receive, send)
            return
        await self.app(scope, replay, send)


class ScopeGuard:
    """A `tools/call` of a tool declared with `scopes=` whose caller's token lacks one of them is refused with 403
    and `WWW-Authenticate: Bearer error="insufficient_scope", scope="..."` (RFC 6750 section 3.1), so a client can
    ask its user for the scopes and call again; the tool never runs. Only requests to a tool with scopes are read
    here, and only when the app has such a tool. With the META exposure served (`meta`), `execute_tool` of such a
    tool is refused the same way: one tool, one answer, whichever way it is called."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        path: str,
        scopes: dict[str, tuple[str, ...]],
        metadata_url: Callable[[HTTPConnection], str | None],
        meta: bool = False,
    ) -> None:
        self.app = app
        self.path = path
        self.scopes = scopes
        self.metadata_url = metadata_url
        self.meta = meta

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.scopes or scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != self.path:
            await self.app(scope, receive, send)
            return
        body, replay = await read_body(receive)
        message = _parsed(body)
        params = message.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        if self.meta and name == "execute_tool" and isinstance(params, dict):
            arguments = params.get("arguments")
            name = arguments.get("name") if isinstance(arguments, dict) else None
        needed = self.scopes.get(name, ()) if message.get("method") == "tools/call" and isinstance(name, str) else ()
        if needed:
            user = scope.get("user")
            token = getattr(user, "access_token", None)
            granted = frozenset(getattr(token, "scopes", ()) or ())
            missing = missing_scopes(granted, needed)
            if missing:
                text = f"the tool {name!r} needs the scope(s) {' '.join(needed)}; the token lacks {' '.join(missing)}"
                header = challenge(
                    error="insufficient_scope",
                    description=text,
                    metadata_url=self.metadata_url(HTTPConnection(scope)),
                    scope=needed,
                )
                refused = JSONResponse(
                    {"error": "insufficient_scope", "error_description": text, "scope": " ".join(needed)},
                    status_code=403,
                    headers={"WWW-Authenticate": header},
                )
                await refused(scope, replay, send)
                return
        await self.app(scope, replay, send)


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
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


def rpc_error(body: bytes, exc: AskbackError) -> Response:
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
