"""An answer of a server the runtime cannot read: `UnreadableResult`, and the SDK's own -32700 for a body it could
not parse turned into one, in askback's words (the SDK's message quotes the body, which is the server's text)."""

from __future__ import annotations

import re

import mcp_types
from mcp.shared.exceptions import MCPError

__all__ = ["UnreadableResult", "raise_if_unreadable"]

_SDK_PARSE = re.compile(r"Failed to parse (?:JSON response|SSE message)")
_INVALID_JSON = re.compile(r"Invalid JSON: ([^\[\n]{1,120})")


class UnreadableResult(Exception):
    """The server's answer to a round cannot be read as the method's result; `reason` says what was wrong (never
    the server's text itself)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def raise_if_unreadable(exc: MCPError) -> None:
    """`UnreadableResult` when `exc` is the SDK's -32700 for an answer it could not parse; nothing otherwise."""
    if exc.code == mcp_types.PARSE_ERROR and _SDK_PARSE.match(exc.message):
        found = _INVALID_JSON.search(exc.message)
        reason = f"its JSON cannot be parsed ({found.group(1).strip()})" if found else "it cannot be parsed"
        raise UnreadableResult(reason) from None
