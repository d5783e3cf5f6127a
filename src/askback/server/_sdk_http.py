"""The one place the server kit reaches into the official SDK's HTTP transport (mcp 2.3, pinned to 2.3.*).

A 2026-07-28 request is stateless: one POST, one answer. A 2025-11-25 session needs a stream, because its questions
are pushed to the client while a call waits. The SDK's session manager has one `json_response` switch for both, and
with it off (as the pushes need) it answers every modern request through its streaming path: a task group, a memory
stream, two tasks and a timeout per request, a tenth of a round's time. So the manager's ASGI entry is replaced by
one that answers a modern request as plain JSON, unless the request asked for progress (a `progressToken`), which
needs the stream; sessions keep their streams.

What changes on the JSON path: a client that disconnects no longer cancels the handler (the flow's deadline still
bounds it), and no keepalive is sent while a silent handler runs (a proxy's idle-read timeout must exceed the
longest round; a call that long belongs in a task).

Private SDK surface used here: `StreamableHTTPSessionManager._handle_request`, its `asgi_app` (which the SDK binds in
`__init__`), `app`, `security_settings`, `max_request_body_size`, `_task_group` and `_lifespan_state` attributes, and
`mcp.server._streamable_http_modern.handle_modern_request`. `tests/server/test_sdk_http.py` (marker `sdk_seam`, run
against the newest 2.3 patch release by `.ci/upgrade-check`) fails when an upgrade changes them or the path taken.
"""

from __future__ import annotations

import json

from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import ClientDisconnect
from starlette.types import Message, Receive, Scope, Send

__all__ = ["answer_modern_requests_as_json"]

_VERSION_HEADER = b"mcp-protocol-version"
# A request that asks for progress names a token in `params._meta`; its answer must be able to stream. Only a body
# that holds the key's bytes is parsed to find out (one spelled with escapes is missed, which costs that client its
# progress notifications and nothing else).
_PROGRESS = b'"progressToken"'


def _asks_for_progress(body: bytes) -> bool:
    """Whether the JSON-RPC request in `body` names a progress token in `params._meta` (the key's bytes anywhere
    else, an argument's value, say, do not count)."""
    if _PROGRESS not in body:
        return False
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return False
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


class _ModernAsJson:
    """The manager's request entry, behind the SDK's body limit: modern requests that want no progress are answered
    as JSON; everything else goes to the manager as before."""

    def __init__(self, manager: StreamableHTTPSessionManager) -> None:
        self.manager = manager

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        manager = self.manager
        version = next((v.decode("latin-1") for k, v in scope["headers"] if k == _VERSION_HEADER), None)
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS or manager._task_group is None:
            await manager._handle_request(scope, receive, send)
            return
        # The body limit ahead of this has read the whole body into its first message.
        first = await receive()
        wants_progress = _asks_for_progress(first.get("body", b""))
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first
            return await receive()

        try:
            await handle_modern_request(
                manager.app,
                manager.security_settings,
                not wants_progress,
                manager._lifespan_state,
                scope,
                replay,
                send,
            )
        except ClientDisconnect:
            # The client went away before its body was whole: nobody to answer, and nothing for the error log.
            return


def answer_modern_requests_as_json(manager: StreamableHTTPSessionManager) -> None:
    """Make `manager` answer 2026-07-28 requests as JSON (unless they ask for progress), whatever its
    `json_response` says for sessions."""
    manager.asgi_app = RequestBodyLimitMiddleware(_ModernAsJson(manager), manager.max_request_body_size)
