"""On PostgreSQL, two instances' dispatchers on one database queue each event once and send each delivery once."""

from __future__ import annotations

import random
import time

import anyio
import pytest
from _hooks import Receiver, account_data, add_event, components, new_secret
from standardwebhooks.webhooks import Webhook

from askback.clock import FrozenClock
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox

pytestmark = [pytest.mark.anyio, pytest.mark.http]


async def test_two_instances_on_postgresql_send_each_event_once(fresh_pg_url: str, receiver: Receiver) -> None:
    secret = new_secret()
    endpoint = Endpoint(url=receiver.url, events=["account.*"], secrets=[secret], allow_private=True)
    clock = FrozenClock(at=time.time())
    stores = [await Store.open(fresh_pg_url, migrate=True, components=components()) for _ in range(2)]
    hooks = [
        Dispatcher(Outbox(s.database, s.events), [endpoint], clock=clock, rng=random.Random(n))
        for n, s in enumerate(stores)
    ]
    try:
        for dispatcher in hooks:
            await dispatcher.prepare()
        for number in range(10):
            await add_event(stores[0], "account.connected", clock.now(), **account_data(principal=f"p{number}"))
        assert await stores[1].events.wait_for_events(0, timeout=2)
        async with anyio.create_task_group() as tasks:
            for dispatcher in hooks:
                tasks.start_soon(dispatcher.run_once)
        deliveries = await Outbox(stores[1].database, stores[1].events).deliveries()
        assert len(deliveries) == 10 and {d.status for d in deliveries} == {"delivered"}
        assert sorted(receiver.ids()) == sorted(d.webhook_id for d in deliveries)
        for got in receiver.received:
            assert Webhook(secret).verify(got.body, got.headers)["type"] == "account.connected"
    finally:
        for dispatcher in hooks:
            await dispatcher.aclose()
        for store in stores:
            await store.close()
