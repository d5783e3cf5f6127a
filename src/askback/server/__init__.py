"""The server kit: the `Askback` app (`app.py`), the round executor that carries out the core's decisions
(`round.py`), effects that run once (`effects.py`), the 2025-11-25 bridge (`legacy.py`), and the HTTP pieces
(`http.py`, `auth.py`)."""

from __future__ import annotations

from askback.server.app import Askback, current_principal
from askback.server.auth import Bearer, DemoTokenVerifier, Open, Signed
from askback.server.http import Mounted, build_app

__all__ = ["Askback", "Bearer", "DemoTokenVerifier", "Mounted", "Open", "Signed", "build_app", "current_principal"]
