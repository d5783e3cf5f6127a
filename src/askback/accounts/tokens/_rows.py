"""The keeper's SQL: the read of an account's row (shared by callers asking at the same moment, batched on
PostgreSQL), the refresh claim taken and let go in short transactions, and the conditional write of an outcome
over the very status and credential that were read."""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, cast

import anyio
import anyio.lowlevel
import sqlalchemy as sa
from sqlalchemy import Table, any_, bindparam, func, or_, select, update
from sqlalchemy.dialects.postgresql import ARRAY

from askback.accounts._models import AccountEventRow, AccountRow
from askback.accounts.connections import ApiKeyConnection, Connection
from askback.accounts.repository import KEEP, Accounts, apply_change
from askback.accounts.status import Event, Status
from askback.accounts.tokens._policy import Held, TokenSet
from askback.accounts.vault import Vault
from askback.clock import Clock
from askback.errors import AccountStateError, AskbackError

_ACCOUNTS = cast(Table, AccountRow.__table__)
_EVENTS = cast(Table, AccountEventRow.__table__)
_a, _e = _ACCOUNTS.c, _EVENTS.c

_CLAIM_COLUMNS = (_a.failures, _a.retry_at, _a.refresh_owner, _a.refresh_until)
# One read gives the decision all it needs: status, reason, the sealed credential, the account's version, its
# backoff and who holds its refresh claim.
_HELD = select(
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
    *_CLAIM_COLUMNS,
).where(_a.id == bindparam("id"))
# The same read for every account asked for in one moment (PostgreSQL only: one query instead of one per account;
# the ids go as one array parameter, so the statement's text is the same whatever their number).
# The id comes last: the columns before it are `_HELD`'s, so that a row kept from either read matches the other.
_HELD_MANY = select(
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
    *_CLAIM_COLUMNS,
    _a.id,
).where(_a.id == any_(bindparam("ids", type_=ARRAY(sa.String))))
# How many accounts' opened credentials a keeper keeps (see `TokenRows._held`).
OPENED_CACHE_SIZE = 4096
_VERSION = select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == bindparam("id"))
_AS_READ = select(_a.status, _a.credential).where(_a.id == bindparam("id"))
# The refresh claim: taken only when nobody holds an unexpired one and the row is still as the claimant read it
# (every outcome the keeper writes changes the status, the credential or the failure count), so that a caller who
# read before another's refresh finished cannot claim and refresh again with a used refresh token.
_CLAIM = (
    update(_ACCOUNTS)
    .where(
        _a.id == bindparam("b_id"),
        _a.status == bindparam("b_status"),
        _a.credential.is_not_distinct_from(bindparam("b_was")),
        _a.failures == bindparam("b_failures"),
        or_(_a.refresh_owner.is_(None), _a.refresh_until <= bindparam("b_now")),
    )
    .values(refresh_owner=bindparam("b_owner"), refresh_until=bindparam("b_until"))
)
_RELEASE = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"), _a.refresh_owner == bindparam("b_owner"))
    .values(refresh_owner=None, refresh_until=None)
)
_SET_BACKOFF = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"))
    .values(failures=bindparam("b_failures"), retry_at=bindparam("b_retry_at"))
)


def _key(row: Any) -> tuple[Any, ...]:
    """Every column `_HELD` read (a SQLAlchemy row, or the SQLite fast path's namespace of them), in its order."""
    return tuple(vars(row).values()) if isinstance(row, SimpleNamespace) else tuple(row)


@dataclass
class Claim:
    """A refresh claim this keeper holds on an account: `owner` is written in the account's row."""

    account_id: str
    owner: str
    released: bool = False


@dataclass
class _Read:
    """One read of an account that callers arriving meanwhile wait for instead of reading again."""

    done: anyio.Event = field(default_factory=anyio.Event)
    ok: bool = False
    held: Held | None = None


