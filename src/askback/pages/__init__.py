"""Deprecated: `askback.pages` is `askback.web.pages` (until askback 0.3.0). Every name still resolves here, with a
`DeprecationWarning`: import it from `askback.web.pages`."""

from __future__ import annotations

from typing import Any

from askback._face import renamed

__all__: list[str] = []

_MOVED = {name: f"askback.web.pages.{name}" for name in ["PageKit", "SignIn", "safe_next_path", "security_headers"]}


def __getattr__(name: str) -> Any:
    return renamed(__name__, _MOVED, name, globals())
