"""The statements behind answers held on the server (`ASKBACK_ANSWERS=server`): one sealed row per flow and round,
written with the round's other records, read when the next round arrives, deleted when the flow completes and
pruned once expired. Sealing is the server kit's (`askback.server.held`); the store only keeps the text."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table, bindparam, delete, insert, select

from askback.store.models import HeldAnswersRow

__all__ = ["HELD_ADD", "HELD_FORGET", "HELD_FORGET_FLOW", "HELD_PRUNE", "HELD_READ"]

_HELD = cast(Table, HeldAnswersRow.__table__)
_h = _HELD.c

HELD_ADD = insert(_HELD)
HELD_READ = select(_h.sealed).where(_h.flow_id == bindparam("flow_id"), _h.round == bindparam("round"))
# A round written again (a copy that ran it after another gave it up) replaces what it held.
HELD_FORGET = delete(_HELD).where(_h.flow_id == bindparam("flow_id"), _h.round == bindparam("round"))
HELD_FORGET_FLOW = delete(_HELD).where(_h.flow_id == bindparam("flow_id"))
HELD_PRUNE = delete(_HELD).where(_h.expires_at < bindparam("now"))
