"""Account events across instances on PostgreSQL: two `askback serve` instances of the demo server behind nginx, a
person connecting their Demo Mail account through them (the link, both sign-ins, the consent page and the
callback, over plain HTTP, each request landing on whichever instance nginx picks), and a subscriber on a store of
its own in this process that sees `account.connected` within 2 s of the callback's answer."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from mcp_types import InputRequiredResult

from askback.accounts.events import AccountEvent, AccountEvents
from askback.accounts.vault import new_key
from askback.db.migrate import all_components
from askback.demo.mail import CLIENT_SECRET_ENV, ISSUER_ENV, PUBLIC_URL_ENV, SIGN_IN_SECRET_ENV, callback_url
from askback.demo.person import connect_account
from askback.demo.provider import serving_provider
from askback.store import Store
from askback.testing import call_round, free_port
from infra import Instance, Postgres, behind_nginx

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@dataclass
class Cluster:
    database: str
    mcp: str  # nginx's /mcp
    instances: list[Instance]


@pytest.fixture
def cluster(pg: Postgres, tmp_path: Path) -> Iterator[Cluster]:
    name = f"t{secrets.token_hex(6)}"
    pg.create_database(name)
    database = pg.url(name)

    async def upgrade() -> None:
        await (await Store.open(database, migrate=True, components=all_components())).close()

    anyio.run(upgrade)
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    client_secret = secrets.token_urlsafe(32)
    with serving_provider(client_secret=client_secret, redirect_uris=[callback_url(public)]) as mail:
        env = {
            "ASKBACK_DATABASE_URL": database,
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_VAULT_KEYS": new_key(),
            ISSUER_ENV: mail.issuer,
            CLIENT_SECRET_ENV: client_secret,
            PUBLIC_URL_ENV: public,
            SIGN_IN_SECRET_ENV: secrets.token_urlsafe(32),
        }
        with behind_nginx("askback.demo:server", env, tmp_path / "nginx", count=2, port=port) as (instances, nginx):
            yield Cluster(database, nginx.url, instances)


async def test_a_subscriber_sees_a_grant_completed_through_instances_behind_nginx_within_two_seconds(
    cluster: Cluster,
) -> None:
    first = await call_round(cluster.mcp, "summarize_inbox", {}, token="demo-dana")
    assert isinstance(first.result, InputRequiredResult), first
    [asked] = (first.result.input_requests or {}).values()
    link = asked.params.model_dump()["url"]

    store = await Store.open(cluster.database, components=all_components())
    got: list[tuple[AccountEvent, float]] = []
    steps: list[str] = []
    try:
        since = await store.events.latest_event_id()

        async def subscribe() -> None:
            events = AccountEvents(store.events, wait=60).events(types=["account.connected"], since=since)
            async with aclosing(events):
                async for event in events:
                    got.append((event, time.monotonic()))
                    return

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(subscribe)
                connected = await anyio.to_thread.run_sync(lambda: connect_account(link, user="dana", say=steps.append))
                answered = time.monotonic()
                assert connected, steps
    finally:
        await store.close()
    [(event, seen)] = got
    assert (event.connection, event.old_status, event.new_status) == ("demo-mail", "PENDING", "ACTIVE")
    assert "dana" in event.principal
    assert seen - answered < 2.0
