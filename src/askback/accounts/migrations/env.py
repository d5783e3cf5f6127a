"""Alembic's entry point for connected accounts' history, run only by askback's migration runner
(`askback.db.migrate`) on the connection it passes in. Run it with `askback db upgrade`."""

from __future__ import annotations

from askback.accounts._models import Base
from askback.db.migrate import run_env

run_env(Base.metadata)
