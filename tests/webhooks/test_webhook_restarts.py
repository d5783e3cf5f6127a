"""At least once across a crash: an instance killed (SIGKILL) with deliveries in flight, then another one started on
the same SQLite file, delivers every event; a repeat carries the same `webhook-id`."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from _hooks import Receiver, account_data, add_event, new_secret
from standardwebhooks.webhooks import Webhook

from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox
from infra import wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.http]

WORKER = Path(__file__).parent / "_worker.py"
EVENTS = 5


def start_worker(db_url: str, url: str, secret: str) -> subprocess.Popen[str]:
    paths = [str(WORKER.parent), str(WORKER.parents[1]), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    child = subprocess.Popen(
        [sys.executable, str(WORKER), db_url, url, secret], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    return child


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        if child.stdout is not None:
            child.stdout.close()


async def test_an_instance_killed_with_deliveries_in_flight_loses_none_once_another_starts(
    db_url: str, store: Store, receiver: Receiver, children: list[subprocess.Popen[str]]
) -> None:
    secret = new_secret()
    endpoint = Endpoint(url=receiver.url, events=["account.*"], secrets=[secret], allow_private=True)
    setup = Dispatcher(Outbox(store.database, store.events), [endpoint])
    await setup.prepare()
    await setup.aclose()
    receiver.gate = threading.Event()  # every request waits: the first instance dies mid-attempt
    for number in range(EVENTS):
        await add_event(store, "account.connected", 1_800_000_000.0 + number, **account_data(principal=f"p{number}"))

    first = start_worker(db_url, receiver.url, secret)
    children.append(first)
    await anyio.to_thread.run_sync(lambda: wait_until(receiver.arrived.is_set, timeout=20, what="a first attempt"))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    in_flight = set(receiver.ids())
    assert in_flight
    receiver.gate.set()

    children.append(start_worker(db_url, receiver.url, secret))
    outbox = Outbox(store.database, store.events)

    def delivered() -> bool:
        with contextlib.closing(sqlite3.connect(db_url.removeprefix("sqlite:///"))) as db:
            query = "SELECT count(*) FROM askback_webhook_deliveries WHERE status = 'delivered'"
            return bool(db.execute(query).fetchone()[0] == EVENTS)

    await anyio.to_thread.run_sync(lambda: wait_until(delivered, timeout=30, what="every delivery delivered"))
    ids = receiver.ids()
    expected = {d.webhook_id for d in await outbox.deliveries()}
    assert set(ids) == expected and len(expected) == EVENTS
    # Only what was in flight when the instance died came twice, with its own id.
    assert {i for i in ids if ids.count(i) > 1} <= in_flight
    for got in receiver.received:
        assert Webhook(secret).verify(got.body, got.headers)["type"] == "account.connected"
