"""askback's database: the effects ledger, flow completions and the audit log, shared by every instance.

Several server processes (one machine with SQLite, many with PostgreSQL) answer rounds of the same flow, so
anything that must happen once is decided by the database, never in memory:

- an effect is claimed by INSERTing its `(flow_id, name)` row; the primary key lets exactly one INSERT win,
  and every loser reads the winner's row instead ('running', or 'done' with the recorded outcome);
- a flow's result is likewise INSERTed once; later completions of the same flow get the stored one back.

Everything here is plain async I/O around those two rules; the decisions about what a flow does live
elsewhere. Driver failures are turned into `StoreUnavailableError` at this boundary (cause chained, password
never shown); a duplicate key is not a failure but the answer to "who was first".

The schema is created by the Alembic migrations beside this module (`migrations/`), run by `Store.upgrade`
through the engine's own connection. SQLite databases are migrated on open; PostgreSQL ones only by
`askback db upgrade`, so that one deliberate step changes a shared database.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, NoReturn, TypeVar, cast

import anyio.to_thread
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import (
    Connection,
    Table,
    bindparam,
    delete,
    event,
    func,
    insert,
    or_,
    select,
    text,
    update,
)
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine

from askback._text import storable
from askback.errors import ConfigurationError, StoreUnavailableError
from askback.store._models import VERSION_TABLE, AuditRow, EffectRow, FlowRow, RoundRow
from askback.store._sqlite import RawConnection

__all__ = [
    "AuditEvent",
    "AuditFilter",
    "Completion",
    "EffectClaim",
    "RoundClaim",
    "Store",
    "normalize_database_url",
    "unavailable_error",
]

_MIGRATIONS = Path(__file__).parent / "migrations"
_T = TypeVar("_T")
_C = TypeVar("_C")

# The statements of a round, built once with bound parameters: building a statement per call (and its cache key)
# costs more than running it.
_EFFECTS = cast(Table, EffectRow.__table__)
_ROUNDS = cast(Table, RoundRow.__table__)
_FLOWS = cast(Table, FlowRow.__table__)
_AUDIT = cast(Table, AuditRow.__table__)
_READ_COMPLETION = select(_FLOWS.c.result).where(_FLOWS.c.flow_id == bindparam("flow_id"))


class _Ledger:
    """The prebuilt statements of one claim ledger: a table whose rows are keyed by `(flow_id, <key>)` and go from
    'running' (claimed by one attempt) to 'done' (with its outcome). Effects (`name`) and rounds (`round`) are
    two ledgers of the same shape, so one claim, finish, release and take-over logic serves both."""

    def __init__(self, table: Table, key: str) -> None:
        self.table = table
        self.key = key
        c = table.c
        mine = (c.flow_id == bindparam("b_flow_id"), c[key] == bindparam("b_key"))
        self.read = select(c.status, c.outcome, c.started_at).where(
            c.flow_id == bindparam("flow_id"), c[key] == bindparam("key")
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
        values = {"flow_id": flow_id, self.key: key, "status": "running", "instance": instance, "started_at": at}
        if conn.execute(self.claim[conn.dialect.name], values).rowcount == 1:
            return EffectClaim("won")
        found = conn.execute(self.read, {"flow_id": flow_id, "key": key}).first()
        if found is None:
            return None
        if found.status == "done":
            return EffectClaim("done", None if found.outcome is None else json.loads(found.outcome))
        if lease is not None and found.started_at < at - lease:
            # Atomic: once one taker has moved started_at forward, every other taker's condition fails.
            params = {"b_flow_id": flow_id, "b_key": key, "b_cutoff": at - lease, "b_instance": instance, "b_at": at}
            if conn.execute(self.take_over, params).rowcount == 1:
                return EffectClaim("won")
        return EffectClaim("running")

    def look(self, conn: Connection, flow_id: str, key: Any) -> EffectClaim | None:
        found = conn.execute(self.read, {"flow_id": flow_id, "key": key}).first()
        if found is None:
            return None
        if found.status == "done":
            return EffectClaim("done", None if found.outcome is None else json.loads(found.outcome))
        return EffectClaim("running")


_EFFECT_LEDGER = _Ledger(_EFFECTS, "name")
_ROUND_LEDGER = _Ledger(_ROUNDS, "round")
# What a round that completed its flow records as its outcome: its copies read the flow's result, which the same
# transaction recorded, so whoever sees this sees that.
_ROUND_COMPLETED = '{"completed":true}'


def _round_claim(conn: Connection, flow_id: str, found: EffectClaim) -> RoundClaim:
    if found.status == "done" and found.outcome == {"completed": True}:
        result: str = conn.execute(_READ_COMPLETION, {"flow_id": flow_id}).scalar_one()
        return RoundClaim("completed", json.loads(result))
    return RoundClaim(found.status, found.outcome)


_INSERT_AUDIT = insert(_AUDIT)
_RECORD_FLOW = {
    "sqlite": sqlite_insert(_FLOWS).on_conflict_do_nothing(index_elements=["flow_id"]),
    "postgresql": pg_insert(_FLOWS).on_conflict_do_nothing(index_elements=["flow_id"]),
}

_ASYNC_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+psycopg2": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
_ACCEPTED_URLS = (
    "sqlite:///PATH (sqlite:////ABSOLUTE/PATH) or postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE; "
    "postgres://, postgresql+psycopg2://, postgresql+asyncpg:// and sqlite+aiosqlite:/// are accepted too"
)

# Several processes write one SQLite file; a writer waits this long for another's transaction to finish
# before giving up with StoreUnavailableError.
_SQLITE_BUSY_TIMEOUT_MS = 10_000
_PG_CONNECT_TIMEOUT = 10
_PG_POOL_SIZE = 16
# Execution option asking the SQLite BEGIN hook for a write lock up front (see _on_sqlite_begin).
_BEGIN_IMMEDIATE = "askback_begin_immediate"
# Any fixed number, the same in every askback process: the PostgreSQL advisory lock that migrators queue on.
_PG_MIGRATION_LOCK = 0x61736B62
_PG_SETUP_LOCK = 0x61736B63
# How often a claim retries when the row it collided with vanished (released) before it could be read.
_RACE_ATTEMPTS = 5
# SQLSTATE classes that mean "the server could not be reached or would not let us in", not "bad statement":
# 08 connection exception, 28 invalid authorization, 3D no such database, 53 insufficient resources,
# 57 operator intervention (shutdown, not accepting connections yet).
_UNAVAILABLE_SQLSTATE_CLASSES = frozenset({"08", "28", "3D", "53", "57"})


def normalize_database_url(url: str) -> str:
    """The async-driver form of a database URL: `sqlite+aiosqlite://` or `postgresql+asyncpg://`.

    Raises `ConfigurationError` for anything else; the message shows the accepted forms but never the URL
    itself, which may hold a password.
    """
    scheme, separator, rest = url.partition("://")
    driver = _ASYNC_DRIVERS.get(scheme.lower()) if separator else None
    if driver is None:
        # Only text before "://" is shown: a password can only come after it.
        found = f"the scheme {scheme!r}" if separator else "no scheme (nothing before '://')"
        raise ConfigurationError(
            f"The database URL (ASKBACK_DATABASE_URL) has {found}, which askback cannot use. "
            f"Set it to {_ACCEPTED_URLS}."
        )
    if driver.startswith("sqlite") and not rest.startswith("/"):
        # sqlite://name.db would silently become an in-memory database that vanishes with the process.
        raise ConfigurationError(
            "The SQLite database URL (ASKBACK_DATABASE_URL) needs three slashes before a relative path "
            "(sqlite:///askback.db) and four before an absolute one (sqlite:////var/lib/askback.db)."
        )
    normalized = f"{driver}://{rest}"
    try:
        parsed = make_url(normalized)
    except (sa_exc.ArgumentError, ValueError) as exc:
        raise ConfigurationError(
            f"The database URL (ASKBACK_DATABASE_URL) could not be parsed; set it to {_ACCEPTED_URLS} "
            "(percent-encode special characters in the user name and password)."
        ) from exc
    if driver.startswith("postgresql") and "sslmode" in parsed.query:
        # libpq's spelling, which tools sharing the URL use; asyncpg calls it `ssl` and takes the same values.
        query = dict(parsed.query)
        query["ssl"] = query.pop("sslmode")
        normalized = parsed.set(query=query).render_as_string(hide_password=False)
    return normalized


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


@dataclass(frozen=True)
class Completion:
    """The recorded result of a flow, and whether the call that returned it was the one that recorded it."""

    result: Any
    first: bool


@dataclass(frozen=True)
class AuditEvent:
    """One line of the audit log. `at` comes from the caller's clock; `id` is set only when read back."""

    event: Literal["asked", "answered", "completed", "replayed", "rejected"]
    at: float
    tool: str | None = None
    flow_id: str | None = None
    principal: str | None = None
    round: int | None = None
    keys: tuple[str, ...] = ()
    mode: str | None = None
    action: str | None = None
    content: dict[str, Any] | None = None
    outcome: str | None = None
    detail: str | None = None
    instance: str | None = None
    id: int | None = None


