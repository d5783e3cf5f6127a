"""The statements behind answers held on the server (`ASKBACK_ANSWERS=server`): one sealed row per flow and round,
written with the round's other records, read when the next round arrives, deleted when the flow completes and
pruned once expired. Sealing is the server kit's (`askback.server.held`); the store only keeps the text."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, delete, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from askback.store.models import HeldAnswersRow

__all__ = ["HELD_FORGET_FLOW", "HELD_PRUNE", "HELD_READ", "HELD_SET"]

_HELD = cast(Table, HeldAnswersRow.__table__)
_h = _HELD.c

HELD_READ = select(_h.sealed).where(_h.flow_id == bindparam("flow_id"), _h.round == bindparam("round"))
_SQLITE_SET = sqlite_insert(_HELD)
_PG_SET = pg_insert(_HELD)
# One statement: a round written again (a copy that ran it after another gave it up) replaces what it held.
HELD_SET = {
    "sqlite": _SQLITE_SET.on_conflict_do_update(
        index_elements=["flow_id", "round"],
        set_={"sealed": _SQLITE_SET.excluded.sealed, "expires_at": _SQLITE_SET.excluded.expires_at},
    ),
    "postgresql": _PG_SET.on_conflict_do_update(
        index_elements=["flow_id", "round"],
        set_={"sealed": _PG_SET.excluded.sealed, "expires_at": _PG_SET.excluded.expires_at},
    ),
}
HELD_FORGET_FLOW = delete(_HELD).where(_h.flow_id == bindparam("flow_id"))
HELD_PRUNE = delete(_HELD).where(_h.expires_at < bindparam("now"))
