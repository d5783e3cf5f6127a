"""The shared event log: what happened (an account connected, a delivery to make), one row per event, in the
same database every instance uses, so that a subscriber on any instance sees an event whichever instance wrote it.

A product appends an event with `append_event` inside the transaction that makes the change, so the event exists
exactly when the change does. The row's `id` is the cursor: a reader keeps the last id it handled and asks for the
events after it (`EventLog.events_after`), then waits for the next ones (`EventLog.wait_for_events`). PostgreSQL wakes
waiters with `NOTIFY askback_events`, sent at commit, on one listening connection per event log; SQLite has no such
signal, so waiters poll every `poll_interval` seconds.

On PostgreSQL an id is taken at INSERT and becomes visible at COMMIT: two transactions could commit in the other
order than their ids, and a reader that already moved past the later id would never see the earlier one. So an
append takes a transaction-scoped advisory lock first, and event-writing transactions commit one at a time, in id
order. Append last in the transaction, so the lock is held only for the commit. SQLite has one writer at a time
already.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import anyio
from sqlalchemy import Connection, Table, func, insert, or_, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from askback.db.database import Database
from askback.errors import ConfigurationError
from askback.store.models import EventRow

__all__ = ["CHANNEL", "EventLog", "StoredEvent", "append_event", "chosen_types"]

# The PostgreSQL channel every instance listens on; the notification carries nothing, the table has it all.
CHANNEL = "askback_events"
# Any fixed number, the same in every askback process: the advisory lock event appends commit under, in id order.
_PG_EVENTS_LOCK = 0x61736B64

_EVENTS = cast(Table, EventRow.__table__)
_e = _EVENTS.c
_APPEND = insert(_EVENTS)
_NOTIFY = text(f"SELECT pg_notify('{CHANNEL}', '')")
_ORDERED = text("SELECT pg_advisory_xact_lock(:key)")
_LATEST = select(func.coalesce(func.max(_e.id), 0))


@dataclass(frozen=True)
class StoredEvent:
    """One row of the event log: `id` (the cursor, increasing), `type` (`account.connected`), `at` (epoch seconds)
    and `data` (a JSON object)."""

    id: int
    type: str
    at: float
    data: Mapping[str, Any]


def append_event(conn: Connection, *, type: str, at: float, data: Mapping[str, Any]) -> None:
    """Add one event inside the caller's transaction (`Database.transaction`'s `conn`); it is seen when that transaction
    commits, and on PostgreSQL every listening instance is woken then."""
    postgres = conn.dialect.name == "postgresql"
    if postgres:
        conn.execute(_ORDERED, {"key": _PG_EVENTS_LOCK})
    conn.execute(_APPEND, {"type": type, "at": at, "data": json.dumps(dict(data), sort_keys=True)})
    if postgres:
        conn.execute(_NOTIFY)


def _selecting(cursor: int, types: Sequence[str], limit: int) -> Any:
    """The events after `cursor`, oldest first, of the `types` given (exact names, or `family.*`; none: all)."""
    query = select(_e.id, _e.type, _e.at, _e.data).where(_e.id > cursor)
    if types and "*" not in types:
        kinds = [_e.type.startswith(t[:-1], autoescape=True) if t.endswith(".*") else _e.type == t for t in types]
        query = query.where(or_(*kinds))
    return query.order_by(_e.id).limit(limit)


class _Listener:
    """A connection that LISTENs on `CHANNEL` and sets every registered waker when a notification (or the
    connection's end) arrives."""

    def __init__(self, conn: AsyncConnection, driver: Any) -> None:
        self.conn = conn
        self.driver = driver
        self.wakers: set[anyio.Event] = set()

    def wake(self, *_: Any) -> None:
        wakers, self.wakers = self.wakers, set()
        for waker in wakers:
            waker.set()

    @property
    def alive(self) -> bool:
        return not self.driver.is_closed()

    async def close(self) -> None:
        self.wake()
        try:
            await self.driver.remove_listener(CHANNEL, self.wake)
        finally:
            await self.conn.close()


def chosen_types(types: Sequence[str], catalogue: Sequence[str], *, family: str, what: str) -> frozenset[str]:
    """The event types a subscriber names in `types`: some of `catalogue`, or all of them as `family` (such as
    `"account.*"`). `ConfigurationError` naming what there is for an unknown type or none (`what`: "account", for
    the message) rather than wait for it forever."""
    named = (types,) if isinstance(types, str) else tuple(types)
    unknown = [t for t in named if t != family and t not in catalogue]
    if unknown or not named:
        raise ConfigurationError(
            f"Unknown {what} event type(s) {', '.join(map(repr, unknown)) or '(none given)'}: subscribe to "
            f"{family!r} or to some of {', '.join(catalogue)}."
        )
    return frozenset(catalogue) if family in named else frozenset(named)


class EventLog:
    """Reading the event log of `database`, and waiting for what comes next."""

    def __init__(self, database: Database) -> None:
        self.database = database
        # How often a waiter on SQLite looks for new events.
        self.poll_interval = 0.25
        self._listener: _Listener | None = None
        self._listener_lock: anyio.Lock | None = None

    async def events_after(self, cursor: int, *, types: Sequence[str] = (), limit: int = 500) -> list[StoredEvent]:
        """Up to `limit` events with an id above `cursor`, oldest first; `types` are exact names (`account.connected`)
        or families (`account.*`), none meaning every event."""
        query = _selecting(cursor, tuple(types), limit)
        with self.database.reachable("read the event log"):
            async with self.database.engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [StoredEvent(row.id, row.type, row.at, json.loads(row.data)) for row in rows]

    async def latest_event_id(self) -> int:
        """The id of the newest event; 0 when there is none."""
        latest = await self.database.read(lambda conn: conn.execute(_LATEST).scalar(), doing="read the event log")
        return int(latest or 0)

    # A bounded wait that answers whether anything came, which a cancel scope around the call cannot say.
    async def wait_for_events(self, cursor: int, *, timeout: float) -> bool:  # noqa: ASYNC109
        """True as soon as an event with an id above `cursor` exists; False when `timeout` seconds pass first."""
        deadline = anyio.current_time() + timeout
        if self.database.is_sqlite:
            while True:
                if await self.latest_event_id() > cursor:
                    return True
                left = deadline - anyio.current_time()
                if left <= 0:
                    return False
                await anyio.sleep(min(self.poll_interval, left))
        while True:
            listener = await self._listening()
            waker = anyio.Event()
            listener.wakers.add(waker)
            try:
                # After subscribing: an event committed before LISTEN took effect is found here, not lost.
                if await self.latest_event_id() > cursor:
                    return True
                with anyio.move_on_after(deadline - anyio.current_time()):
                    await waker.wait()
            finally:
                listener.wakers.discard(waker)
            if anyio.current_time() >= deadline:
                return await self.latest_event_id() > cursor

    async def follow(
        self, types: Collection[str], *, since: int | None, batch: int = 500, wait: float = 30.0
    ) -> AsyncIterator[StoredEvent]:
        """Every event of `types`, oldest first, without end, waiting `wait` seconds at most per wait for the next
        ones. `since=None`: only events after the call; `since=N`: those after cursor N too (`0`: from the first)."""
        cursor = await self.latest_event_id() if since is None else since
        while True:
            # Every event, filtered here: the cursor must pass the ones not wanted too, or the wait below would find
            # them again and again.
            found = await self.events_after(cursor, limit=batch)
            for stored in found:
                cursor = stored.id
                if stored.type in types:
                    yield stored
            if len(found) < batch:
                await self.wait_for_events(cursor, timeout=wait)

    async def close(self) -> None:
        """Stop listening (PostgreSQL); the database stays open."""
        listener, self._listener = self._listener, None
        if listener is not None:
            with anyio.CancelScope(shield=True):
                await listener.close()

    async def _listening(self) -> _Listener:
        """This log's listening connection, opened on first use and again when the last one was lost."""
        if self._listener_lock is None:
            self._listener_lock = anyio.Lock()
        async with self._listener_lock:
            listener = self._listener
            if listener is not None and listener.alive:
                return listener
            if listener is not None:
                self._listener = None
                await self._drop(listener)
            with self.database.reachable("listen for new events"):
                conn = await self.database.engine.connect()
                try:
                    driver: Any = (await conn.get_raw_connection()).driver_connection
                    listener = _Listener(conn, driver)
                    await driver.add_listener(CHANNEL, listener.wake)
                    driver.add_termination_listener(listener.wake)
                except BaseException:
                    await conn.invalidate()
                    await conn.close()
                    raise
            self._listener = listener
            return listener

    @staticmethod
    async def _drop(listener: _Listener) -> None:
        """Let go of a listening connection the database already closed."""
        listener.wake()
        await listener.conn.invalidate()
        await listener.conn.close()
