"""What the webhooks' tests share: a real receiver on loopback that records what it is sent, a store on a real SQLite file with the
webhooks' tables, and events appended to the shared event log as a product appends them."""

from __future__ import annotations

import base64
import contextlib
import secrets
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import ThreadingHTTPServer
from typing import Any

from askback.db.migrate import all_components
from askback.store import Store, append_event
from askback.webhooks.schema import MIGRATIONS
from infra import QuietHandler, serving_http


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """What the receiver was sent, and what it answers: the statuses in `answers` in turn, then 200. While `gate` is
    set to a cleared event, a request waits for it before answering."""

    url: str = ""
    received: list[Received] = field(default_factory=list)
    answers: list[int] = field(default_factory=list)
    gate: threading.Event | None = None
    arrived: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ids(self) -> list[str]:
        with self.lock:
            return [r.headers["webhook-id"] for r in self.received]


@contextlib.contextmanager
def receiving() -> Iterator[Receiver]:
    state = Receiver()

    class Handler(QuietHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            with state.lock:
                state.received.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                status = state.answers.pop(0) if state.answers else 200
                gate = state.gate
            state.arrived.set()
            if gate is not None:
                gate.wait(30)
            self.answer(status, b"{}")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with serving_http(server) as url:
        state.url = url + "/hooks"
        try:
            yield state
        finally:
            if state.gate is not None:
                state.gate.set()


def components() -> tuple[Any, ...]:
    return (*all_components(), MIGRATIONS)


async def add_event(store: Store, type: str, at: float, **data: Any) -> None:
    def write(conn: Any) -> None:
        append_event(conn, type=type, at=at, data=data)

    await store.database.transaction(write, doing="append a test event")


def account_data(principal: str = "alice", connection: str = "gmail", new_status: str = "active") -> dict[str, Any]:
    return {
        "account_id": "acc_1",
        "principal": principal,
        "connection": connection,
        "label": "",
        "old_status": "pending",
        "new_status": new_status,
        "reason": None,
    }
