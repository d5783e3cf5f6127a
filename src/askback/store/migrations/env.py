"""Alembic's entry point for the server kit's history (effects, rounds, flows, audit), run only by askback's
migration runner (`askback.db.migrate`) on the connection it passes in. Run it with `askback db upgrade`."""

from __future__ import annotations

from askback.db.migrate import run_env
from askback.store.models import Base

run_env(Base.metadata)
