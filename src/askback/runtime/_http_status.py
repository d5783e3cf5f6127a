"""HTTP errors that the SDK's transport reports as JSON-RPC errors it makes up.

The SDK turns an HTTP error status whose body is not a JSON-RPC error (a 401 from a token check, a proxy's 502) into an
`MCPError` of its own, indistinguishable from a server's refusal. A connection notes the status of its last response
(`LastStatus`, an httpx response hook), and `LastStatus.reraise` gives `HTTPFailure` for those stand-ins instead, so
the runtime keeps a parked call parked rather than failing it for a round the server never judged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import httpx2
import mcp_types
from mcp.shared.exceptions import MCPError

__all__ = ["HTTPFailure", "LastStatus"]


class HTTPFailure(Exception):
    """The server answered with an HTTP error status and no JSON-RPC error in the body (a 401 without a valid token,
    a 403, a 429, a proxy's 502 or 503): it did not judge the request, so nothing the call had is spent."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


# What the SDK's transport makes up when an HTTP error's body is not a JSON-RPC error: (code, message) of the
# `MCPError` it raises instead.
_STAND_INS = frozenset(
    {
        (mcp_types.INTERNAL_ERROR, "Server returned an error response"),
        (mcp_types.METHOD_NOT_FOUND, "Not Found"),
        (mcp_types.INVALID_REQUEST, "Session terminated"),
    }
)


@dataclass
class LastStatus:
    """The HTTP status of a connection's last response (the runtime sends one request at a time on a connection)."""

    status: int | None = None

    async def note(self, response: httpx2.Response) -> None:
        self.status = response.status_code

    def reraise(self, exc: MCPError) -> NoReturn:
        """Raise `exc` again, or the `HTTPFailure` it stands in for when it is one of the SDK's stand-ins."""
        if self.status is not None and self.status >= 400 and (exc.code, exc.message) in _STAND_INS:
            raise HTTPFailure(self.status) from None
        raise exc
