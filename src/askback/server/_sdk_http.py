"""The one place the server kit reaches into the official SDK's HTTP transport (mcp 2.3, pinned to 2.3.*).

A 2026-07-28 request is stateless: one POST, one answer. A 2025-11-25 session needs a stream, because its questions
are pushed to the client while a call waits. The SDK's session manager has one `json_response` switch for both, and
with it off (as the pushes need) it answers every modern request through its streaming path: a task group, two
tasks and a cancel scope per request, about a tenth of a round's time. So the manager is given a subclass whose only
change is that a modern request is answered as plain JSON; sessions keep their streams.

Private SDK surface used here: `StreamableHTTPSessionManager._handle_request`, its `app`, `security_settings` and
`_lifespan_state` attributes, and `mcp.server._streamable_http_modern.handle_modern_request`.
`tests/server/test_http_app.py` fails loudly when an upgrade changes them.
"""

from __future__ import annotations

from mcp.server._streamable_http_modern import handle_modern_request
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.types import Receive, Scope, Send

__all__ = ["answer_modern_requests_as_json"]

_VERSION_HEADER = b"mcp-protocol-version"


class _JsonForModern(StreamableHTTPSessionManager):
    async def _handle_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        version = next((v.decode("latin-1") for k, v in scope["headers"] if k == _VERSION_HEADER), None)
        if version is None or version in HANDSHAKE_PROTOCOL_VERSIONS or self._task_group is None:
            await super()._handle_request(scope, receive, send)
            return
        await handle_modern_request(self.app, self.security_settings, True, self._lifespan_state, scope, receive, send)


def answer_modern_requests_as_json(manager: StreamableHTTPSessionManager) -> None:
    """Make `manager` answer 2026-07-28 requests as JSON, whatever its `json_response` says for sessions."""
    manager.__class__ = _JsonForModern