class TokenRows:
    """The rows of connected accounts as the keeper reads and writes them: every statement runs in one short
    transaction, and none is open while the keeper waits for a provider or for another's claim."""

    def __init__(self, accounts: Accounts, vault: Vault, clock: Clock) -> None:
        self.accounts = accounts
        self.vault = vault
        self.clock = clock
        self._reading: dict[str, _Read] = {}
        self._batch: dict[str, tuple[_Read, Connection]] = {}
        self._batch_done: anyio.Event | None = None
        self._batched = accounts.database.engine.dialect.name == "postgresql"
        # account id -> (the row as read, the connection it was read for, what it held): see `_held`.
        self._opened: dict[str, tuple[tuple[Any, ...], Connection, Held | None]] = {}
        # Moved on by every `forget`: a read that began before one keeps nothing (it may hold what was forgotten).
        self._forgets = 0

    async def read(self, account_id: str, connection: Connection, *, join: bool = True) -> Held | None:
        """What the database holds for the account. Callers that look at one account at the same moment share one
        read (`join`): a burst of tool calls for one account costs one query, not one per call. On PostgreSQL, the
        accounts asked for in the same moment are read together, in one query. A caller that must see what was
        committed after it began (the re-check after waiting for the lock or a claim) does not join."""
        flight = self._reading.get(account_id) if join else None
        if flight is not None:
            await flight.done.wait()
            if flight.ok:
                return flight.held
        elif join and self._batched:
            if not self._batch or self._batch_done is None:
                self._batch_done = anyio.Event()  # one event for the whole batch: set once, it wakes every caller
            flight = _Read(self._batch_done)
            self._reading[account_id] = flight
            self._batch[account_id] = (flight, connection)
            if len(self._batch) == 1:
                await self._read_batch()
            await flight.done.wait()
            if flight.ok:
                return flight.held
        else:
            flight = _Read()
            if join:
                self._reading[account_id] = flight
            try:
                forgets = self._forgets
                row = await self.accounts.database.transaction(
                    lambda conn: conn.execute(_HELD, {"id": account_id}).first(), doing=f"read account {account_id!r}"
                )
                key = None if row is None else _key(row)
                flight.held, flight.ok = self._held(account_id, connection, row, key, forgets), True
                return flight.held
            finally:
                if self._reading.get(account_id) is flight:
                    del self._reading[account_id]
                flight.done.set()
        # The read this caller joined failed (or was cancelled with its caller): read again, alone.
        return await self.read(account_id, connection, join=False)

    async def _read_batch(self) -> None:
        """Read every account queued in this moment with one query. The first caller queues, lets the others that are
        ready run up to their own read (one checkpoint), then reads for all of them. Whatever happens to it (its
        caller cancelled at the checkpoint, the query failing), every caller of the batch is woken, and one whose
        account was not read reads it again alone."""
        batch: dict[str, tuple[_Read, Connection]] = {}
        try:
            try:
                await anyio.lowlevel.checkpoint()
            finally:
                batch, self._batch = self._batch, {}
            forgets = self._forgets
            with anyio.CancelScope(shield=True):
                rows = await self.accounts.database.read(
                    lambda conn: conn.execute(_HELD_MANY, {"ids": list(batch)}).all(),
                    doing=f"read {len(batch)} connected account(s)",
                )
            by_id = {row.id: row for row in rows}
            for account_id, (flight, connection) in batch.items():
                row = by_id.get(account_id)
                key = None if row is None else tuple(row)[:-1]  # without the id, as `_HELD` reads it
                try:
                    flight.held, flight.ok = self._held(account_id, connection, row, key, forgets), True
                except Exception:
                    flight.ok = False
        except Exception:
            pass  # every caller reads its own account again alone, and gets its own answer or error
        finally:
            for account_id, (flight, _) in batch.items():
                if self._reading.get(account_id) is flight:
                    del self._reading[account_id]
                flight.done.set()

    def forget(self, account_id: str) -> None:
        """Drop what `_held` kept of the account (its opened credential), once this keeper changed its row; reads
        under way keep nothing of what they bring back."""
        self._forgets += 1
        self._opened.pop(account_id, None)

    def _held(
        self, account_id: str, connection: Connection, row: Any, key: tuple[Any, ...] | None, forgets: int
    ) -> Held | None:
        """What `row` holds, its credential opened. The last one per account is kept: the same row read again (the
        same sealed bytes, status, version, backoff and claim: `key`) holds the same, so it is not opened again. A row
        that differs in anything is opened afresh (and authenticated for this account by the vault), and the
        account's entry replaced; at most `OPENED_CACHE_SIZE` accounts are kept, the least recently used dropped
        first. A read that began before a `forget` (`forgets` is the count it saw) keeps nothing."""
        kept = self._opened.pop(account_id, None)
        if row is None or key is None:
            return None
        if kept is not None and kept[1] is connection and kept[0] == key:
            held = kept[2]
        else:
            held = self._open(account_id, connection, row)
        if forgets == self._forgets:
            if len(self._opened) >= OPENED_CACHE_SIZE:
                del self._opened[next(iter(self._opened))]
            self._opened[account_id] = (key, connection, held)  # last: the most recently used
        return held

    def _open(self, account_id: str, connection: Connection, row: Any) -> Held:
        """`row` as `Held`, its credential opened by the vault for this account."""
        tokens = None
        if row.credential is not None:
            stored = self.vault.open(account_id, row.credential)
            if isinstance(connection, ApiKeyConnection):
                tokens = TokenSet(access_token=str(stored["api_key"]), token_type=connection.scheme or "")
            else:
                tokens = TokenSet.from_vault(stored)
        claimed_until = row.refresh_until if row.refresh_owner is not None else None
        return Held(
            Status(row.status),
            row.reason,
            tokens,
            int(row.version),
            sealed=row.credential,
            failures=int(row.failures or 0),
            retry_at=row.retry_at,
            claimed_until=claimed_until,
        )

    @asynccontextmanager
    async def claim(self, account_id: str, held: Held, *, lease: float) -> AsyncIterator[Claim | None]:
        """The account's refresh claim, taken in one short transaction if nobody holds it and the account is still
        as `held` (`None` otherwise), and let go at the end unless the outcome's write did."""
        claim = Claim(account_id, secrets.token_urlsafe(12))
        now = self.clock.now()
        params = {
            "b_id": account_id,
            "b_status": held.status.value,
            "b_was": held.sealed,
            "b_failures": held.failures,
            "b_now": now,
            "b_owner": claim.owner,
            "b_until": now + lease,
        }
        won = await self.accounts.database.transaction(
            lambda conn: conn.execute(_CLAIM, params).rowcount == 1,
            doing=f"claim the refresh of account {account_id!r}",
            immediate=True,
        )
        try:
            yield claim if won else None
        finally:
            if won and not claim.released:
                # Left behind, the claim would only make others wait for it to expire.
                with contextlib.suppress(AskbackError):
                    await self.accounts.database.transaction(
                        lambda conn: conn.execute(_RELEASE, {"b_id": account_id, "b_owner": claim.owner}),
                        doing=f"let go of the refresh claim of account {account_id!r}",
                    )

    async def write(
        self,
        claim: Claim | None,
        before: Held,
        event: Event,
        *,
        account_id: str | None = None,
        reason: str | None = None,
        credential: Any = KEEP,
        expires_at: float | None = None,
        failures: int = 0,
        retry_at: float | None = None,
        needs_claim: bool = False,
    ) -> int | None:
        """Write an outcome in one short transaction: the status change through the table (`Accounts.change`'s,
        with its lifecycle event), only over the status and credential `before` held, so that a reconnect made
        meanwhile is never overwritten; the backoff; and the claim let go. `needs_claim`: only while the claim is
        still this caller's. Returns the account's new version, or `None` when nothing was written."""
        if account_id is None:
            assert claim is not None
            account_id = claim.account_id
        now = self.clock.now()

        def write(conn: sa.Connection) -> int | None:
            if claim is not None:
                kept = conn.execute(_RELEASE, {"b_id": account_id, "b_owner": claim.owner}).rowcount == 1
                if needs_claim and not kept:
                    return None
            row = conn.execute(_AS_READ, {"id": account_id}).first()
            if row is None or row.status != before.status.value or row.credential != before.sealed:
                return None
            apply_change(
                conn,
                account_id,
                before.status,
                event,
                now=now,
                reason=reason,
                credential=credential,
                expires_at=expires_at,
                was=before.sealed,
            )
            conn.execute(_SET_BACKOFF, {"b_id": account_id, "b_failures": failures, "b_retry_at": retry_at})
            return int(conn.execute(_VERSION, {"id": account_id}).scalar_one())

        try:
            version = await self.accounts.database.transaction(
                write, doing=f"record the {event.value} of account {account_id!r}", immediate=True
            )
        except AccountStateError:
            return None  # changed between the check and the write (PostgreSQL, where the claim was lost)
        finally:
            self.forget(account_id)
        if claim is not None:
            claim.released = True
        return version
