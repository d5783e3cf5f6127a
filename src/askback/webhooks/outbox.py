"""The webhooks' outbox in the shared store: events turned into deliveries, deliveries claimed with a lease, every
attempt logged, and the listings behind `askback webhooks`.

Nothing is lost or sent twice across instances and restarts because every decision is a conditional write:

- an endpoint's cursor moves from the value its reader saw to the last event it read, in the transaction that
  inserts the deliveries for those events (`enqueue`); a reader that lost the race to another instance inserts
  nothing, and each delivery's `webhook_id` is unique besides;
- a due delivery is taken by one UPDATE whose condition is that nobody holds it, or that the holder's lease ran
  out (`claim`): of two instances one wins, and a delivery whose instance died mid-attempt is taken again once its
  lease ends, with the same `webhook_id` and body;
- an attempt's outcome is written only by the holder of the lease it ran under (`settle`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Literal, cast

from sqlalchemy import Table, bindparam, column, func, insert, select, table, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from askback.core.caller import split_scopes
from askback.store import Database, EventLog, Store
from askback.webhooks._models import AttemptRow, CursorRow, DeliveryRow
from askback.webhooks.endpoints import Endpoint, redacted_url
from askback.webhooks.signing import message_body, webhook_id

__all__ = ["Attempt", "Claimed", "Delivery", "DeliveryStatus", "Outbox", "Source", "SourceEvent"]

DeliveryStatus = Literal["pending", "delivered", "failed"]
Source = Literal["events", "audit"]

_CURSORS = cast(Table, CursorRow.__table__)
_DELIVERIES = cast(Table, DeliveryRow.__table__)
_ATTEMPTS = cast(Table, AttemptRow.__table__)
_k, _d, _t = _CURSORS.c, _DELIVERIES.c, _ATTEMPTS.c

# The audit log's rows, read by id (the store's face keeps its table private): every column but what an answer or a
# tool's result held (`content`, `outcome`), which a webhook never carries.
_AUDIT = table(
    "askback_audit",
    *(column(name) for name in ("id", "at", "event", "tool", "flow_id", "principal", "round", "keys", "mode")),
    *(column(name) for name in ("action", "detail", "instance", "scopes")),
)
_AUDIT_AFTER = (
    select(*_AUDIT.c).where(_AUDIT.c.id > bindparam("cursor")).order_by(_AUDIT.c.id).limit(bindparam("limit"))
)
_AUDIT_LATEST = select(func.coalesce(func.max(_AUDIT.c.id), 0))

_CURSOR = select(_k.cursor).where(_k.endpoint == bindparam("endpoint"), _k.source == bindparam("source"))
_START_CURSOR = {
    "sqlite": sqlite_insert(_CURSORS).on_conflict_do_nothing(index_elements=["endpoint", "source"]),
    "postgresql": pg_insert(_CURSORS).on_conflict_do_nothing(index_elements=["endpoint", "source"]),
}
_MOVE_CURSOR = (
    update(_CURSORS)
    .where(_k.endpoint == bindparam("b_endpoint"), _k.source == bindparam("b_source"), _k.cursor == bindparam("b_from"))
    .values(cursor=bindparam("b_to"))
)
_ADD_DELIVERY = insert(_DELIVERIES)
_ADD_ATTEMPT = insert(_ATTEMPTS)
_free = _d.lease_until.is_(None) | (_d.lease_until < bindparam("now"))
# The due deliveries, oldest due first, at most `each` of any one endpoint: an endpoint's backlog takes at most `each`
# rows of `limit`, and never hides another endpoint's due deliveries.
_RANKED = (
    select(
        _d.id,
        _d.endpoint,
        _d.next_attempt_at,
        func.row_number().over(partition_by=_d.endpoint, order_by=(_d.next_attempt_at, _d.id)).label("rank"),
    )
    .where(_d.status == "pending", _d.next_attempt_at <= bindparam("now"), _free)
    .subquery()
)
_DUE = (
    select(_RANKED.c.id, _RANKED.c.endpoint)
    .where(_RANKED.c.rank <= bindparam("each"))
    .order_by(_RANKED.c.next_attempt_at, _RANKED.c.id)
    .limit(bindparam("limit"))
)
_TAKE = (
    update(_DELIVERIES)
    .where(
        _d.id == bindparam("b_id"),
        _d.status == "pending",
        _d.lease_until.is_(None) | (_d.lease_until < bindparam("b_now")),
    )
    .values(lease_until=bindparam("b_until"), leased_by=bindparam("b_by"))
)
_TAKEN = select(_d.id, _d.endpoint, _d.url, _d.webhook_id, _d.body, _d.attempts).where(_d.id == bindparam("id"))
_SETTLE = (
    update(_DELIVERIES)
    .where(_d.id == bindparam("b_id"), _d.leased_by == bindparam("b_by"), _d.status == "pending")
    .values(
        status=bindparam("b_status"),
        attempts=bindparam("b_attempts"),
        next_attempt_at=bindparam("b_next"),
        lease_until=None,
        leased_by=None,
        last_status=bindparam("b_last_status"),
        last_error=bindparam("b_last_error"),
        delivered_at=bindparam("b_delivered_at"),
    )
)
_NEXT_DUE = (
    select(_d.endpoint, func.min(func.coalesce(_d.lease_until, _d.next_attempt_at)).label("due"))
    .where(_d.status == "pending")
    .group_by(_d.endpoint)
)
_REDELIVER = (
    update(_DELIVERIES)
    .where(_d.id == bindparam("b_id"), _d.status != "pending")
    .values(status="pending", attempts=0, next_attempt_at=bindparam("b_now"), lease_until=None, leased_by=None)
)
_STATUS_OF = select(_d.status).where(_d.id == bindparam("id"))
_LISTED = (
    _d.id, _d.endpoint, _d.url, _d.source, _d.event_id, _d.type, _d.webhook_id, _d.status, _d.attempts,
    _d.next_attempt_at, _d.last_status, _d.last_error, _d.created_at, _d.delivered_at,
)  # fmt: skip
_LIST_ALL = select(*_LISTED).order_by(_d.id.desc()).limit(bindparam("limit"))
_LIST_STATUS = select(*_LISTED).where(_d.status == bindparam("status")).order_by(_d.id.desc()).limit(bindparam("limit"))
_BODY = select(_d.body).where(_d.id == bindparam("id"))
_ATTEMPTS_OF = (
    select(_t.delivery_id, _t.attempt, _t.at, _t.duration, _t.status, _t.error)
    .where(_t.delivery_id == bindparam("id"))
    .order_by(_t.id)
)


@dataclass(frozen=True)
class SourceEvent:
    """An event as a webhook carries it: its cursor in its source, type, time and data."""

    id: int
    type: str
    at: float
    data: dict[str, Any]


@dataclass(frozen=True)
class Delivery:
    """One event for one endpoint, as listed (without its body)."""

    id: int
    endpoint: str
    url: str
    source: str
    event_id: int
    type: str
    webhook_id: str
    status: DeliveryStatus
    attempts: int
    next_attempt_at: float
    last_status: int | None
    last_error: str | None
    created_at: float
    delivered_at: float | None


@dataclass(frozen=True)
class Claimed:
    """A delivery this instance holds the lease of: what an attempt sends."""

    id: int
    endpoint: str
    url: str
    webhook_id: str
    body: str
    attempts: int


@dataclass(frozen=True)
class Attempt:
    """One attempt of a delivery: the receiver's HTTP `status`, or the `error` kind when it answered nothing."""

    delivery_id: int
    attempt: int
    at: float
    duration: float
    status: int | None
    error: str | None