@dataclass(frozen=True)
class AuditFilter:
    """Which audit events to read. Fields left `None` do not filter.

    `since` is inclusive and `until` exclusive, so consecutive windows never list an event twice. `contains`
    is a case-insensitive substring of the content JSON, the outcome or the detail. When more than `limit`
    events match, the newest `limit` are returned (still oldest first), as `tail` would.
    """

    tool: str | None = None
    principal: str | None = None
    flow_id: str | None = None
    event: str | None = None
    since: float | None = None
    until: float | None = None
    contains: str | None = None
    limit: int = 1000

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"AuditFilter.limit must be at least 1, not {self.limit}")


class Store:
    """The database behind effects, completions and audit. Make one with `await Store.open(url)`."""

    def __init__(self, engine: AsyncEngine, *, safe_url: str, sqlite_path: str | None = None) -> None:
        self._engine = engine
        self._safe_url = safe_url
        self._sqlite_path = sqlite_path
        self._raw: RawConnection | None = None

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, for an application that keeps its own tables in the same database."""
        return self._engine

    @property
    def safe_url(self) -> str:
        """The database URL with any password hidden."""
        return self._safe_url

    @classmethod
    async def open(cls, url: str, *, migrate: bool | None = None, check: bool = True) -> Store:
        """Connect, then migrate (`migrate=True`) or check that the schema is current (`migrate=False`).

        `migrate=None` migrates SQLite, whose file belongs to this deployment, and never PostgreSQL, whose
        schema changes only through `askback db upgrade`. `check=False` skips the check (for the upgrade itself).
        """
        parsed = make_url(normalize_database_url(url))
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if migrate is None:
            migrate = is_sqlite
        if is_sqlite and not migrate and check:
            _require_sqlite_file(parsed)
        if is_sqlite:
            # In a thread: another process may hold the file's lock while it creates or migrates it.
            await anyio.to_thread.run_sync(_probe_sqlite_file, parsed)
        store = cls(
            _create_engine(parsed),
            safe_url=parsed.render_as_string(hide_password=True),
            sqlite_path=parsed.database if is_sqlite else None,
        )
        try:
            if migrate:
                await store.upgrade()
            elif check:
                await store._require_head()
        except BaseException:
            await store.close()
            raise
        return store

    async def upgrade(self) -> None:
        """Bring the schema to the newest revision (Alembic `upgrade head`); a no-op when it is there."""
        # Migrators must run one at a time: two processes would both create the tables, and two in one
        # process would trample Alembic's module-global context. So each takes a database-wide lock before
        # Alembic reads the version table: SQLite's write lock (BEGIN IMMEDIATE) or a PostgreSQL advisory
        # lock, both held until this transaction ends; whoever comes second then finds the schema at head.
        engine = self._engine.execution_options(**{_BEGIN_IMMEDIATE: True})
        with self._reachable("upgrade the database schema"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
                await conn.run_sync(_upgrade_to_head)

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that runs alone among every process sharing the database (SQLite's write lock taken at
        BEGIN; a PostgreSQL advisory lock), for an application's idempotent set-up: creating its tables,
        seeding rows. A deferred SQLite transaction that reads and then writes fails at once with "database is
        locked" when another process writes in between; this one waits its turn instead."""
        engine = self._engine.execution_options(**{_BEGIN_IMMEDIATE: True})
        with self._reachable("set up the application's tables"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SETUP_LOCK})
                yield conn

    async def schema_behind(self) -> bool:
        """True when the database is at an older revision than this release needs. A newer revision (a later
        release already upgraded it, during a rolling update) is not "behind": migrations keep the previous
        release working."""
        current, head = await self.current_revision(), self.head_revision()
        if current == head:
            return False
        known = [script.revision for script in _script_directory().walk_revisions()]
        return current is None or current in known

    async def current_revision(self) -> str | None:
        """The schema revision the database is at; `None` when askback's tables were never created."""
        with self._reachable("read the database schema revision"):
            async with self._engine.connect() as conn:
                return await conn.run_sync(_read_revision)

    @staticmethod
    def head_revision() -> str:
        """The schema revision this version of askback needs."""
        head = _script_directory().get_current_head()
        if head is None:
            raise RuntimeError(f"askback is installed without its migrations (looked in {_MIGRATIONS})")
        return head

    async def close(self) -> None:
        await self._engine.dispose()
        if self._raw is not None:
            self._raw.close()
            self._raw = None

    async def ping(self) -> None:
        """Raise `StoreUnavailableError` unless the database answers a trivial query."""
        with self._reachable("check the database"):
            async with self._engine.connect() as conn:
                await conn.execute(text("SELECT 1"))

    async def _run(self, fn: Callable[[Any], _T], *, immediate: bool = False) -> _T:
        """Run `fn` in one transaction.

        SQLite: one of askback's transactions takes tens of microseconds, less than handing it to a thread, so it is
        first tried right here without waiting for locks; if another process holds the write lock it is rolled
        back and run again in a worker thread that waits (busy timeout), so the event loop never blocks on another
        process. PostgreSQL: the async driver."""
        if self._sqlite_path is not None:
            if self._raw is None:
                self._raw = RawConnection(self._sqlite_path, busy_timeout_ms=0)
            try:
                return self._raw.transaction(fn, immediate=immediate)
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
            return await anyio.to_thread.run_sync(self._run_waiting, fn, immediate)
        async with self._engine.begin() as conn:
            return await conn.run_sync(fn)

    def _run_waiting(self, fn: Callable[[Any], _T], immediate: bool) -> _T:
        assert self._sqlite_path is not None
        raw = RawConnection(self._sqlite_path, busy_timeout_ms=_SQLITE_BUSY_TIMEOUT_MS)
        try:
            return raw.transaction(fn, immediate=immediate)
        finally:
            raw.close()

    async def claim_effect(
        self, flow_id: str, name: str, *, instance: str, at: float, lease: float | None = None
    ) -> EffectClaim:
        """Try to become the one attempt that runs effect `name` of flow `flow_id`.

        'won' means this caller must run it and then `finish_effect` (or `release_effect` if it raised);
        otherwise the claim says what the attempt that did win has got to. With `lease`, a claim still running
        `lease` seconds after it was taken is presumed dead (its process stopped mid-effect) and is taken over.
        """
        return await self._claim(_EFFECT_LEDGER, flow_id, name, instance=instance, at=at, lease=lease)

    async def finish_effect(self, flow_id: str, name: str, outcome: Any, *, at: float) -> None:
        """Record the outcome of an effect this caller won; every later claim reads it back."""
        stored = _to_json(outcome, what=f"the outcome of effect {name!r}")
        params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": stored, "b_at": at}
        with self._reachable(f"record the outcome of effect {name!r}"):
            updated = await self._run(lambda conn: conn.execute(_EFFECT_LEDGER.finish, params).rowcount)
        if updated != 1:
            raise RuntimeError(
                f"Effect {name!r} of flow {flow_id!r} has no running claim to finish: claim_effect must return "
                "'won' first, and an outcome, once recorded, is never replaced."
            )

    async def release_effect(self, flow_id: str, name: str) -> None:
        """Give up a claim whose effect raised, so that a retry may run it; a finished effect stays."""
        params = {"b_flow_id": flow_id, "b_key": name}
        with self._reachable(f"release effect {name!r}"):
            await self._run(lambda conn: conn.execute(_EFFECT_LEDGER.release, params))

    async def effect(self, flow_id: str, name: str) -> EffectClaim | None:
        """Where effect `name` of flow `flow_id` stands ('running' or 'done'), or `None` if never claimed."""
        with self._reachable(f"read effect {name!r}"):
            return await self._run(lambda conn: _EFFECT_LEDGER.look(conn, flow_id, name))

    # Rounds -----------------------------------------------------------------------------------------------

    async def claim_round(
        self, flow_id: str, round_: int, *, instance: str, at: float, lease: float | None = None
    ) -> RoundClaim:
        """Try to become the one attempt that answers round `round_` of flow `flow_id` (the round whose questions
        the request answers). A finished flow answers 'completed' with its result, whatever the round; a round
        another attempt answered already is 'done' with what it answered; 'running' means another attempt holds
        it (taken over after `lease` seconds, as for effects); 'won' means this caller runs the handler and then
        ends the round through `finish_flow(..., round_outcome=...)`, or releases it there on failure."""

        def claim(conn: Connection) -> RoundClaim | None:
            found = _ROUND_LEDGER.try_claim(conn, flow_id, round_, instance=instance, at=at, lease=lease)
            if found is None:
                return None
            if found.status == "won":
                # A flow that completed before rounds were recorded (or whose rows were cleaned up) is still done.
                completed = conn.execute(_READ_COMPLETION, {"flow_id": flow_id}).scalar()
                if completed is not None:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": _ROUND_COMPLETED, "b_at": at}
                    conn.execute(_ROUND_LEDGER.finish, params)
                    return RoundClaim("completed", json.loads(completed))
            return _round_claim(conn, flow_id, found)

        return await self._retrying_claim(claim, f"claim round {round_} of a flow", busy=RoundClaim("running"))

    async def round_outcome(self, flow_id: str, round_: int) -> RoundClaim | None:
        """Where round `round_` of flow `flow_id` stands: 'completed' (it completed the flow), 'done', 'running',
        or `None` when nobody holds it (its attempt failed and released it)."""

        def read(conn: Connection) -> RoundClaim | None:
            found = _ROUND_LEDGER.look(conn, flow_id, round_)
            return None if found is None else _round_claim(conn, flow_id, found)

        with self._reachable(f"read round {round_} of a flow"):
            return await self._run(read)

    async def _claim(
        self, ledger: _Ledger, flow_id: str, key: Any, *, instance: str, at: float, lease: float | None
    ) -> EffectClaim:
        def claim(conn: Connection) -> EffectClaim | None:
            return ledger.try_claim(conn, flow_id, key, instance=instance, at=at, lease=lease)

        return await self._retrying_claim(claim, f"claim {ledger.key} {key!r}", busy=EffectClaim("running"))

    async def _retrying_claim(self, claim: Callable[[Any], _C | None], doing: str, *, busy: _C) -> _C:
        with self._reachable(doing):
            for _ in range(_RACE_ATTEMPTS):
                # A claim may read before it writes (a round reads the flow's completion first).
                outcome = await self._run(claim, immediate=True)
                if outcome is not None:
                    return outcome
        # Each time, the winner released between our INSERT and our read; someone is evidently at it.
        return busy

    async def count_effects(self, name: str | None = None) -> int:
        """How many effects are claimed (running or done), all of them or those called `name`."""
        query = select(func.count()).select_from(EffectRow)
        if name is not None:
            query = query.where(EffectRow.name == name)
        with self._reachable("count effects"):
            async with self._engine.connect() as conn:
                return (await conn.execute(query)).scalar_one()

    # Flow completions -------------------------------------------------------------------------------------

    async def record_completion(
        self, flow_id: str, *, tool: str, principal: str | None, result: Any, at: float
    ) -> Completion:
        """Store the result of a flow unless one is stored already; return the stored one either way, and whether
        this call stored it (`first`), so that concurrent replays can tell themselves from the first run."""
        completion = await self.finish_flow(flow_id, tool=tool, principal=principal, result=result, at=at)
        assert completion is not None
        return completion

    async def completion(self, flow_id: str) -> Any | None:
        """The stored result of flow `flow_id`, or `None` if it has not completed."""
        with self._reachable(f"read the result of flow {flow_id!r}"):
            stored = await self._run(lambda conn: conn.execute(_READ_COMPLETION, {"flow_id": flow_id}).scalar())
        return None if stored is None else json.loads(stored)

    # Audit ------------------------------------------------------------------------------------------------

    async def add_audit(self, event: AuditEvent) -> None:
        await self.add_audit_many([event])

    async def finish_flow(
        self,
        flow_id: str | None,
        *,
        effects: Sequence[tuple[str, Any]] = (),
        tool: str | None = None,
        principal: str | None = None,
        result: Any = None,
        events: Sequence[AuditEvent] = (),
        at: float,
        round_: int | None = None,
        round_outcome: Any = None,
    ) -> Completion | None:
        """The end of a round in one transaction: record the outcomes of the effects this round ran (claims it won),
        the flow's result (first writer wins, as `record_completion`; skipped when `result` is None), the end of the
        round this caller claimed (`round_`: done, with the flow's result or else `round_outcome`; released when it
        has neither, so that another copy may run it), and the round's audit events. One commit instead of one per row is most of what
        askback costs per round."""
        finished = [(name, _to_json(outcome, what=f"the outcome of effect {name!r}")) for name, outcome in effects]
        stored = None if result is None else _to_json(result, what=f"the result of tool {tool!r}")
        if result is not None:
            answered: str | None = _ROUND_COMPLETED
        else:
            answered = None if round_outcome is None else _to_json(round_outcome, what="the outcome of the round")
        rows = self._audit_rows(events)

        def write(conn: Connection) -> Completion | None:
            completion: Completion | None = None
            for name, outcome in finished:
                params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": outcome, "b_at": at}
                conn.execute(_EFFECT_LEDGER.finish, params)
            if round_ is not None and flow_id is not None:
                if answered is None:
                    conn.execute(_ROUND_LEDGER.release, {"b_flow_id": flow_id, "b_key": round_})
                else:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": answered, "b_at": at}
                    conn.execute(_ROUND_LEDGER.finish, params)
            if stored is not None and flow_id is not None:
                values = {
                    "flow_id": flow_id,
                    "tool": tool,
                    "principal": principal,
                    "result": stored,
                    "completed_at": at,
                }
                if conn.execute(_RECORD_FLOW[conn.dialect.name], values).rowcount == 1:
                    completion = Completion(json.loads(stored), first=True)
                else:
                    existing: str = conn.execute(_READ_COMPLETION, {"flow_id": flow_id}).scalar_one()
                    completion = Completion(json.loads(existing), first=False)
                    for i, row in enumerate(rows):
                        if row["event"] == "completed" and row["flow_id"] == flow_id:
                            rows[i] = {**row, "event": "replayed", "outcome": "completed"}
            if rows:
                conn.execute(_INSERT_AUDIT, rows)
            return completion

        with self._reachable("record the end of the round"):
            return await self._run(write)

    async def add_audit_many(self, events: Sequence[AuditEvent]) -> None:
        """Write several events in one transaction (one round's events are written together)."""
        if not events:
            return
        rows = self._audit_rows(events)
        with self._reachable(f"write {len(rows)} audit event(s)"):
            await self._run(lambda conn: conn.execute(_INSERT_AUDIT, rows))

    @staticmethod
    def _audit_rows(events: Sequence[AuditEvent]) -> list[dict[str, Any]]:
        # Every text goes through `storable`: an event about a request that carried text no database can store
        # (a lone surrogate, a NUL) must still be written, or the trail would have a gap exactly where it matters.
        return [
            {
                "at": event.at,
                "event": event.event,
                "tool": storable(event.tool),
                "flow_id": storable(event.flow_id),
                "principal": storable(event.principal),
                "round": event.round,
                "keys": _to_json(list(event.keys), what="audit keys"),
                "mode": storable(event.mode),
                "action": storable(event.action),
                "content": None if event.content is None else _to_json(event.content, what="audit content"),
                "outcome": storable(event.outcome),
                "detail": storable(event.detail),
                "instance": storable(event.instance),
            }
            for event in events
        ]

    async def audit(self, flt: AuditFilter = AuditFilter()) -> list[AuditEvent]:
        """The audit events that match `flt`, oldest first."""
        query = select(AuditRow.__table__)
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
        query = query.order_by(AuditRow.at.desc(), AuditRow.id.desc()).limit(flt.limit)
        with self._reachable("read the audit log"):
            async with self._engine.connect() as conn:
                rows = (await conn.execute(query)).all()
        return [_audit_event(row._mapping) for row in reversed(rows)]

    # Plumbing ---------------------------------------------------------------------------------------------

    async def _require_head(self) -> None:
        current, head = await self.current_revision(), self.head_revision()
        if current == head:
            return
        if current is None:
            raise ConfigurationError(
                f"The database at {self._safe_url} has no askback tables yet. Run `askback db upgrade` with "
                "the same ASKBACK_DATABASE_URL to create them, then start askback again."
            )
        if current not in {script.revision for script in _script_directory().walk_revisions()}:
            raise ConfigurationError(
                f"The database at {self._safe_url} is at schema revision {current!r}, which this version of "
                f"askback does not know (its newest is {head!r}): a newer askback upgraded it. Install that "
                "newer askback here too, or point ASKBACK_DATABASE_URL at another database."
            )
        raise ConfigurationError(
            f"The database at {self._safe_url} is at schema revision {current!r}, but this askback needs "
            f"{head!r}. Run `askback db upgrade` with the same ASKBACK_DATABASE_URL, then start askback again."
        )

    @contextmanager
    def _reachable(self, doing: str) -> Iterator[None]:
        """Turn "the database is not there" into `StoreUnavailableError`; let every other error through."""
        try:
            yield
        except (sa_exc.DBAPIError, sa_exc.TimeoutError, OSError, sqlite3.OperationalError) as exc:
            if not _means_unavailable(exc):
                raise
            raise StoreUnavailableError(
                f"Could not {doing}: the database at {self._safe_url} is unavailable ({_first_line(exc)}). "
                "Check that it is running and reachable with these credentials, then retry."
            ) from exc


