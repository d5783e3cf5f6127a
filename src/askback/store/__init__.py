"""The store every askback product shares: one database, opened once per process, with the server kit's tables
(the effects and rounds ledgers, flow completions, the audit log) and room for each product's own.

Several server processes (one machine with SQLite, many with PostgreSQL) answer rounds of the same flow, so
anything that must happen once is decided by the database, never in memory (see `ledger.py`). Everything here is
plain async I/O; the decisions about what a flow does live in `askback.core`. Driver failures become
`StoreUnavailableError` at this boundary (`askback.db.classify`); a duplicate key is not a failure but the
answer to "who was first".

The schema is created by each component's Alembic history (the server kit's is `migrations/` beside this module),
run by `Store.upgrade` through the engine's own connection. SQLite databases are migrated on open; PostgreSQL
ones only by `askback db upgrade`, so that one deliberate step changes a shared database.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.to_thread
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from askback.audit import AuditEvent, AuditFilter
from askback.audit import query as audit_query
from askback.audit.chain import GENESIS, ChainHead, Verdict, Verifier, link
from askback.audit.emit import chain_id, instance_id
from askback.db import migrate
from askback.db.classify import is_busy, reachable
from askback.db.engine import (
    BEGIN_IMMEDIATE,
    SQLITE_BUSY_TIMEOUT_MS,
    create_engine,
    probe_sqlite_file,
    require_sqlite_file,
)
from askback.db.sqlite import RawConnection
from askback.db.urls import normalize_database_url
from askback.errors import ConfigurationError
from askback.store._models import VERSION_TABLE
from askback.store.held import HELD_ADD, HELD_FORGET, HELD_FORGET_FLOW, HELD_PRUNE, HELD_READ
from askback.store.ledger import (
    EFFECTS,
    READ_COMPLETION,
    RECORD_EFFECT,
    RECORD_FLOW,
    ROUND_COMPLETED,
    ROUNDS,
    Completion,
    EffectClaim,
    Ledger,
    RoundClaim,
    flow_effects,
    round_claim,
)

__all__ = ["MIGRATIONS", "Completion", "EffectClaim", "RoundClaim", "Store"]

# The server kit's schema history.
MIGRATIONS = migrate.Component("server", Path(__file__).parent / "migrations", VERSION_TABLE)

_T = TypeVar("_T")
_C = TypeVar("_C")

# Any fixed number, the same in every askback process: the PostgreSQL advisory lock that migrators queue on.
_PG_MIGRATION_LOCK = 0x61736B62
_PG_SETUP_LOCK = 0x61736B63
# How often a claim retries when the row it collided with vanished (released) before it could be read.
_RACE_ATTEMPTS = 5

logger = logging.getLogger("askback")


class Store:
    """The database behind effects, rounds, completions and audit. Make one with `await Store.open(url)`."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        safe_url: str,
        sqlite_path: str | None = None,
        components: tuple[migrate.Component, ...] = (MIGRATIONS,),
        audit_chain: str | None = None,
    ) -> None:
        self._engine = engine
        self._safe_url = safe_url
        self._sqlite_path = sqlite_path
        self._components = components
        self._raw: RawConnection | None = None
        self._waiters: set[anyio.Event] = set()
        self._audit_chain = audit_chain
        # The last committed (seq, hash) of each chain this store appended to: the head it expects to move on from.
        self._audit_heads: dict[str, tuple[int, str]] = {}

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy engine, for an application that keeps its own tables in the same database."""
        return self._engine

    @property
    def safe_url(self) -> str:
        """The database URL with any password hidden."""
        return self._safe_url

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        migrate: bool | None = None,
        check: bool = True,
        components: tuple[migrate.Component, ...] = (MIGRATIONS,),
        audit_chain: str | None = None,
    ) -> Store:
        """Connect, then migrate (`migrate=True`) or check that the schema is current (`migrate=False`).

        `migrate=None` migrates SQLite, whose file belongs to this deployment, and never PostgreSQL, whose
        schema changes only through `askback db upgrade`. `check=False` skips the check (for the upgrade itself).
        `components` are the schema histories this store needs (the server kit's by default). `audit_chain` names
        the audit chain this store appends to; by default the process's own (`askback.audit.emit.chain_id`).
        """
        parsed = make_url(normalize_database_url(url))
        is_sqlite = parsed.get_backend_name() == "sqlite"
        if migrate is None:
            migrate = is_sqlite
        if is_sqlite and not migrate and check:
            require_sqlite_file(parsed)
        if is_sqlite:
            # In a thread: another process may hold the file's lock while it creates or migrates it.
            await anyio.to_thread.run_sync(probe_sqlite_file, parsed)
        store = cls(
            create_engine(parsed),
            safe_url=parsed.render_as_string(hide_password=True),
            sqlite_path=parsed.database if is_sqlite else None,
            components=components,
            audit_chain=audit_chain,
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
        """Bring every component's schema to its newest revision; a no-op when they are there."""
        # Migrators must run one at a time: two processes would both create the tables, and two in one
        # process would trample Alembic's module-global context. So each takes a database-wide lock before
        # Alembic reads the version tables: SQLite's write lock (BEGIN IMMEDIATE) or a PostgreSQL advisory
        # lock, both held until this transaction ends; whoever comes second then finds the schema at head.
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        components = self._components
        with self._reachable("upgrade the database schema"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_MIGRATION_LOCK})
                await conn.run_sync(lambda sync: migrate.upgrade(sync, components))

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[AsyncConnection]:
        """A transaction that runs alone among every process sharing the database (SQLite's write lock taken at
        BEGIN; a PostgreSQL advisory lock), for an application's idempotent set-up: creating its tables,
        seeding rows. A deferred SQLite transaction that reads and then writes fails at once with "database is
        locked" when another process writes in between; this one waits its turn instead."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        with self._reachable("set up the application's tables"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_SETUP_LOCK})
                yield conn

    @asynccontextmanager
    async def locked(self, key: str) -> AsyncIterator[AsyncConnection]:
        """A transaction that holds the lock named `key` among every process sharing the database, for work that must
        happen once at a time across instances and touches nothing but the database (never wait for the network while
        holding it): PostgreSQL takes the advisory lock `pg_advisory_xact_lock` of a stable 64-bit hash of `key`, so
        other keys go on; SQLite takes the database's write lock at BEGIN (BEGIN IMMEDIATE), so every other writer
        waits, up to its busy timeout. The lock lasts
        until the transaction ends: do the writes that go with it through the connection yielded (on SQLite a write
        through any other connection would wait for this one), and commit early with `await conn.commit()` if the
        commit must not be cancelled with the block."""
        engine = self._engine.execution_options(**{BEGIN_IMMEDIATE: True})
        # The same signed 64-bit number in every process (Python's own `hash` of a str differs per process).
        number = int.from_bytes(hashlib.sha256(f"askback.lock:{key}".encode()).digest()[:8], "big", signed=True)
        with self._reachable(f"take the lock {key!r}"):
            async with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": number})
                yield conn

    async def revisions(self) -> dict[str, str | None]:
        """The revision the database is at for each of this store's components (`None`: never created)."""
        components = self._components

        def read(sync: Connection) -> dict[str, str | None]:
            return {c.name: migrate.read_revision(sync, c) for c in components}

        with self._reachable("read the database schema revision"):
            async with self._engine.connect() as conn:
                return await conn.run_sync(read)

    async def schema_behind(self) -> bool:
        """True when the database is at an older revision than this release needs, for any component. A newer
        revision (a later release already upgraded it, during a rolling update) is not "behind": migrations keep
        the previous release working."""
        found = await self.revisions()
        return any(migrate.schema_status(found[c.name], c) in ("behind", "missing") for c in self._components)

    async def current_revision(self) -> str | None:
        """The server kit's schema revision; `None` when its tables were never created."""
        return (await self.revisions())[MIGRATIONS.name]

    @staticmethod
    def head_revision() -> str:
        """The server kit's schema revision this version of askback needs."""
        return migrate.head_revision(MIGRATIONS)

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

    async def transaction(self, fn: Callable[[Any], _T], *, doing: str, immediate: bool = False) -> _T:
        """Run `fn(conn)` in one transaction, for a product's own tables: `conn.execute(statement, params)` with
        `.rowcount`, `.first()`, `.scalar()` and `.scalar_one()` on its result. Statements must be built once (module
        constants with bound parameters), as SQLite's fast path compiles each statement object once. `immediate`
        takes SQLite's write lock at BEGIN (for a transaction that reads, then writes). A database that cannot be
        reached is `StoreUnavailableError`, saying it could not `doing`."""
        with self._reachable(doing):
            return await self._run(fn, immediate=immediate)

    async def read(self, fn: Callable[[Any], _T], *, doing: str) -> _T:
        """Run the reads of `fn(conn)` outside any transaction: on PostgreSQL one round trip per statement (no
        BEGIN and COMMIT around it); on SQLite the fast path, as `transaction`. For reads that need no consistent
        snapshot across statements."""
        with self._reachable(doing):
            if self._sqlite_path is not None:
                return await self._run(fn)
            async with self._engine.connect() as conn:
                auto = await conn.execution_options(isolation_level="AUTOCOMMIT")
                return await auto.run_sync(fn)

    # Waiting for another attempt ---------------------------------------------------------------------------

    @contextmanager
    def watching(self) -> Iterator[anyio.Event]:
        """An event set the next time this process settles a claim (an outcome recorded, a claim released), so
        that a wait for another attempt in the same process wakes at once instead of at its next poll."""
        event = anyio.Event()
        self._waiters.add(event)
        try:
            yield event
        finally:
            self._waiters.discard(event)

    def _settled(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for event in waiters:
            event.set()

    # Effects ----------------------------------------------------------------------------------------------

    async def claim_effect(
        self, flow_id: str, name: str, *, instance: str, at: float, lease: float | None = None
    ) -> EffectClaim:
        """Try to become the one attempt that runs effect `name` of flow `flow_id`.

        'won' means this caller must run it and then `finish_effect` (or `release_effect` if it raised);
        otherwise the claim says what the attempt that did win has got to. With `lease`, a claim still running
        `lease` seconds after it was taken is presumed dead (its process stopped mid-effect) and is taken over.
        """
        return await self._claim(EFFECTS, flow_id, name, instance=instance, at=at, lease=lease)

    async def finish_effect(self, flow_id: str, name: str, outcome: Any, *, at: float) -> None:
        """Record the outcome of an effect this caller won; every later claim reads it back."""
        stored = audit_query.to_json(outcome, what=f"the outcome of effect {name!r}")
        params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": stored, "b_at": at}
        with self._reachable(f"record the outcome of effect {name!r}"):
            updated = await self._run(lambda conn: conn.execute(EFFECTS.finish, params).rowcount)
        self._settled()
        if updated != 1:
            raise RuntimeError(
                f"Effect {name!r} of flow {flow_id!r} has no running claim to finish: claim_effect must return "
                "'won' first, and an outcome, once recorded, is never replaced."
            )

    async def release_effect(self, flow_id: str, name: str) -> None:
        """Give up a claim whose effect raised, so that a retry may run it; a finished effect stays."""
        params = {"b_flow_id": flow_id, "b_key": name}
        with self._reachable(f"release effect {name!r}"):
            await self._run(lambda conn: conn.execute(EFFECTS.release, params))
        self._settled()

    async def effect(self, flow_id: str, name: str) -> EffectClaim | None:
        """Where effect `name` of flow `flow_id` stands ('running' or 'done'), or `None` if never claimed."""
        with self._reachable(f"read effect {name!r}"):
            return await self._run(lambda conn: EFFECTS.look(conn, flow_id, name))

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
            found = ROUNDS.try_claim(conn, flow_id, round_, instance=instance, at=at, lease=lease)
            if found is None:
                return None
            if found.status == "won":
                # A flow that completed before rounds were recorded (or whose rows were cleaned up) is still done.
                completed = conn.execute(READ_COMPLETION, {"flow_id": flow_id}).scalar()
                if completed is not None:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": ROUND_COMPLETED, "b_at": at}
                    conn.execute(ROUNDS.finish, params)
                    return RoundClaim("completed", json.loads(completed))
                return RoundClaim("won", effects=flow_effects(conn, flow_id))
            return round_claim(conn, flow_id, found)

        return await self._retrying_claim(claim, f"claim round {round_} of a flow", busy=RoundClaim("running"))

    async def round_outcome(self, flow_id: str, round_: int) -> RoundClaim | None:
        """Where round `round_` of flow `flow_id` stands: 'completed' (it completed the flow), 'done', 'running',
        or `None` when nobody holds it (its attempt failed and released it)."""

        def read(conn: Connection) -> RoundClaim | None:
            found = ROUNDS.look(conn, flow_id, round_)
            return None if found is None else round_claim(conn, flow_id, found)

        with self._reachable(f"read round {round_} of a flow"):
            return await self._run(read)

    async def _claim(
        self, ledger: Ledger, flow_id: str, key: Any, *, instance: str, at: float, lease: float | None
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

    # The end of a round -----------------------------------------------------------------------------------

    async def finish_flow(
        self,
        flow_id: str | None,
        *,
        effects: Sequence[tuple[str, Any]] = (),
        new_effects: Sequence[tuple[str, Any]] = (),
        tool: str | None = None,
        principal: str | None = None,
        result: Any = None,
        events: Sequence[AuditEvent] = (),
        at: float,
        round_: int | None = None,
        round_outcome: Any = None,
        held: tuple[str, int, str, float] | None = None,
    ) -> Completion | None:
        """The end of a round in one transaction: record the outcomes of the effects this round ran (claims it won),
        the flow's result (first writer wins: a later one gets the recorded result back, `first=False`; skipped
        when `result` is None), the end of the round this caller claimed (`round_`: done, with the flow's result or
        else `round_outcome`; released when it has neither, so that another copy may run it), the answers it holds
        on the server (`held`: flow id, round, sealed answers, until when; expired ones are pruned then, and a
        completed flow's are deleted), and the round's audit events. One commit instead of one per row is most of
        what askback costs per round."""
        to_json = audit_query.to_json
        finished = [(name, to_json(outcome, what=f"the outcome of effect {name!r}")) for name, outcome in effects]
        ran = [
            {
                "flow_id": flow_id,
                "name": name,
                "status": "done",
                "outcome": to_json(outcome, what=f"the outcome of effect {name!r}"),
                "instance": instance_id(),
                "started_at": at,
                "finished_at": at,
            }
            for name, outcome in new_effects
        ]
        stored = None if result is None else to_json(result, what=f"the result of tool {tool!r}")
        if result is not None:
            answered: str | None = ROUND_COMPLETED
        else:
            answered = None if round_outcome is None else to_json(round_outcome, what="the outcome of the round")
        rows = audit_query.to_rows(events)
        chain = self._audit_chain or chain_id()
        appended: list[tuple[int, str]] = []

        def write(conn: Connection) -> Completion | None:
            completion: Completion | None = None
            appended.clear()
            for name, outcome in finished:
                params = {"b_flow_id": flow_id, "b_key": name, "b_outcome": outcome, "b_at": at}
                conn.execute(EFFECTS.finish, params)
            if ran:
                conn.execute(RECORD_EFFECT[conn.dialect.name], ran)
            if round_ is not None and flow_id is not None:
                if answered is None:
                    conn.execute(ROUNDS.release, {"b_flow_id": flow_id, "b_key": round_})
                else:
                    params = {"b_flow_id": flow_id, "b_key": round_, "b_outcome": answered, "b_at": at}
                    conn.execute(ROUNDS.finish, params)
            if stored is not None and flow_id is not None:
                values = {
                    "flow_id": flow_id,
                    "tool": tool,
                    "principal": principal,
                    "result": stored,
                    "completed_at": at,
                }
                if conn.execute(RECORD_FLOW[conn.dialect.name], values).rowcount == 1:
                    completion = Completion(json.loads(stored), first=True)
                    conn.execute(HELD_FORGET_FLOW, {"flow_id": flow_id})
                else:
                    existing: str = conn.execute(READ_COMPLETION, {"flow_id": flow_id}).scalar_one()
                    completion = Completion(json.loads(existing), first=False)
                    for i, row in enumerate(rows):
                        if row["event"] == "completed" and row["flow_id"] == flow_id:
                            rows[i] = {**row, "event": "replayed", "outcome": "completed"}
            if held is not None:
                held_flow, held_round, sealed, until = held
                conn.execute(HELD_PRUNE, {"now": at})
                conn.execute(HELD_FORGET, {"flow_id": held_flow, "round": held_round})
                conn.execute(
                    HELD_ADD, {"flow_id": held_flow, "round": held_round, "sealed": sealed, "expires_at": until}
                )
            if rows:
                appended.append(self._append_audit(conn, rows, chain))
            return completion

        with self._reachable("record the end of the round"):
            completion = await self._run(write)
        self._appended(chain, appended)
        if finished or ran or round_ is not None:
            self._settled()
        return completion

    async def held_answers(self, flow_id: str, round_: int) -> str | None:
        """The sealed answers a flow holds on the server for `round_`, or None (completed, expired, never held)."""
        found: str | None = await self.read(
            lambda conn: conn.execute(HELD_READ, {"flow_id": flow_id, "round": round_}).scalar(),
            doing="read a flow's answers",
        )
        return found

    async def prune_held(self, *, now: float) -> int:
        """Delete the held answers of flows past their deadline (also done on every round that holds answers);
        how many rows went."""
        pruned: int = await self.transaction(
            lambda conn: conn.execute(HELD_PRUNE, {"now": now}).rowcount, doing="prune expired answers"
        )
        return pruned

    # Audit ------------------------------------------------------------------------------------------------

    async def add_audit_many(self, events: Sequence[AuditEvent]) -> None:
        """Write several events in one transaction (one round's events are written together)."""
        if not events:
            return
        rows = audit_query.to_rows(events)
        chain = self._audit_chain or chain_id()
        with self._reachable(f"write {len(rows)} audit event(s)"):
            head = await self._run(lambda conn: self._append_audit(conn, rows, chain))
        self._appended(chain, [head])

    def _append_audit(self, conn: Any, rows: list[dict[str, Any]], chain: str) -> tuple[int, str]:
        """Link `rows` onto `chain` and insert them, moving the chain's head, inside the caller's transaction; the
        new head (seq, hash), for `_appended` once the transaction has committed.

        The hot path is one UPDATE of the head, from the head this store last committed, and one INSERT of the rows.
        When that head is not the one recorded (the first write of the chain, or another task of this process
        appended meanwhile), the head row is read under its lock and the rows linked again. Each statement on the
        chain writes before it reads, so that SQLite's write lock is held before the head is read."""
        known = self._audit_heads.get(chain)
        if known is None:
            values = {"chain": chain, "seq": 0, "head": GENESIS, "started_at": rows[0]["at"]}
            conn.execute(audit_query.CHAIN_START[conn.dialect.name], values)
        else:
            linked, seq, head = link(rows, chain, *known)
            params = {"b_chain": chain, "b_from": known[0], "b_seq": seq, "b_head": head}
            if conn.execute(audit_query.CHAIN_ADVANCE, params).rowcount == 1:
                conn.execute(audit_query.INSERT, linked)
                return seq, head
        found = conn.execute(audit_query.CHAIN_HEAD, {"b_chain": chain}).first()
        recorded: tuple[int, str] = (found.seq, found.head)
        start = recorded
        if known is not None and known[0] > recorded[0]:
            # Only someone editing the table by hand moves a head back: carry on after the rows this store wrote,
            # so that the gap shows rather than being written over.
            logger.warning(
                "askback audit chain %s: its head went back from seq %d to seq %d; continuing after seq %d",
                chain,
                known[0],
                recorded[0],
                known[0],
            )
            start = known
        linked, seq, head = link(rows, chain, *start)
        params = {"b_chain": chain, "b_from": recorded[0], "b_seq": seq, "b_head": head}
        conn.execute(audit_query.CHAIN_ADVANCE, params)
        conn.execute(audit_query.INSERT, linked)
        return seq, head

    def _appended(self, chain: str, heads: Sequence[tuple[int, str]]) -> None:
        """Remember the head a committed transaction left `chain` at. Tasks may commit in one order and get here in
        another, so only a later head replaces an earlier one."""
        for head in heads:
            known = self._audit_heads.get(chain)
            if known is None or known[0] < head[0]:
                self._audit_heads[chain] = head

    async def verify_audit(self) -> Verdict:
        """Walk every audit chain and find the first broken link of each (`askback.audit.chain.Verifier`), reading
        the heads and the rows in one snapshot, so that rounds written meanwhile do not look like tampering."""
        with self._reachable("verify the audit trail"):
            async with self._engine.connect() as conn:
                if conn.dialect.name == "postgresql":
                    conn = await conn.execution_options(isolation_level="REPEATABLE READ")
                async with conn.begin():
                    heads = [
                        ChainHead(r.chain, r.seq, r.head, r.started_at)
                        for r in (await conn.execute(audit_query.CHAIN_HEADS)).all()
                    ]
                    verifier = Verifier(heads)
                    for statement in (audit_query.CHAINED_ROWS, audit_query.UNCHAINED_ROWS):
                        rows = await conn.stream(statement.execution_options(yield_per=1000))
                        async for row in rows:
                            verifier.add(row._asdict())
        return verifier.finish()

    async def audit(self, flt: AuditFilter = AuditFilter()) -> list[AuditEvent]:
        """The audit events that match `flt`, oldest first."""
        with self._reachable("read the audit log"):
            async with self._engine.connect() as conn:
                rows = (await conn.execute(audit_query.selecting(flt))).all()
        return [audit_query.from_row(row._mapping) for row in reversed(rows)]

    # Plumbing ---------------------------------------------------------------------------------------------

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
                if not is_busy(exc):
                    raise
            return await anyio.to_thread.run_sync(self._run_waiting, fn, immediate)
        async with self._engine.begin() as conn:
            return await conn.run_sync(fn)

    def _run_waiting(self, fn: Callable[[Any], _T], immediate: bool) -> _T:
        assert self._sqlite_path is not None
        raw = RawConnection(self._sqlite_path, busy_timeout_ms=SQLITE_BUSY_TIMEOUT_MS)
        try:
            return raw.transaction(fn, immediate=immediate)
        finally:
            raw.close()

    async def _require_head(self) -> None:
        found = await self.revisions()
        for component in self._components:
            current = found[component.name]
            status = migrate.schema_status(current, component)
            head = migrate.head_revision(component)
            if status == "current":
                continue
            if status == "missing":
                raise ConfigurationError(
                    f"The database at {self._safe_url} has no askback tables yet. Run `askback db upgrade` with "
                    "the same ASKBACK_DATABASE_URL to create them, then start askback again."
                )
            if status == "ahead":
                raise ConfigurationError(
                    f"The database at {self._safe_url} is at schema revision {current!r}, which this version of "
                    f"askback does not know (its newest is {head!r}): a newer askback upgraded it. Install that "
                    "newer askback here too, or point ASKBACK_DATABASE_URL at another database."
                )
            raise ConfigurationError(
                f"The database at {self._safe_url} is at schema revision {current!r}, but this askback needs "
                f"{head!r}. Run `askback db upgrade` with the same ASKBACK_DATABASE_URL, then start askback again."
            )

    def _reachable(self, doing: str) -> AbstractContextManager[None]:
        return reachable(doing, where=self._safe_url)
