"""Account events across processes: a subscriber in this process sees `account.connected` for an account another
process connected on the same database within 2 s of that process's commit: on one SQLite file (polling) and on
PostgreSQL (LISTEN/NOTIFY, with no polling at all)."""

from __future__ import annotations

import sys
import time
from contextlib import aclosing

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from askback.accounts.events import AccountEvent, AccountEvents
from askback.db.migrate import all_components
from askback.store import Store
from infra import ROOT

pytestmark = [pytest.mark.http, pytest.mark.anyio]

# Another instance: it connects carol's mail account, then prints when its transaction had committed (the system's
# monotonic clock, the same in every process).
OTHER_INSTANCE = """
import sys, time
import anyio
from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.db.migrate import all_components
from askback.store import Store

async def main(url: str) -> None:
    store = await Store.open(url, migrate=False, components=all_components())
    try:
        accounts = Accounts(store.database)
        account_id, _ = await accounts.begin_connect("carol", "mail", flow_id=None, now=time.time(), ttl=600)
        print(account_id, flush=True)
        sys.stdin.readline()
        await accounts.change(account_id, Event.CONNECTED, now=time.time(), reason="granted", credential="sealed")
        print(time.monotonic(), flush=True)
    finally:
        await store.close()

anyio.run(main, sys.argv[1])
"""


async def test_a_subscriber_sees_a_grant_another_process_made_within_two_seconds(any_database: str) -> None:
    store = await Store.open(any_database, migrate=True, components=all_components())
    # On PostgreSQL only NOTIFY can wake the subscriber within 2 s: it waits up to a minute between reads.
    subscription = AccountEvents(store.events, wait=60)
    other = await anyio.open_process([sys.executable, "-c", OTHER_INSTANCE, any_database], cwd=ROOT)
    try:
        assert other.stdin is not None and other.stdout is not None
        lines = BufferedByteReceiveStream(other.stdout)

        async def line() -> str:
            return (await lines.receive_until(b"\n", 4096)).decode().strip()

        account_id = await line()
        got: list[tuple[AccountEvent, float]] = []
        since = await store.events.latest_event_id()

        async def subscribe() -> None:
            events = subscription.events(types=["account.connected"], principal="carol", since=since)
            async with aclosing(events):
                async for event in events:
                    got.append((event, time.monotonic()))
                    return

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscribe)
                await anyio.wait_all_tasks_blocked()
                await other.stdin.send(b"connect\n")
                committed = float(await line())
            assert await other.wait() == 0
    finally:
        if other.returncode is None:
            other.kill()
            await other.wait()
        await other.aclose()
        await store.close()
    [(event, seen)] = got
    assert (event.type, event.account_id, event.connection, event.new_status) == (
        "account.connected",
        account_id,
        "mail",
        "ACTIVE",
    )
    assert seen - committed < 2.0
