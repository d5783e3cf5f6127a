"""Deprecated: `askback.asgi` is `askback.web.asgi` (until askback 0.3.0). Every name still resolves here, with a
`DeprecationWarning`: import it from `askback.web.asgi`."""

from __future__ import annotations

from typing import Any

from askback._face import renamed

__all__: list[str] = []

_MOVED = {
    name: f"askback.web.asgi.{name}"
    for name in [
        "API_HEADERS",
        "LOOPBACK_HOSTS",
        "AllowedHosts",
        "BodyTooLarge",
        "CappedBody",
        "FormGuard",
        "FormRefusal",
        "HostGuard",
        "HostVerdict",
        "OriginGuard",
        "SecurityHeaders",
        "parse_host",
        "served_origin",
    ]
}


def __getattr__(name: str) -> Any:
    return renamed(__name__, _MOVED, name, globals())
