"""Connected accounts in a real database: links used once by the right person, statuses changed only by the table."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
import sqlalchemy as sa

from askback.accounts.links import Admitted, Refused
from askback.accounts.repository import LIVE_LINKS_PER_ACCOUNT, Accounts
from askback.accounts.status import Event, Status
from askback.db.migrate import all_components
from askback.errors import AccountStateError, LimitReachedError
from askback.store import Store

pytestmark = pytest.mark.anyio

NOW = 1_000_000.0


@pytest.fixture
async def accounts(any_database: str) -> AsyncIterator[Accounts]:
    store = await Store.open(any_database, migrate=True, components=all_components())
    try:
        yield Accounts(store.database)
    finally:
        await store.close()


async def events(accounts: Accounts, account_id: str) -> list[tuple[str, str | None, str]]:
    async with accounts.database.engine.connect() as conn:
        rows = await conn.execute(
            sa.text("SELECT event, before, after FROM askback_account_events WHERE account_id = :a ORDER BY id"),
            {"a": account_id},
        )
        return [tuple(r) for r in rows]  # type: ignore[misc]


async def test_a_new_account_starts_pending_with_a_link_whose_token_is_not_stored(accounts: Accounts) -> None:
    account_id, token = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    account = await accounts.get(account_id)
    assert account is not None and (account.status, account.principal, account.connection) == (
        Status.PENDING,
        "alice",
        "gmail",
    )
    assert await events(accounts, account_id) == [("start", None, "PENDING")]
    async with accounts.database.engine.connect() as conn:
        stored = (await conn.execute(sa.text("SELECT token_digest FROM askback_account_links"))).scalars().all()
    assert token not in stored and len(stored) == 1


async def test_asking_again_reuses_the_account_and_issues_another_link(accounts: Accounts) -> None:
    first, token1 = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    second, token2 = await accounts.begin_connect("alice", "gmail", flow_id="f2", now=NOW + 1, ttl=600)
    other, _ = await accounts.begin_connect("alice", "gmail", label="work", flow_id="f3", now=NOW, ttl=600)
    assert first == second != other and token1 != token2


async def test_past_the_pending_cap_a_new_account_is_refused_but_links_to_existing_ones_and_other_people_go_on(
    accounts: Accounts,
) -> None:
    ids = [
        (await accounts.begin_connect("ann", "gmail", label=f"l{n}", flow_id="f", now=NOW, ttl=600, most_pending=3))[0]
        for n in range(3)
    ]
    with pytest.raises(LimitReachedError) as refused:
        await accounts.begin_connect("ann", "gmail", label="l3", flow_id="f", now=NOW, ttl=600, most_pending=3)
    assert refused.value.limit == 3 and refused.value.tool_error
    assert "you already hold 3" in str(refused.value) and "askback accounts revoke" in str(refused.value)
    assert [a.label for a in await accounts.of("ann", "gmail")] == ["l0", "l1", "l2"]  # nothing was written
    # A link to an account she already has is still given; another person is not affected.
    again, _ = await accounts.begin_connect("ann", "gmail", label="l1", flow_id="f", now=NOW, ttl=600, most_pending=3)
    assert again == ids[1]
    await accounts.begin_connect("bea", "gmail", label="l0", flow_id="f", now=NOW, ttl=600, most_pending=3)
    # Connected and revoked accounts do not count: only the ones waiting for their link.
    await accounts.change(ids[0], Event.CONNECTED, now=NOW + 1, credential="sealed")
    await accounts.change(ids[1], Event.REVOKED, now=NOW + 1)
    for label in ("l3", "l4"):
        await accounts.begin_connect("ann", "gmail", label=label, flow_id="f", now=NOW, ttl=600, most_pending=3)
    with pytest.raises(LimitReachedError):
        await accounts.begin_connect("ann", "other", flow_id="f", now=NOW, ttl=600, most_pending=3)


async def test_two_instances_issuing_links_for_new_accounts_at_once_never_pass_the_pending_cap(
    accounts: Accounts, any_database: str
) -> None:
    second = await Store.open(any_database, components=all_components())
    outcomes: list[str] = []

    async def issue(on: Accounts, n: int) -> None:
        try:
            await on.begin_connect("cy", "gmail", label=f"l{n}", flow_id="f", now=NOW, ttl=600, most_pending=3)
            outcomes.append("made")
        except LimitReachedError:
            outcomes.append("refused")

    try:
        async with anyio.create_task_group() as group:
            for n in range(12):
                group.start_soon(issue, (accounts, Accounts(second.database))[n % 2], n)
    finally:
        await second.close()
    assert sorted(outcomes) == ["made"] * 3 + ["refused"] * 9
    assert len(await accounts.of("cy", "gmail")) == 3


async def test_a_link_opened_by_another_user_is_refused_and_stays_usable_by_its_owner(accounts: Accounts) -> None:
    _, token = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    mallory = await accounts.use_link(token, opener="mallory", now=NOW + 5)
    assert isinstance(mallory, Refused) and mallory.reason == "other_user"
    alice = await accounts.use_link(token, opener="alice", now=NOW + 6)
    assert isinstance(alice, Admitted) and alice.link.principal == "alice" and alice.link.flow_id == "f1"
    again = await accounts.use_link(token, opener="alice", now=NOW + 7)
    assert isinstance(again, Refused) and again.reason == "used"


async def test_an_expired_or_forged_link_is_refused(accounts: Accounts) -> None:
    _, token = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    late = await accounts.use_link(token, opener="alice", now=NOW + 600)
    forged = await accounts.use_link(token[:-2] + "xx", opener="alice", now=NOW + 1)
    assert (late, forged) == (Refused("expired"), Refused("unknown"))


async def test_a_link_used_twenty_times_at_once_admits_exactly_one(accounts: Accounts) -> None:
    _, token = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    outcomes: list[Admitted | Refused] = []

    async def use() -> None:
        outcomes.append(await accounts.use_link(token, opener="alice", now=NOW + 1))

    async with anyio.create_task_group() as tg:
        for _ in range(20):
            tg.start_soon(use)
    assert sum(isinstance(o, Admitted) for o in outcomes) == 1
    assert sorted(o.reason for o in outcomes if isinstance(o, Refused)) == ["used"] * 19


async def test_statuses_change_only_through_the_table_and_every_change_is_an_event(accounts: Accounts) -> None:
    account_id, _ = await accounts.begin_connect("alice", "gmail", flow_id="f1", now=NOW, ttl=600)
    assert await accounts.change(account_id, Event.CONNECTED, now=NOW + 1, credential="v1.k.sealed") == Status.ACTIVE
    assert await accounts.sealed_credential(account_id) == "v1.k.sealed"
    assert await accounts.change(account_id, Event.REJECTED, now=NOW + 2, reason="invalid_grant") == Status.EXPIRED
    with pytest.raises(AccountStateError, match="in EXPIRED cannot take the event 'refreshed'"):
        await accounts.change(account_id, Event.REFRESHED, now=NOW + 3, credential="v1.k.other")
    assert await accounts.sealed_credential(account_id) == "v1.k.sealed"  # the refused change wrote nothing
    assert await accounts.change(account_id, Event.REVOKED, now=NOW + 4) == Status.REVOKED
    assert await accounts.sealed_credential(account_id) is None  # revocation deletes the credential
    account = await accounts.get(account_id)
    assert account is not None and account.status is Status.REVOKED
    assert await events(accounts, account_id) == [
        ("start", None, "PENDING"),
        ("connected", "PENDING", "ACTIVE"),
        ("rejected", "ACTIVE", "EXPIRED"),
        ("revoked", "EXPIRED", "REVOKED"),
    ]


async def test_an_unknown_account_cannot_change(accounts: Accounts) -> None:
    with pytest.raises(AccountStateError, match="no connected account"):
        await accounts.change("acc_missing", Event.CONNECTED, now=NOW)


async def link_rows(accounts: Accounts, account_id: str) -> int:
    async with accounts.database.engine.connect() as conn:
        query = sa.text("SELECT count(*) FROM askback_account_links WHERE account_id = :a")
        return int((await conn.execute(query, {"a": account_id})).scalar_one())


async def test_asking_again_and_again_keeps_a_few_live_links_and_deletes_the_ones_that_can_never_be_used(
    accounts: Accounts,
) -> None:
    account_id, visiting = await accounts.begin_connect("dee", "gmail", flow_id="f", now=NOW - 2, ttl=600)
    assert isinstance(await accounts.use_link(visiting, opener="dee", now=NOW - 1), Admitted)
    await accounts.remember_state(visiting, state="s0", sealed_verifier="v0", until=NOW + 1800)
    tokens = [(await accounts.begin_connect("dee", "gmail", flow_id="f", now=NOW + n, ttl=600))[1] for n in range(60)]
    # The live links, and the one whose person is at the provider right now (its callback still works).
    assert await link_rows(accounts, account_id) == LIVE_LINKS_PER_ACCOUNT + 1
    taken = await accounts.take_state("s0", opener="dee", now=NOW + 60)
    assert taken is not None and not isinstance(taken, Refused) and taken[1] == "v0"
    # The newest links still work; an older one was retired when a newer one was made.
    assert await accounts.use_link(tokens[0], opener="dee", now=NOW + 61) == Refused("unknown")
    opened = await accounts.use_link(tokens[-1], opener="dee", now=NOW + 61)
    assert isinstance(opened, Admitted)
    # A link whose sign-in is finished, and every expired link, are deleted when the next one is made.
    await accounts.remember_state(tokens[-1], state="s1", sealed_verifier="v", until=NOW + 1000)
    assert await accounts.take_state("s1", opener="dee", now=NOW + 62) is not None
    await accounts.begin_connect("dee", "gmail", flow_id="f", now=NOW + 63, ttl=600)
    assert await link_rows(accounts, account_id) == LIVE_LINKS_PER_ACCOUNT  # both finished sign-ins are gone
    _, last = await accounts.begin_connect("dee", "gmail", flow_id="f", now=NOW + 5000, ttl=600)
    assert await link_rows(accounts, account_id) == 1
    assert isinstance(await accounts.use_link(last, opener="dee", now=NOW + 5001), Admitted)


async def test_two_instances_asking_for_the_same_new_account_at_once_all_get_a_link_to_that_one_account(
    accounts: Accounts, any_database: str
) -> None:
    second = await Store.open(any_database, components=all_components())
    made: list[str] = []

    async def issue(on: Accounts, n: int) -> None:
        cap = None if n % 4 < 2 else 10
        made.append(
            (await on.begin_connect("fay", "gmail", label="new", flow_id="f", now=NOW, ttl=600, most_pending=cap))[0]
        )

    try:
        async with anyio.create_task_group() as group:
            for n in range(10):
                group.start_soon(issue, (accounts, Accounts(second.database))[n % 2], n)
    finally:
        await second.close()
    assert len(made) == 10 and len(set(made)) == 1
    assert [a.id for a in await accounts.of("fay", "gmail")] == made[:1]
