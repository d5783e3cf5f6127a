"""The options several `askback` commands share, written once: an option that means the same thing is spelled and
explained the same way on every command that takes it (`tests/cli/test_cli_options.py` walks the command tree)."""

from __future__ import annotations

__all__ = ["DATABASE_HELP"]

DATABASE_HELP = "Database URL (default: ASKBACK_DATABASE_URL)."
