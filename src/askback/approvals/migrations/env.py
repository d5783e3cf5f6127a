from __future__ import annotations

from askback.approvals._models import Base
from askback.db.migrate import run_env

run_env(Base.metadata)
