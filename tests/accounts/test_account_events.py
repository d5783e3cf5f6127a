"""Account lifecycle events in a real database (SQLite and PostgreSQL): every change in the status table is the
catalogue's event or none, written with the change in the shared event log, read by cursor and filtered by a
subscription; never with a credential."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import anyio
import pytest
import sqlalchemy as sa

from askback.accounts.connections import Connections
from askback.accounts.events import AccountEvent, AccountEvents, event_type
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.repository import Accounts
from askback.accounts.setup import AccountsSetup
from askback.accounts.status import TRANSITIONS, Event, Status
from askback.accounts.vault import Vault, new_key
from askback.db.migrate import all_components
from askback.errors import ConfigurationError
from askback.store import Store, append_event

pytestmark = pytest.mark.anyio

NOW = 1_000_000.0
P, A, E, R, X = Status.PENDING, Status.ACTIVE, Status.EXPIRED, Status.REVOKED, Status.ERROR

# Every change of the status table, and the event it is.
CATALOGUE: dict[tuple[Status | None, Event], str | None] = {
    (None, Event.START): None,
    (P, Event.CONNECTED): "account.connected",
    (P, Event.FAILED): "account.error",
    (P, Event.REVOKED): "account.revoked",
    (A, Event.CONNECTED): "account.refreshed",
    (A, Event.REFRESHED): "account.refreshed",
    (A, Event.REJECTED): "account.expired",
    (A, Event.UNREACHABLE): "account.error",
    (A, Event.REVOKED): "account.revoked",
    (E, Event.CONNECTED): "account.recovered",
    (E, Event.REVOKED): "account.revoked",
    (R, Event.CONNECTED): "account.connected",
    (X, Event.CONNECTED): "account.recovered",
    (X, Event.REFRESHED): "account.recovered",
    (X, Event.REJECTED): "account.expired",
    (X, Event.UNREACHABLE): "account.error",
    (X, Event.REVOKED): "account.revoked",
}


@pytest.fixture
async def store(any_database: str) -> AsyncIterator[Store]:
    opened = await Store.open(any_database, migrate=True, components=all_components())
    opened.events.poll_interval = 0.02
    try:
        yield opened
    finally:
        await opened.close()


async def connected(accounts: Accounts, principal: str, connection: str, *, at: float = NOW) -> str:
    account_id, _ = await accounts.begin_connect(principal, connection, flow_id="f1", now=at, ttl=600)
    await accounts.change(account_id, Event.CONNECTED, now=at + 1, reason="granted", credential="ciphertext")
    return account_id


async def take(events: AsyncIterator[AccountEvent], count: int) -> list[AccountEvent]:
    got: list[AccountEvent] = []
    with anyio.fail_after(10):
        async with aclosing(events):
            async for event in events:
                got.append(event)
                if len(got) == count:
                    break
    return got


# --- the catalogue -----------------------------------------------------------------------------------------------


def test_the_catalogue_names_every_change_of_the_status_table() -> None:
    assert set(CATALOGUE) == set(TRANSITIONS)


@pytest.mark.parametrize(("change", "expected"), CATALOGUE.items(), ids=lambda c: str(c))
def test_each_change_is_its_catalogue_event(change: tuple[Status | None, Event], expected: str | None) -> None:
    before, event = change
    assert event_type(event, before, TRANSITIONS[change]) == expected


# --- written with the change ---------------------------------------------------------------------------------------


async def test_a_change_writes_its_event_with_the_account_and_the_change_and_creation_writes_none(
    store: Store,
) -> None:
    accounts = Accounts(store.database)
    account_id, _ = await accounts.begin_connect("alice", "gmail", label="work", flow_id="f1", now=NOW, ttl=600)
    assert await store.events.events_after(0) == []
    await accounts.change(account_id, Event.CONNECTED, now=NOW + 1, reason="granted", credential="ciphertext")
    await accounts.change(account_id, Event.REJECTED, now=NOW + 2, reason="invalid_grant")
    await accounts.change(account_id, Event.CONNECTED, now=NOW + 3, reason="granted again", credential="c2")
    await accounts.change(account_id, Event.REVOKED, now=NOW + 4, reason="by the person")

    events = await take(AccountEvents(store.events).events(since=0), 4)
    assert [(e.type, e.old_status, e.new_status, e.reason, e.at) for e in events] == [
        ("account.connected", P, A, "granted", NOW + 1),
        ("account.expired", A, E, "invalid_grant", NOW + 2),
        ("account.recovered", E, A, "granted again", NOW + 3),
        ("account.revoked", A, R, "by the person", NOW + 4),
    ]
    assert {(e.account_id, e.principal, e.connection, e.label) for e in events} == {
        (account_id, "alice", "gmail", "work")
    }
    assert [e.id for e in events] == [f"evt_{e.cursor}" for e in events]
    assert [e.cursor for e in events] == sorted({e.cursor for e in events})


async def test_a_change_that_is_rolled_back_leaves_no_event(store: Store) -> None:
    accounts = Accounts(store.database)
    account_id = await connected(accounts, "alice", "gmail")
    before = await store.events.latest_event_id()

    def write_then_fail(conn: sa.Connection) -> None:
        append_event(conn, type="account.error", at=NOW, data={"account_id": account_id})
        raise LookupError("the rest of the change failed")

    with pytest.raises(LookupError):
        await store.database.transaction(write_then_fail, doing="change an account")
    assert await store.events.latest_event_id() == before


async def test_no_event_holds_the_credential_or_its_ciphertext(store: Store) -> None:
    canary = "canary-access-token-7f3a9c"
    vault = Vault(new_key())
    accounts = Accounts(store.database)
    account_id, _ = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    sealed = vault.seal(account_id, {"access_token": canary, "refresh_token": canary + "-refresh"})
    await accounts.change(account_id, Event.CONNECTED, now=NOW + 1, credential=sealed, expires_at=NOW + 3600)
    resealed = vault.seal(account_id, {"access_token": canary + "-2"})
    await accounts.change(account_id, Event.REFRESHED, now=NOW + 2, credential=resealed, expires_at=NOW + 7200)
    async with store.database.engine.connect() as conn:
        rows = (await conn.execute(sa.text("SELECT type, data FROM askback_events"))).all()
    assert [row.type for row in rows] == ["account.connected", "account.refreshed"]
    dumped = repr(rows)
    assert canary not in dumped and sealed not in dumped and resealed not in dumped


# --- the store's event log ----------------------------------------------------------------------------------------


async def test_the_log_reads_after_a_cursor_by_exact_name_or_family_up_to_a_limit(store: Store) -> None:
    assert await store.events.latest_event_id() == 0

    def write(conn: sa.Connection) -> None:
        for kind in ("account.connected", "audit.asked", "account.revoked", "accounting.x", "account.connected"):
            append_event(conn, type=kind, at=NOW, data={"kind": kind})

    await store.database.transaction(write, doing="write events")
    every = await store.events.events_after(0)
    assert [e.type for e in every] == [
        "account.connected",
        "audit.asked",
        "account.revoked",
        "accounting.x",
        "account.connected",
    ]
    assert [e.id for e in every] == sorted(e.id for e in every) and await store.events.latest_event_id() == every[-1].id
    assert every[0].data == {"kind": "account.connected"}
    family = await store.events.events_after(0, types=["account.*"])
    assert [e.type for e in family] == ["account.connected", "account.revoked", "account.connected"]
    exact = await store.events.events_after(every[0].id, types=["account.connected", "audit.*"])
    assert [e.id for e in exact] == [every[1].id, every[4].id]
    assert [e.id for e in await store.events.events_after(every[1].id, limit=2)] == [every[2].id, every[3].id]


async def test_a_wait_answers_at_once_when_an_event_is_there_and_false_at_its_timeout(store: Store) -> None:
    def write(conn: sa.Connection) -> None:
        append_event(conn, type="account.connected", at=NOW, data={})

    await store.database.transaction(write, doing="write an event")
    latest = await store.events.latest_event_id()
    with anyio.fail_after(5):
        assert await store.events.wait_for_events(latest - 1, timeout=30) is True
        started = anyio.current_time()
        assert await store.events.wait_for_events(latest, timeout=0.2) is False
    assert anyio.current_time() - started >= 0.2


async def test_a_waiter_wakes_when_another_store_commits_an_event(any_database: str, store: Store) -> None:
    latest = await store.events.latest_event_id()
    woke: list[bool] = []

    async def wait() -> None:
        woke.append(await store.events.wait_for_events(latest, timeout=30))

    other = await Store.open(any_database, components=all_components())
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                await Accounts(other.database).change(
                    await _pending(Accounts(other.database)), Event.CONNECTED, now=NOW, credential="ciphertext"
                )
    finally:
        await other.close()
    assert woke == [True]


# --- the subscription ------------------------------------------------------------------------------------------------


async def test_a_subscription_filters_by_type_principal_and_connection(store: Store) -> None:
    accounts = Accounts(store.database)
    subscription = AccountEvents(store.events)
    mine = subscription.events(types=["account.revoked"], principal="alice", connection="gmail", since=0)
    alices_gmail = await connected(accounts, "alice", "gmail")
    bobs_gmail = await connected(accounts, "bob", "gmail")
    alices_slack = await connected(accounts, "alice", "slack")
    for account_id in (bobs_gmail, alices_slack, alices_gmail):
        await accounts.change(account_id, Event.REVOKED, now=NOW + 5)
    [event] = await take(mine, 1)
    assert (event.type, event.account_id) == ("account.revoked", alices_gmail)
    connections = [e.connection for e in await take(subscription.events(principal="alice", since=0), 4)]
    assert connections == ["gmail", "slack", "slack", "gmail"]


async def test_a_subscription_from_now_on_skips_earlier_events_and_since_a_cursor_goes_on_after_it(
    store: Store,
) -> None:
    accounts = Accounts(store.database)
    subscription = AccountEvents(store.events)
    earlier = await connected(accounts, "alice", "gmail")
    [first] = await take(subscription.events(since=0), 1)
    assert first.account_id == earlier

    got: list[AccountEvent] = []
    received = anyio.Event()

    async def listen() -> None:
        got.extend(await take(subscription.events(), 1))
        received.set()

    later: list[str] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(listen)
            # Until the subscription, started meanwhile, sees one: it cannot be told from outside when it began.
            while not received.is_set():
                later.append(await connected(accounts, f"person{len(later)}", "gmail"))
                with anyio.move_on_after(1):
                    await received.wait()
    assert got[0].account_id in later
    # A cursor goes on right after itself, whenever the subscription starts.
    [after_first] = await take(subscription.events(since=first.cursor), 1)
    assert after_first.account_id == later[0]


async def test_a_subscription_to_an_unknown_type_is_refused(store: Store) -> None:
    with pytest.raises(ConfigurationError, match=r"account\.conected"):
        await anext(AccountEvents(store.events).events(types=["account.conected"]))


async def test_the_extension_refuses_a_subscription_before_its_app_started() -> None:
    setup = AccountsSetup(
        connections=Connections([]),
        vault=Vault(new_key()),
        verifier=DevelopmentSignIn("s" * 32),
        base_url="http://127.0.0.1:9",
    )
    with pytest.raises(ConfigurationError, match="before their app started"):
        setup.events()


async def _pending(accounts: Accounts) -> str:
    account_id, _ = await accounts.begin_connect("carol", "gmail", flow_id=None, now=NOW, ttl=600)
    return account_id


async def test_a_store_whose_listening_connection_was_cut_listens_again(fresh_pg_url: str) -> None:
    store = await Store.open(fresh_pg_url, migrate=True, components=all_components())
    other = await Store.open(fresh_pg_url, components=all_components())
    try:
        assert await store.events.wait_for_events(0, timeout=0.05) is False  # listening from now on
        async with other.database.engine.connect() as conn:
            cut = await conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE query LIKE 'LISTEN%' AND pid <> pg_backend_pid()"
                )
            )
            assert cut.scalars().all() == [True]
        woke: list[bool] = []

        async def wait() -> None:
            woke.append(await store.events.wait_for_events(0, timeout=30))

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.wait_all_tasks_blocked()
                await Accounts(other.database).change(
                    await _pending(Accounts(other.database)), Event.CONNECTED, now=NOW, credential="ciphertext"
                )
        assert woke == [True]
    finally:
        await other.close()
        await store.close()