def unavailable_error(exc: BaseException, *, doing: str = "reach the database") -> StoreUnavailableError | None:
    """The `StoreUnavailableError` for a database error raised by code using `Store.engine` (an application's own
    tables), or `None` when `exc` does not mean the database is unreachable."""
    if not isinstance(exc, sa_exc.DBAPIError | sa_exc.TimeoutError | OSError) or not _means_unavailable(exc):
        return None
    return StoreUnavailableError(
        f"Could not {doing}: the database is unavailable ({_first_line(exc)}). Nothing was done twice; retry the "
        "same request when the database is back."
    )


def _means_unavailable(exc: BaseException) -> bool:
    if isinstance(exc, OSError | sa_exc.TimeoutError | sa_exc.OperationalError | sa_exc.InterfaceError):
        return True
    if isinstance(exc, sqlite3.OperationalError):
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        sqlstate = getattr(exc.orig, "sqlstate", None)
        return exc.connection_invalidated or (
            isinstance(sqlstate, str) and sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES
        )
    return False


def _first_line(exc: BaseException) -> str:
    # The driver's own message only: SQLAlchemy's text would add the statement and its parameters, which
    # can carry what a user typed into a form.
    cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    lines = str(cause).strip().splitlines()
    return lines[0] if lines else type(cause).__name__