def _audit_event(row: Any) -> SourceEvent:
    data = {
        "audit_id": row.id,
        "tool": row.tool,
        "flow_id": row.flow_id,
        "principal": row.principal,
        "round": row.round,
        "keys": json.loads(row.keys) if row.keys else [],
        "mode": row.mode,
        "action": row.action,
        "detail": row.detail,
        "instance": row.instance,
        "scopes": None if row.scopes is None else list(split_scopes(row.scopes)),
    }
    return SourceEvent(row.id, f"audit.{row.event}", row.at, data)


class Outbox:
    """The webhooks' tables in `database` (opened with the webhooks component among its migrations), and the event log
    `events` their deliveries come from: a store's `database` and `events` parts."""

    def __init__(self, database: Database | Store, events: EventLog | None = None) -> None:
        if isinstance(database, Store):
            warnings.warn(
                "Outbox(store) is deprecated: give it the store's parts, Outbox(store.database, store.events)",
                DeprecationWarning,
                stacklevel=2,
            )
            store = database
            database, events = store.database, store.events
        if events is None:
            raise TypeError("Outbox(database, events) takes the event log too: Outbox(store.database, store.events)")
        self.database = database
        self.events = events

    # Turning events into deliveries --------------------------------------------------------------------------

    async def latest(self, source: Source) -> int:
        """The newest event's cursor in `source` (0 when there is none)."""
        if source == "events":
            return await self.events.latest_event_id()
        found = await self.database.read(lambda conn: conn.execute(_AUDIT_LATEST).scalar(), doing="read the audit log")
        return int(found or 0)

    async def start_cursor(self, endpoint: Endpoint, source: Source, at: int) -> None:
        """Give `endpoint` a cursor at `at` in `source` unless it has one: an endpoint is sent what happens after it
        was first configured, not the history before."""
        values = {"endpoint": endpoint.key, "source": source, "cursor": at, "url": redacted_url(endpoint.url)}

        def write(conn: Any) -> None:
            conn.execute(_START_CURSOR[conn.dialect.name], values)

        await self.database.transaction(write, doing="start a webhook endpoint's cursor")

    async def cursor(self, endpoint: Endpoint, source: Source) -> int | None:
        params = {"endpoint": endpoint.key, "source": source}
        found = await self.database.read(
            lambda conn: conn.execute(_CURSOR, params).scalar(), doing="read a webhook cursor"
        )
        return None if found is None else int(found)

    async def events_after(self, source: Source, cursor: int, limit: int) -> list[SourceEvent]:
        """Up to `limit` events of `source` after `cursor`, oldest first."""
        if source == "events":
            stored = await self.events.events_after(cursor, limit=limit)
            return [SourceEvent(e.id, e.type, e.at, dict(e.data)) for e in stored]
        params = {"cursor": cursor, "limit": limit}
        rows = await self.database.read(
            lambda conn: conn.execute(_AUDIT_AFTER, params).all(), doing="read the audit log"
        )
        return [_audit_event(row) for row in rows]

    async def enqueue(
        self, endpoint: Endpoint, source: Source, cursor: int, events: Sequence[SourceEvent], *, now: float
    ) -> int | None:
        """Move `endpoint`'s cursor in `source` from `cursor` past `events` and add a pending delivery for each one it
        wants, in one transaction: the number added, or `None` when another instance moved the cursor first (and
        added them)."""
        if not events:
            return 0
        rows = [
            {
                "endpoint": endpoint.key,
                "url": redacted_url(endpoint.url),  # for listings and logs; attempts are sent to the endpoint's
                "source": source,
                "event_id": event.id,
                "type": event.type,
                "webhook_id": webhook_id(source, event.id, endpoint.key),
                "body": message_body(event.type, event.at, event.data),
                "status": "pending",
                "attempts": 0,
                "next_attempt_at": now,
                "lease_until": None,
                "leased_by": None,
                "last_status": None,
                "last_error": None,
                "created_at": now,
                "delivered_at": None,
            }
            for event in events
            if endpoint.wants(event.type)
        ]
        move = {"b_endpoint": endpoint.key, "b_source": source, "b_from": cursor, "b_to": events[-1].id}

        def write(conn: Any) -> int | None:
            if conn.execute(_MOVE_CURSOR, move).rowcount != 1:
                return None
            if rows:
                conn.execute(_ADD_DELIVERY, rows)
            return len(rows)

        return await self.database.transaction(write, doing="queue webhook deliveries", immediate=True)

    # Delivering ----------------------------------------------------------------------------------------------

    async def claim(
        self,
        *,
        now: float,
        until: float,
        by: str,
        limit: int,
        each: int | None = None,
        scan: int | None = None,
        pick: Callable[[Sequence[tuple[int, str]]], Sequence[int]] | None = None,
    ) -> list[Claimed]:
        """Take up to `limit` due deliveries, oldest due first, each held by `by` until `until`.

        The first `scan` due deliveries (`limit` by default) are considered, at most `each` of any one endpoint, so
        that an endpoint's backlog never hides another endpoint's due deliveries; `pick` chooses which of them to
        take, given their (id, endpoint key) pairs in due order (all of them by default). A due delivery not taken
        stays due, for a later claim."""
        rank = max(1, each if each is not None else limit)
        due = {"now": now, "each": rank, "limit": max(limit, scan or 0)}

        def write(conn: Any) -> list[Claimed]:
            rows = [(row.id, row.endpoint) for row in conn.execute(_DUE, due).all()]
            chosen = [row_id for row_id, _ in rows] if pick is None else pick(rows)
            taken: list[Claimed] = []
            for row_id in chosen[:limit]:
                params = {"b_id": row_id, "b_now": now, "b_until": until, "b_by": by}
                if conn.execute(_TAKE, params).rowcount == 1:
                    found = conn.execute(_TAKEN, {"id": row_id}).first()
                    taken.append(
                        Claimed(found.id, found.endpoint, found.url, found.webhook_id, found.body, found.attempts)
                    )
            return taken

        return await self.database.transaction(write, doing="claim webhook deliveries", immediate=True)

    async def settle(
        self,
        claimed: Claimed,
        attempt: Attempt,
        *,
        by: str,
        status: DeliveryStatus,
        next_attempt_at: float,
    ) -> bool:
        """Log `attempt` and record where the delivery stands after it; False when `by` no longer held its lease
        (it ran out and another instance took the delivery: the attempt is logged all the same)."""
        log = {
            "delivery_id": attempt.delivery_id,
            "attempt": attempt.attempt,
            "at": attempt.at,
            "duration": attempt.duration,
            "status": attempt.status,
            "error": attempt.error,
            "leased_by": by,
        }
        change = {
            "b_id": claimed.id,
            "b_by": by,
            "b_status": status,
            "b_attempts": attempt.attempt,
            "b_next": next_attempt_at,
            "b_last_status": attempt.status,
            "b_last_error": attempt.error
            if attempt.error
            else None
            if status == "delivered"
            else f"HTTP {attempt.status}",
            "b_delivered_at": attempt.at if status == "delivered" else None,
        }

        def write(conn: Any) -> bool:
            conn.execute(_ADD_ATTEMPT, log)
            return bool(conn.execute(_SETTLE, change).rowcount == 1)

        return await self.database.transaction(write, doing="record a webhook attempt")

    async def next_due(self, *, skip: Collection[str] = ()) -> float | None:
        """When the next pending delivery is due (or its lease ends), leaving out the endpoints (by key) in `skip`;
        `None` when none is pending."""
        rows = await self.database.read(lambda conn: conn.execute(_NEXT_DUE).all(), doing="read webhook deliveries")
        found = [float(row.due) for row in rows if row.endpoint not in skip]
        return min(found, default=None)

    # Listing and redelivering --------------------------------------------------------------------------------

    async def deliveries(self, *, status: DeliveryStatus | None = None, limit: int = 100) -> list[Delivery]:
        """The newest `limit` deliveries (of `status`), newest first."""
        query, params = (
            (_LIST_ALL, {"limit": limit}) if status is None else (_LIST_STATUS, {"status": status, "limit": limit})
        )
        rows = await self.database.read(lambda conn: conn.execute(query, params).all(), doing="list webhook deliveries")
        return [Delivery(*(vars(r).values() if isinstance(r, SimpleNamespace) else tuple(r))) for r in rows]

    async def body(self, delivery_id: int) -> str | None:
        return await self.database.read(
            lambda conn: conn.execute(_BODY, {"id": delivery_id}).scalar(), doing="read a webhook"
        )

    async def attempts(self, delivery_id: int) -> list[Attempt]:
        """Every attempt of one delivery, oldest first."""
        rows = await self.database.read(
            lambda conn: conn.execute(_ATTEMPTS_OF, {"id": delivery_id}).all(), doing="read webhook attempts"
        )
        return [Attempt(r.delivery_id, r.attempt, r.at, r.duration, r.status, r.error) for r in rows]

    async def redeliver(self, delivery_id: int, *, now: float) -> Literal["redelivering", "pending", "unknown"]:
        """Make a delivered or failed delivery pending again, due now, with its schedule started anew (its attempts
        stay in the log): `redelivering`; `pending` when it already is, `unknown` when there is no such delivery."""

        def write(conn: Any) -> Literal["redelivering", "pending", "unknown"]:
            if conn.execute(_REDELIVER, {"b_id": delivery_id, "b_now": now}).rowcount == 1:
                return "redelivering"
            return "pending" if conn.execute(_STATUS_OF, {"id": delivery_id}).scalar() is not None else "unknown"

        return await self.database.transaction(write, doing="redeliver a webhook", immediate=True)
