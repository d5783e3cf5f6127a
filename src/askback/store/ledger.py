"""The claim ledgers and the flow completions, as prebuilt statements run inside the store's transactions.

A ledger is a table whose rows are keyed by `(flow_id, <key>)` and go from 'running' (claimed by one attempt) to
'done' (with its outcome). Effects (`name`) and rounds (`round`) are two ledgers of the same shape, so one claim,
finish, release and take-over logic serves both. The primary key lets exactly one INSERT win; every loser reads
the winner's row instead. A flow's result is likewise INSERTed once.

Statements are built once with bound parameters: building a statement per call (and its cache key) costs more
than running it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from sqlalchemy import Connection, Select, Table, bindparam, delete, literal_column, null, select, union_all, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from askback.store.models import EffectRow, FlowRow, RoundRow

__all__ = [
    "RECORD_EFFECT",
    "Completion",
    "EffectClaim",
    "Ledger",
    "RoundClaim",
    "claim_of",
    "flow_effects",
    "round_claim",
]

_FLOWS = cast(Table, FlowRow.__table__)
READ_COMPLETION = select(_FLOWS.c.result).where(_FLOWS.c.flow_id == bindparam("flow_id"))
RECORD_FLOW = {
    "sqlite": sqlite_insert(_FLOWS).on_conflict_do_nothing(index_elements=["flow_id"]),
    "postgresql": pg_insert(_FLOWS).on_conflict_do_nothing(index_elements=["flow_id"]),
}
# What a round that completed its flow records as its outcome: its copies read the flow's result, which the same
# transaction recorded, so whoever sees this sees that.
ROUND_COMPLETED = '{"completed":true}'


@dataclass(frozen=True)
class EffectClaim:
    """What `claim_effect` found: this caller 'won' and must run the effect, or it is 'running' elsewhere, or
    it is 'done' and `outcome` is what the winner recorded."""

    status: Literal["won", "done", "running"]
    outcome: Any = None


@dataclass(frozen=True)
class RoundClaim:
    """What `claim_round` found: 'won' (run the round), 'running' (another attempt is at it), 'done' (`outcome` is
    what that attempt answered) or 'completed' (the flow has finished; `outcome` is its result)."""

    status: Literal["won", "done", "running", "completed"]
    outcome: Any = None
    # When 'won': the flow's effects as the ledger holds them ('done' with their outcome, or 'running'), read in the
    # same transaction, so that the round's effects need no claim of their own (the round's claim covers them).
    effects: Mapping[str, EffectClaim] = field(default_factory=dict)


@dataclass(frozen=True)
class Completion:
    """The recorded result of a flow, and whether the call that returned it was the one that recorded it."""

    result: Any
    first: bool


class Ledger:
    """The prebuilt statements of one claim ledger."""

    def __init__(self, table: Table, key: str, *, read: Select[Any] | None = None) -> None:
        self.table = table
        self.key = key
        c = table.c
        mine = (c.flow_id == bindparam("b_flow_id"), c[key] == bindparam("b_key"))
        # The row a claim collided with: its status, outcome and started_at (and whatever else `read` adds).
        self.read = (
            read
            if read is not None
            else select(c.status, c.outcome, c.started_at).where(
                c.flow_id == bindparam("flow_id"), c[key] == bindparam("key")
            )
        )
        self.finish = (
            update(table)
            .where(*mine, c.status == "running")
            .values(status="done", outcome=bindparam("b_outcome"), finished_at=bindparam("b_at"))
        )
        self.take_over = (
            update(table)
            .where(*mine, c.status == "running", c.started_at < bindparam("b_cutoff"))
            .values(instance=bindparam("b_instance"), started_at=bindparam("b_at"))
        )
        self.release = delete(table).where(*mine, c.status == "running")
        self.claim = {
            "sqlite": sqlite_insert(table).on_conflict_do_nothing(index_elements=["flow_id", key]),
            "postgresql": pg_insert(table).on_conflict_do_nothing(index_elements=["flow_id", key]),
        }

    def try_claim(
        self, conn: Connection, flow_id: str, key: Any, *, instance: str, at: float, lease: float | None
    ) -> EffectClaim | None:
        """One attempt at the claim, inside the caller's transaction; `None` when the row vanished (released)
        between the INSERT and the read, so the caller tries again."""
        found = self.contend(conn, flow_id, key, instance=instance, at=at, lease=lease)
        return found if found is None or isinstance(found, EffectClaim) else claim_of(found)

    def contend(
        self, conn: Connection, flow_id: str, key: Any, *, instance: str, at: float, lease: float | None
    ) -> EffectClaim | Any | None:
        """Insert the claim, or take over a stale one (still running `lease` seconds after it was taken): 'won';
        otherwise the row it collided with, as `read` reads it, or `None` when that row vanished meanwhile."""
        values = {"flow_id": flow_id, self.key: key, "status": "running", "instance": instance, "started_at": at}
        if conn.execute(self.claim[conn.dialect.name], values).rowcount == 1:
            return EffectClaim("won")
        found = conn.execute(self.read, {"flow_id": flow_id, "key": key}).first()
        if found is None:
            return None
        if found.status != "done" and lease is not None and found.started_at < at - lease:
            # Atomic: once one taker has moved started_at forward, every other taker's condition fails.
            params = {"b_flow_id": flow_id, "b_key": key, "b_cutoff": at - lease, "b_instance": instance, "b_at": at}
            if conn.execute(self.take_over, params).rowcount == 1:
                return EffectClaim("won")
        return found

    def look(self, conn: Connection, flow_id: str, key: Any) -> EffectClaim | None:
        found = conn.execute(self.read, {"flow_id": flow_id, "key": key}).first()
        return None if found is None else claim_of(found)


def claim_of(found: Any) -> EffectClaim:
    """Where a ledger row read by `Ledger.read` stands."""
    if found.status == "done":
        return EffectClaim("done", None if found.outcome is None else json.loads(found.outcome))
    return EffectClaim("running")


EFFECTS = Ledger(cast(Table, EffectRow.__table__), "name")
_e = EFFECTS.table.c
# An effect run under the round's claim, recorded done at the round's end (no claim row was written for it).
RECORD_EFFECT = {
    "sqlite": sqlite_insert(EFFECTS.table).on_conflict_do_nothing(index_elements=["flow_id", "name"]),
    "postgresql": pg_insert(EFFECTS.table).on_conflict_do_nothing(index_elements=["flow_id", "name"]),
}
# A flow's effects and, in the same read, its result if it completed (the row whose name is NULL).
_FLOW_STATE = union_all(
    select(_e.name, _e.status, _e.outcome).where(_e.flow_id == bindparam("flow_id")),
    select(null(), literal_column("'completed'"), _FLOWS.c.result).where(_FLOWS.c.flow_id == bindparam("flow_id")),
)


def flow_effects(conn: Connection, flow_id: str) -> tuple[str | None, dict[str, EffectClaim]]:
    """The flow's result (JSON) if it completed, and every effect of the flow in the ledger, by name: one read."""
    completed: str | None = None
    found: dict[str, EffectClaim] = {}
    for row in conn.execute(_FLOW_STATE, {"flow_id": flow_id}).all():
        if row.name is None:
            completed = row.outcome
        else:
            found[row.name] = claim_of(row)
    return completed, found


_ROUNDS = cast(Table, RoundRow.__table__)
_r = _ROUNDS.c
# A round's row with its flow's result, read together: a round that completed its flow answers with that result.
ROUNDS = Ledger(
    _ROUNDS,
    "round",
    read=select(_r.status, _r.outcome, _r.started_at, _FLOWS.c.result)
    .select_from(_ROUNDS.outerjoin(_FLOWS, _FLOWS.c.flow_id == _r.flow_id))
    .where(_r.flow_id == bindparam("flow_id"), _r.round == bindparam("key")),
)


def round_claim(found: Any) -> RoundClaim:
    """Where a round's row read by `ROUNDS.read` stands: 'completed' with the flow's result, 'done' with what its
    attempt answered, or 'running'."""
    if found.status != "done":
        return RoundClaim("running")
    outcome = None if found.outcome is None else json.loads(found.outcome)
    if outcome == {"completed": True}:
        if found.result is None:
            raise LookupError("a round recorded as completing its flow, whose flow has no recorded result")
        return RoundClaim("completed", json.loads(found.result))
    return RoundClaim("done", outcome)
