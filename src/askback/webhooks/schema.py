"""Webhooks' place in the shared store: their schema history (a component of the migration runner)."""

from __future__ import annotations

from pathlib import Path

from askback.db.migrate import Component
from askback.webhooks._models import VERSION_TABLE

__all__ = ["MIGRATIONS"]

MIGRATIONS = Component("webhooks", Path(__file__).parent / "migrations", VERSION_TABLE, head="w001")
