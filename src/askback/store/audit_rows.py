"""Audit lines to and from database rows: the rows a round inserts, the query an `AuditFilter` means, and the
statements that keep the audit chains (`askback.audit.chain`): move a chain's head, read the heads and rows back to
verify. SQL over the store's tables, so it lives with them: the audit package (events, chains, emission) imports
nothing of the store, which writes its rows."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Select, Table, bindparam, insert, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from askback.audit.chain import CONTENT_FIELDS
from askback.audit.event import AuditEvent, AuditFilter
from askback.core.caller import split_scopes
from askback.core.text import storable
from askback.store.models import AuditChainRow, AuditRow

__all__ = [
    "CHAINED_ROWS",
    "CHAIN_ADVANCE",
    "CHAIN_HEAD",
    "CHAIN_HEADS",
    "CHAIN_START",
    "INSERT",
    "UNCHAINED_ROWS",
    "from_row",
    "selecting",
    "to_json",
    "to_rows",
]

_AUDIT = cast(Table, AuditRow.__table__)
_CHAINS = cast(Table, AuditChainRow.__table__)
INSERT = insert(_AUDIT)

# A chain's head row: created once per chain (a concurrent first write by another task finds it there), read
# locked (FOR UPDATE; SQLite's write lock is already held by then), and moved on only from the seq its writer saw.
CHAIN_START = {
    "sqlite": sqlite_insert(_CHAINS).on_conflict_do_nothing(index_elements=["chain"]),
    "postgresql": pg_insert(_CHAINS).on_conflict_do_nothing(index_elements=["chain"]),
}
CHAIN_HEAD = select(_CHAINS.c.seq, _CHAINS.c.head).where(_CHAINS.c.chain == bindparam("b_chain")).with_for_update()
CHAIN_ADVANCE = (
    update(_CHAINS)
    .where(_CHAINS.c.chain == bindparam("b_chain"), _CHAINS.c.seq == bindparam("b_from"))
    .values(seq=bindparam("b_seq"), head=bindparam("b_head"))
)
CHAIN_HEADS = select(_CHAINS.c.chain, _CHAINS.c.seq, _CHAINS.c.head, _CHAINS.c.started_at)
# In the order `chain.Verifier` walks them: each chain in seq order, then the rows without a chain.
_CHAIN_COLUMNS = [_AUDIT.c[name] for name in ("id", *CONTENT_FIELDS, "chain", "seq", "prev", "hash")]
CHAINED_ROWS = (
    select(*_CHAIN_COLUMNS).where(_AUDIT.c.chain.is_not(None)).order_by(_AUDIT.c.chain, _AUDIT.c.seq, _AUDIT.c.id)
)
UNCHAINED_ROWS = select(_AUDIT.c.id, _AUDIT.c.chain).where(_AUDIT.c.chain.is_(None)).order_by(_AUDIT.c.id)


# Built once (`json.dumps` with options builds an encoder per call); the same text as `json.dumps(value,
# sort_keys=True, ensure_ascii=...)`.
_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False)
_JSON_ASCII = json.JSONEncoder(sort_keys=True, ensure_ascii=True)


def to_json(value: Any, *, what: str) -> str:
    """JSON for a text column: sorted keys, and lone surrogates (which UTF-8 cannot carry) escaped."""
    try:
        dumped = _JSON.encode(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc
    if storable(dumped) != dumped:
        # A lone surrogate cannot be encoded as UTF-8 (JSON escapes NUL already); the escaped form reads back the
        # same value.
        return _JSON_ASCII.encode(value)
    return dumped


def to_rows(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
    """The rows to insert. Every text goes through `storable`: an event about a request that carried text no
    database can store (a lone surrogate, a NUL) must still be written, or the trail would have a gap exactly where
    it matters."""
    return [
        {
            "at": event.at,
            "event": event.event,
            "tool": storable(event.tool),
            "flow_id": storable(event.flow_id),
            "principal": storable(event.principal),
            "round": event.round,
            "keys": to_json(list(event.keys), what="audit keys"),
            "mode": storable(event.mode),
            "action": storable(event.action),
            "content": None if event.content is None else to_json(event.content, what="audit content"),
            "outcome": storable(event.outcome),
            "detail": storable(event.detail),
            "instance": storable(event.instance),
            "scopes": None if event.scopes is None else storable(" ".join(event.scopes)),
        }
        for event in events
    ]


def selecting(flt: AuditFilter) -> Select[Any]:
    """The newest `flt.limit` matching rows, newest first (the caller reverses them)."""
    query = select(_AUDIT)
    for column, wanted in (
        (AuditRow.tool, flt.tool),
        (AuditRow.principal, flt.principal),
        (AuditRow.flow_id, flt.flow_id),
        (AuditRow.event, flt.event),
    ):
        if wanted is not None:
            query = query.where(column == wanted)
    if flt.since is not None:
        query = query.where(AuditRow.at >= flt.since)
    if flt.until is not None:
        query = query.where(AuditRow.at < flt.until)
    if flt.contains is not None:
        query = query.where(
            or_(
                *(
                    column.icontains(flt.contains, autoescape=True)
                    for column in (AuditRow.content, AuditRow.outcome, AuditRow.detail)
                )
            )
        )
    return query.order_by(AuditRow.at.desc(), AuditRow.id.desc()).limit(flt.limit)


def from_row(row: Mapping[str, Any]) -> AuditEvent:
    return AuditEvent(
        id=row["id"],
        at=row["at"],
        event=row["event"],
        tool=row["tool"],
        flow_id=row["flow_id"],
        principal=row["principal"],
        round=row["round"],
        keys=tuple(json.loads(row["keys"])),
        mode=row["mode"],
        action=row["action"],
        content=None if row["content"] is None else json.loads(row["content"]),
        outcome=row["outcome"],
        detail=row["detail"],
        instance=row["instance"],
        scopes=None if row["scopes"] is None else split_scopes(row["scopes"]),
    )
