"""One instance's dispatcher in a process of its own, until it is killed: `python _worker.py DB_URL URL SECRET`.
It prints `ready` once its store is open."""

from __future__ import annotations

import sys

import anyio
from _hooks import components

from askback.clock import SystemClock
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox


async def main(db_url: str, url: str, secret: str) -> None:
    store = await Store.open(db_url, components=components())
    store.events.poll_interval = 0.05
    endpoint = Endpoint(url=url, events=["account.*"], secrets=[secret], allow_private=True)
    dispatcher = Dispatcher(Outbox(store.database, store.events), [endpoint], clock=SystemClock(), lease=1.0, idle=0.1)
    print("ready", flush=True)
    await dispatcher.run()


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
