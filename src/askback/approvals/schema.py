"""Approvals' place in the shared store: their schema history (a component of the migration runner)."""

from __future__ import annotations

from pathlib import Path

from askback.approvals._models import VERSION_TABLE
from askback.db.migrate import Component

__all__ = ["MIGRATIONS"]

MIGRATIONS = Component("approvals", Path(__file__).parent / "migrations", VERSION_TABLE, head="p001")
