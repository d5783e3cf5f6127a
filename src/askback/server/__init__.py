"""The server kit: the `Askback` app (`app.py`), the round executor that carries out the core's decisions
(`round.py`), effects that run once (`effects.py`), the 2025-11-25 bridge (`legacy.py`), and the HTTP pieces
(`http.py`, `auth.py`).

The public surface is this module. Names are imported on first use, as `askback`'s are, so that importing the face
loads no part of the server stack until one is needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from askback._face import resolve

if TYPE_CHECKING:
    from askback.server.app import Askback, current_principal
    from askback.server.auth import Bearer, DemoTokenVerifier, Open, Signed
    from askback.server.http import Mounted, build_app

_WHERE = {
    "Askback": "askback.server.app",
    "current_principal": "askback.server.app",
    "Bearer": "askback.server.auth",
    "DemoTokenVerifier": "askback.server.auth",
    "Open": "askback.server.auth",
    "Signed": "askback.server.auth",
    "Mounted": "askback.server.http",
    "build_app": "askback.server.http",
}

__all__ = [
    "Askback",
    "Bearer",
    "DemoTokenVerifier",
    "Mounted",
    "Open",
    "Signed",
    "build_app",
    "current_principal",
]


def __getattr__(name: str) -> Any:
    return resolve(__name__, _WHERE, name, globals())


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
