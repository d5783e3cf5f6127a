"""The demo's agent runtime, resumed by the demo server's own webhook: the runtime's receiver served in a thread of
this process (`serving_receiver`), the demo server's webhooks file that points at it (`webhooks_file`), and each
webhook that resumed calls told to the demo's steps (`Landed`, waited for with `landing`)."""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from askback.demo.ports import loopback_socket
from askback.errors import AskbackError, ConfigurationError
from askback.runtime import Runtime, WebInbox
from askback.runtime.webhooks import RECEIVER_PATH, RESUMING_EVENTS, webhook_receiver
from askback.settings import load_settings

__all__ = [
    "LANDING_TIMEOUT",
    "WEBHOOK_SECRET_ENV",
    "Landed",
    "landing",
    "runtime_options",
    "serving_receiver",
    "webhooks_file",
]

WEBHOOK_SECRET_ENV = "ASKBACK_DEMO_WEBHOOK_SECRET"
"""The variable the demo's webhooks file names for the endpoint's secret (set in the demo server's environment)."""

LANDING_TIMEOUT = 60.0  # seconds to wait for the grant's webhook once the person is done


@dataclass(frozen=True)
class Landed:
    """A webhook the demo's receiver acted on: its event type, and the status of each call it resumed."""

    type: str
    calls: tuple[tuple[str, str], ...]


class WatchedReceiver:
    """The runtime's webhook receiver (`app`, set once its runtime is open), telling `landed` about each webhook
    that resumed calls: a 200 that is not a duplicate, whose answer lists them."""

    def __init__(self, landed: queue.Queue[Landed]) -> None:
        self.landed = landed
        self.app: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.app is None:
            return  # not reached: the server starts once the runtime is open
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        asked, said, status = bytearray(), bytearray(), [0]

        async def receiving() -> Message:
            message = await receive()
            asked.extend(message.get("body", b"") if message["type"] == "http.request" else b"")
            return message

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            elif message["type"] == "http.response.body":
                said.extend(message.get("body", b""))
            await send(message)

        await self.app(scope, receiving, sending)
        if status[0] != 200:
            return
        answer, event = json.loads(said), json.loads(asked)  # the receiver believed and answered both as JSON
        if not answer.get("duplicate") and answer.get("calls"):
            calls = tuple((str(c["call_id"]), str(c["status"])) for c in answer["calls"])
            self.landed.put(Landed(str(event["type"]), calls))


def runtime_options(user: str) -> dict[str, Any]:
    # The demo's runtime acts for `user` alone: its rounds carry their demo token, so the server's principal for the
    # account (the one its events name) is the runtime call's principal. Its questions park, shown in a web inbox
    # (none is served: the demo answers them); loopback links are shown (development).
    token = {"Authorization": f"Bearer demo-{user}"}
    return {
        "migrate": True,
        "headers": lambda _server: token,
        "renderers": [WebInbox()],
        "settings": load_settings(development=True),
    }


@contextlib.contextmanager
def serving_receiver(
    database: str, *, user: str, port: int, secret: str, listen_port: int = 0
) -> Iterator[tuple[str, queue.Queue[Landed]]]:
    """The demo's agent runtime on `database` (for `user`), in a thread, taking the signed webhooks of the demo server
    on `port` at `listen_port` (0: a free one) until the block ends: yields the receiver's URL and the queue each
    `Landed` webhook is put on."""
    sock = loopback_socket(listen_port, "the webhook receiver")
    landed: queue.Queue[Landed] = queue.Queue()
    watched = WatchedReceiver(landed)
    config = uvicorn.Config(watched, log_level="warning", log_config=None, access_log=False, lifespan="off")
    serving_it = uvicorn.Server(config)
    opened = threading.Event()
    failed: list[AskbackError] = []

    async def serve() -> None:
        try:
            async with await Runtime.open(database, **runtime_options(user)) as runtime:
                watched.app = webhook_receiver(runtime, servers={f"http://127.0.0.1:{port}/mcp": [secret]})
                opened.set()
                await serving_it.serve(sockets=[sock])
        except AskbackError as exc:
            failed.append(exc)
        finally:
            opened.set()

    thread = threading.Thread(target=lambda: anyio.run(serve), name="demo-runtime", daemon=True)
    thread.start()
    try:
        # Its store is migrated before the demo server starts migrating its own, on the same database.
        if not opened.wait(timeout=60):
            raise ConfigurationError(f"the demo's agent runtime did not open {database} within 60 seconds")
        if failed:
            raise failed[0]
        yield f"http://127.0.0.1:{sock.getsockname()[1]}{RECEIVER_PATH}", landed
    finally:
        serving_it.should_exit = True
        thread.join(timeout=15)
        sock.close()


def webhooks_file(folder: Path, receiver: str) -> Path:
    """The demo server's `ASKBACK_WEBHOOKS` file: one endpoint, the demo's receiver, sent the events on which a
    call waiting on an account resumes, signed with the secret in `WEBHOOK_SECRET_ENV`, and allowed on loopback."""
    path = folder / "webhooks.toml"
    events = ", ".join(f'"{e}"' for e in sorted(RESUMING_EVENTS))
    path.write_text(
        f'[[endpoint]]\nurl = "{receiver}"\nevents = [{events}]\nsecret_env = "{WEBHOOK_SECRET_ENV}"\n'
        "allow_private = true\n",  # the receiver is on this machine
        encoding="utf-8",
    )
    return path


def landing(landed: queue.Queue[Landed], call_id: str) -> Landed | None:
    """The webhook that resumed `call_id`, waited for in plain code (a Ctrl-C stops the wait at once)."""
    deadline = time.monotonic() + LANDING_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        try:
            got = landed.get(timeout=left)
        except queue.Empty:
            return None
        if any(call == call_id for call, _ in got.calls):
            return got
    return None
