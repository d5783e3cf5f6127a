"""People's sign-in's place in the shared store: its schema history (a component of the migration runner)."""

from __future__ import annotations

from pathlib import Path

from askback.db.migrate import Component
from askback.identity._models import VERSION_TABLE

__all__ = ["MIGRATIONS"]

MIGRATIONS = Component("identity", Path(__file__).parent / "migrations", VERSION_TABLE, head="i002")
