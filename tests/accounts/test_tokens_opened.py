"""The keeper opens an account's sealed credential once per row it reads: the same row read again (the same sealed
bytes, status, version, backoff and claim) is not opened again; any change is opened afresh and authenticated; what
it keeps is bounded and dropped when this keeper changes the account. On PostgreSQL a batch of accounts is read with
one statement whatever its size."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import sqlalchemy as sa
from sqlalchemy import event

from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event
from askback.accounts.tokens import TokenKeeper, _rows
from askback.accounts.vault import CredentialUnreadable, Vault, new_key
from askback.clock import SystemClock
from askback.db.migrate import all_components
from askback.errors import AccountStateError
from askback.store import Store

pytestmark = pytest.mark.anyio

_COPY = (
    sa.update(_rows._ACCOUNTS)
    .where(_rows._ACCOUNTS.c.id == sa.bindparam("b_id"))
    .values(credential=sa.bindparam("b_credential"))
)


class CountingVault(Vault):
    """The real vault, counting how many sealed values it opened."""

    opened = 0

    def open(self, account_id: str, sealed: str) -> dict[str, Any]:
        self.opened += 1
        return super().open(account_id, sealed)


@dataclass
class Bench:
    store: Store
    accounts: Accounts
    vault: CountingVault
    keeper: TokenKeeper

    async def connect(self, principal: str, key: str) -> Account:
        now = time.time()
        account_id, _ = await self.accounts.begin_connect(principal, "notes", flow_id=None, now=now, ttl=60)
        await self.accounts.change(
            account_id, Event.CONNECTED, now=now, credential=self.vault.seal(account_id, {"api_key": key})
        )
        account = await self.accounts.get(account_id)
        assert account is not None
        return account


@contextlib.asynccontextmanager
async def _bench(url: str) -> AsyncIterator[Bench]:
    store = await Store.open(url, migrate=True, components=all_components())
    vault = CountingVault(new_key())
    accounts = Accounts(store.database)
    keeper = TokenKeeper(accounts, vault, Connections([ApiKeyConnection(name="notes")]), clock=SystemClock())
    try:
        yield Bench(store, accounts, vault, keeper)
    finally:
        await keeper.aclose()
        await store.close()


@pytest.fixture
async def bench(any_database: str) -> AsyncIterator[Bench]:
    async with _bench(any_database) as made:
        yield made


@pytest.fixture
async def pg_bench(fresh_pg_url: str) -> AsyncIterator[Bench]:
    """On PostgreSQL only: where callers of one moment are read in one batch."""
    async with _bench(fresh_pg_url) as made:
        yield made


async def test_the_same_row_read_again_is_not_opened_again(bench: Bench) -> None:
    account = await bench.connect("ada", "key-1")
    for _ in range(5):
        assert (await bench.keeper.token(account)).access_token == "key-1"
    assert bench.vault.opened == 1


async def test_a_credential_changed_by_anyone_is_read_and_opened_at_once(bench: Bench) -> None:
    account = await bench.connect("ada", "key-1")
    assert (await bench.keeper.token(account)).access_token == "key-1"
    # Another instance (through the accounts table, not this keeper) stores a new credential.
    await bench.accounts.change(
        account.id,
        Event.REFRESHED,
        now=time.time(),
        credential=bench.vault.seal(account.id, {"api_key": "key-2"}),
    )
    assert (await bench.keeper.token(account)).access_token == "key-2"
    assert bench.vault.opened == 2


async def test_another_accounts_sealed_value_copied_into_a_kept_row_fails_to_open(bench: Bench) -> None:
    ada = await bench.connect("ada", "key-ada")
    eve = await bench.connect("eve", "key-eve")
    assert (await bench.keeper.token(ada)).access_token == "key-ada"
    assert (await bench.keeper.token(eve)).access_token == "key-eve"
    eves = await bench.store.database.read(
        lambda conn: conn.execute(_rows._AS_READ, {"id": eve.id}).first(), doing="read"
    )
    await bench.store.database.transaction(
        lambda conn: conn.execute(_COPY, {"b_id": ada.id, "b_credential": eves.credential}),
        doing="copy eve's credential into ada's row",
    )
    with pytest.raises(CredentialUnreadable):
        await bench.keeper.token(ada)


async def test_what_is_kept_is_bounded_and_dropped_when_the_keeper_changes_the_account(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_rows, "OPENED_CACHE_SIZE", 3)
    made = [await bench.connect(f"user{n}", f"key-{n}") for n in range(5)]
    for account in made:
        await bench.keeper.token(account)
    kept = bench.keeper._rows._opened
    assert list(kept) == [a.id for a in made[2:]]  # the oldest went first
    await bench.keeper.revoke(made[4])
    assert made[4].id not in kept  # no plaintext of a revoked credential is held on to
    with pytest.raises(AccountStateError):
        await bench.keeper.token(made[4])
    held = bench.keeper._rows._opened[made[4].id][2]
    assert held is not None and held.tokens is None


async def test_a_batch_is_one_statement_of_one_text_whatever_its_size(pg_bench: Bench) -> None:
    bench, store, keeper = pg_bench, pg_bench.store, pg_bench.keeper
    statements: list[str] = []

    def seen(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if "askback_account_events" in statement and statement.lstrip().upper().startswith("SELECT"):
            statements.append(statement)

    try:
        made = [await bench.connect(f"user{n}", f"key-{n}") for n in range(12)]
        event.listen(store.database.engine.sync_engine, "before_cursor_execute", seen)
        for group in (made[:2], made[2:12]):
            async with anyio.create_task_group() as tg:
                for account in group:
                    tg.start_soon(keeper.token, account)
        assert len(statements) == 2, statements
        assert statements[0] == statements[1]  # the ids travel as one array, not one placeholder each
    finally:
        event.remove(store.database.engine.sync_engine, "before_cursor_execute", seen)


async def test_the_least_recently_used_account_goes_first(bench: Bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rows, "OPENED_CACHE_SIZE", 3)
    a, b, c, d = [await bench.connect(f"user{n}", f"key-{n}") for n in range(4)]
    for account in (a, b, c, a, d, a):
        await bench.keeper.token(account)
    assert bench.vault.opened == 4  # a, b, c, d: a stayed because it was used after b and c


async def test_a_row_kept_from_one_read_is_not_opened_again_by_the_other(bench: Bench) -> None:
    account = await bench.connect("ada", "key-1")
    connection = bench.keeper.connections["notes"]
    for _ in range(3):
        await bench.keeper.token(account)  # on PostgreSQL: the batched read
        await bench.keeper._rows.read(account.id, connection, join=False)  # the plain read (refresh, revoke)
    assert bench.vault.opened == 1


async def test_a_batch_leader_cancelled_at_once_leaves_nobody_waiting(pg_bench: Bench) -> None:
    bench, keeper = pg_bench, pg_bench.keeper
    ada, bob = await bench.connect("ada", "key-ada"), await bench.connect("bob", "key-bob")
    got: dict[str, str] = {}

    async def cancelled_leader() -> None:
        with anyio.move_on_after(-1):  # a caller whose deadline has already passed
            await keeper.token(ada)

    async def other() -> None:
        got["bob"] = (await keeper.token(bob)).access_token

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(cancelled_leader)
            tg.start_soon(other)
        got["ada"] = (await keeper.token(ada)).access_token
    assert got == {"bob": "key-bob", "ada": "key-ada"}
    assert not keeper._rows._reading and not keeper._rows._batch


async def test_an_id_the_database_refuses_fails_only_its_own_caller_and_shows_nobody_elses(pg_bench: Bench) -> None:
    bench, keeper = pg_bench, pg_bench.keeper
    ada, bob = await bench.connect("ada", "key-ada"), await bench.connect("bob", "key-bob")
    odd = dataclasses.replace(bob, id="acc\ud800x")  # a lone surrogate: the driver cannot send it
    out: dict[str, str] = {}

    async def call(tag: str, account: Account) -> None:
        try:
            out[tag] = (await keeper.token(account)).access_token
        except Exception as exc:  # the odd caller's own failure, whatever the driver makes of it
            out[tag] = f"error: {exc}"

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(call, "ada", ada)  # the batch's first caller
            tg.start_soon(call, "bob", bob)
            tg.start_soon(call, "odd", odd)
    assert out["ada"] == "key-ada" and out["bob"] == "key-bob"
    assert out["odd"].startswith("error") and ada.id not in out["odd"] and bob.id not in out["odd"]


async def test_a_read_under_way_when_the_keeper_revokes_keeps_no_plaintext(pg_bench: Bench) -> None:
    bench, store, keeper = pg_bench, pg_bench.store, pg_bench.keeper
    real_read = store.database.read
    queried, gate = anyio.Event(), anyio.Event()

    async def held_back(fn: Any, *, doing: str) -> Any:
        # The real query, then a pause before its rows reach the keeper (a slow network does the same).
        rows = await real_read(fn, doing=doing)
        queried.set()
        await gate.wait()
        return rows

    try:
        ada = await bench.connect("ada", "PLAINTEXT-KEY")
        store.database.read = held_back  # type: ignore[method-assign]
        got: dict[str, str] = {}

        async def user() -> None:
            got["token"] = (await keeper.token(ada)).access_token

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(user)
                await queried.wait()  # the batch read the ACTIVE row
                await keeper.revoke(ada)
                gate.set()
        assert got["token"] == "PLAINTEXT-KEY"  # read before the revocation: that call had it
        assert ada.id not in keeper._rows._opened
    finally:
        store.database.read = real_read  # type: ignore[method-assign]