def _to_json(value: Any, *, what: str) -> str:
    try:
        dumped = json.dumps(value, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{what} must be JSON-serialisable: {exc}") from exc
    if storable(dumped) != dumped:
        # A lone surrogate cannot be encoded as UTF-8 (JSON escapes NUL already); the escaped form reads back the
        # same value.
        return json.dumps(value, sort_keys=True, ensure_ascii=True)
    return dumped


def _audit_event(row: Any) -> AuditEvent:
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


def _require_sqlite_file(url: URL) -> None:
    """Refuse a missing SQLite file when not migrating, rather than let SQLite create an empty one."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    if not Path(database).exists():
        raise ConfigurationError(
            f"There is no askback database at {database}. Run `askback db upgrade` with the same "
            "ASKBACK_DATABASE_URL to create it, or correct ASKBACK_DATABASE_URL."
        )


def _probe_sqlite_file(url: URL) -> None:
    """Open the SQLite file once with the plain driver, and put it in WAL mode, before the async engine does.

    A file that is not a database, or a path that cannot be opened, is then reported here in words. Through the
    async driver it would surface later, and a failed aiosqlite connect leaves a worker thread that calls back into
    the event loop after the caller's loop has closed (a stray "Event loop is closed" traceback). WAL is set once,
    here: several openers of a new file would otherwise each switch it from a rollback journal, and SQLite answers
    such a collision "locked" at once, without waiting, so it is retried until the busy timeout. Runs in a thread."""
    database = url.database or ""
    if database in ("", ":memory:") or database.startswith("file:"):
        return
    deadline = time.monotonic() + _SQLITE_BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            with contextlib.closing(sqlite3.connect(database, timeout=_SQLITE_BUSY_TIMEOUT_MS / 1000)) as db:
                db.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() > deadline:
                _refuse_sqlite_file(database, exc)
            time.sleep(0.01)
        except sqlite3.DatabaseError as exc:
            _refuse_sqlite_file(database, exc)


def _refuse_sqlite_file(database: str, exc: sqlite3.DatabaseError) -> NoReturn:
    reason = _first_line(exc)
    if "not a database" in reason:
        raise ConfigurationError(
            f"{database} is not an SQLite database ({reason}); point ASKBACK_DATABASE_URL at an askback SQLite "
            "database, or at a path where askback may create one (sqlite:///askback.db)"
        ) from None
    raise StoreUnavailableError(
        f"Could not open the SQLite database at {database} ({reason}). Check that its folder exists and that "
        "this user may read and write there, or correct ASKBACK_DATABASE_URL."
    ) from None


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    text_ = str(exc).lower()
    return "locked" in text_ or "busy" in text_


def _create_engine(url: URL) -> AsyncEngine:
    if url.get_backend_name() != "sqlite":
        # Instances outlive database restarts and failovers; test each pooled connection before use.
        # A connect timeout, so that a database host that drops packets fails a call in seconds, not a minute.
        # A pool larger than SQLAlchemy's default 5: a busy instance would otherwise open and close a connection
        # (a PostgreSQL backend and a login) for every request above five at a time.
        return create_async_engine(
            url,
            pool_pre_ping=True,
            pool_size=_PG_POOL_SIZE,
            max_overflow=_PG_POOL_SIZE,
            connect_args={"timeout": _PG_CONNECT_TIMEOUT},
        )
    engine = create_async_engine(url)
    event.listen(engine.sync_engine, "connect", _on_sqlite_connect)
    event.listen(engine.sync_engine, "begin", _on_sqlite_begin)
    return engine


def _on_sqlite_connect(dbapi_connection: Any, _record: Any) -> None:
    # The sqlite3 module emits BEGIN itself only before INSERT/UPDATE/DELETE, so a migration's DDL would be
    # committed statement by statement. Take BEGIN over (SQLAlchemy's documented recipe, _on_sqlite_begin).
    dbapi_connection.isolation_level = None
    cursor = dbapi_connection.cursor()
    try:
        # busy_timeout first: switching to WAL needs a lock another process may be holding.
        cursor.execute(f"PRAGMA busy_timeout = {_SQLITE_BUSY_TIMEOUT_MS}")
        # WAL lets readers in other processes carry on while one process writes.
        cursor.execute("PRAGMA journal_mode = WAL")
        # In WAL mode NORMAL survives a crashed process (the commit is in the log); only a power loss can drop the
        # last commits. FULL would add a disk sync to every round. Use PostgreSQL where that matters.
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
    finally:
        cursor.close()


def _on_sqlite_begin(conn: Connection) -> None:
    immediate = conn.get_execution_options().get(_BEGIN_IMMEDIATE, False)
    conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def _alembic_config() -> Config:
    config = Config()
    # Config values go through configparser, which would read a '%' in the path as interpolation.
    config.set_main_option("script_location", str(_MIGRATIONS).replace("%", "%%"))
    return config


@cache
def _script_directory() -> ScriptDirectory:
    return ScriptDirectory.from_config(_alembic_config())


def _upgrade_to_head(connection: Connection) -> None:
    config = _alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, "head")


def _read_revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE}).get_current_revision()
