"""The server kit: the `Askback` app (`app.py`; its life in `_lifecycle.py`, its tools in `_registry.py`, the guard
around every request in `_call_guard.py`), the round executor that carries out the core's decisions (`round.py`),
effects that run once (`effects.py`), the 2025-11-25 bridge (`legacy.py`), and the HTTP pieces (`http.py`, the
guards in front of `/mcp` in `_http_guards.py`, `auth.py`). What a product adds to an app (its migrations, start and close hooks, mounts and ports) is
an `Extension` (`askback.extension`), given as `Askback(name, extensions=[...])`.

The public surface is this module. Names are imported on first use, as `askback`'s are, so that importing the face
loads no part of the server stack until one is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.extension import Bearer, Extension, ExtensionContext, Mounted, Open, Ports, Signed
    from askback.server.app import Askback, current_principal
    from askback.server.auth import DemoTokenVerifier
    from askback.server.http import build_app

_WHERE = {
    "Askback": "askback.server.app",
    "current_principal": "askback.server.app",
    "Bearer": "askback.extension",
    "Extension": "askback.extension",
    "ExtensionContext": "askback.extension",
    "Mounted": "askback.extension",
    "Open": "askback.extension",
    "Ports": "askback.extension",
    "Signed": "askback.extension",
    "DemoTokenVerifier": "askback.server.auth",
    "build_app": "askback.server.http",
}

__all__ = [
    "Askback",
    "Bearer",
    "DemoTokenVerifier",
    "Extension",
    "ExtensionContext",
    "Mounted",
    "Open",
    "Ports",
    "Signed",
    "build_app",
    "current_principal",
]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
