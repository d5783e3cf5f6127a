"""Whether two MCP server URLs name one server: the rule the agent runtime uses to bind a webhook event to the server
that signed it and the command line uses to send a token to one server only.

Scheme and host compare in any case, the default port written or not, the path with or without its trailing slash.
Nothing else is forgiven: another port, path or scheme is another server."""

from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["same_server", "server_endpoint"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


def server_endpoint(url: str) -> tuple[str, str, int | None, str]:
    """`url` as compared: scheme and host in lower case, the default port filled in, the path without its trailing
    slash. A URL that cannot be read compares only with the same text."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return ("", url, None, "")
    scheme = parts.scheme.lower()
    return (scheme, (parts.hostname or "").lower(), port or _DEFAULT_PORTS.get(scheme), parts.path.rstrip("/"))


def same_server(one: str, other: str) -> bool:
    """Whether `one` and `other` name one MCP server (see the module's docstring)."""
    return server_endpoint(one) == server_endpoint(other)
