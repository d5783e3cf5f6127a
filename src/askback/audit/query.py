"""Audit lines to and from database rows: the rows a round inserts, and the query an `AuditFilter` means."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Select, Table, insert, or_, select

from askback.audit.event import AuditEvent, AuditFilter
from askback.core.text import storable
from askback.store._models import AuditRow

__all__ = ["INSERT", "from_row", "selecting", "to_json", "to_rows"]

_AUDIT = cast(Table, AuditRow.__table__)
INSERT = insert(_AUDIT)


def to_json(value: Any, *, what: str) -> str:
    """JSON for a text column: sorted keys, and lone surrogates (which UTF-8 cannot carry) escaped."""
    try:
        dumped = json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc
    if storable(dumped) != dumped:
        # A lone surrogate cannot be encoded as UTF-8 (JSON escapes NUL already); the escaped form reads back the
        # same value.
        return json.dumps(value, sort_keys=True, ensure_ascii=True)
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
    )
