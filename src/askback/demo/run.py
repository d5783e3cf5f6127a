"""`askback demo`: start the demo server with several workers and walk through three flows, round by round.

Every round is a new connection, so the retry can land on another worker process; each round prints the
questions, the answers, and the worker that served it. `--interactive` asks the person at the terminal instead of
answering from the script.

The third flow, `summarize_inbox`, needs the caller's account at Demo Mail, a development OAuth provider the demo
runs on loopback in a thread of this process (`askback.demo.provider`). It is called through the demo's own agent
runtime (`askback.runtime`, on the demo's database), which parks it on its link; the scripted person follows the
link with plain HTTP (`askback.demo.person`): the demo server's development sign-in, the provider's sign-in and
consent page, the callback that stores the grant. Nobody answers the question: the demo server's one webhook
endpoint (`ASKBACK_WEBHOOKS`) is the runtime's receiver, served in another thread of this process
(`serving_receiver`), and the grant's `account.connected` resumes the call, which then reads the inbox. With
`--interactive`, the person opens the link in their own browser and presses Enter when it says Connected (or `n`
to decline).

Then erin, with no account yet, reaches the same tool through the META exposure (`askback.demo.meta_walk`; the demo
server serves both exposures) from a client that declares no elicitation: not_connected, her link, ready, the summary.

Each round runs in an event loop of its own and the questions are asked between rounds, in plain code: a prompt
inside a running event loop would not see Ctrl-C (asyncio turns the first SIGINT into a cancellation that a
blocked `input()` never notices). So one Ctrl-C raises `KeyboardInterrupt` wherever the demo is, and `serving`
stops the server's whole process group on the way out.

The demo's SQLite database is replaced on every run, so it carries a marker table (`askback_demo`) written when the
demo creates it; an existing file without it is refused rather than deleted.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import itertools
import json
import queue
import secrets
import socket
import sqlite3
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from mcp_types import CallToolResult, ElicitResult
from rich.console import Console
from rich.markup import escape
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from askback.accounts.vault import new_key
from askback.core.plan import Round, flow_plan
from askback.demo.mail import (
    CLIENT_SECRET_ENV,
    ISSUER_ENV,
    PUBLIC_URL_ENV,
    SIGN_IN_SECRET_ENV,
    callback_url,
)
from askback.demo.meta_walk import EXPOSE, walk_meta
from askback.demo.person import connect_account
from askback.demo.provider import NAME, DevProvider, serving_provider
from askback.errors import AskbackError, ConfigurationError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.runtime.calls import Outcome
from askback.runtime.webhooks import RECEIVER_PATH, RESUMING_EVENTS, webhook_receiver
from askback.settings import load_settings
from askback.testing import call_round, free_port, serving

# soft_wrap: a command line the demo prints must stay whole, to be copied.
console = Console(soft_wrap=True)

_SCRIPT: dict[str, dict[str, Any]] = {
    "confirm_project": {"project_name": "billing-legacy"},
    "pick_env": {"environment": "production"},
    "confirm_prod": {"confirm": True},
}
_MARKER = "askback_demo"


# --- the demo's database ---------------------------------------------------------------------------------------


def prepare_database(database: str) -> None:
    """Start the demo on a fresh SQLite database: create it marked as the demo's, or replace one the demo made
    before. An existing file without the mark is somebody else's and is refused. Other databases are used as
    they are."""
    from sqlalchemy.engine import make_url

    from askback.db.urls import normalize_database_url

    parsed = make_url(normalize_database_url(database))
    name = parsed.database
    if parsed.get_backend_name() != "sqlite" or not name or name == ":memory:" or name.startswith("file:"):
        return
    path = Path(name)
    if path.exists():
        if not _made_by_demo(path):
            raise ConfigurationError(
                f"{path} already exists and was not made by `askback demo`, which replaces its database on every "
                f"run; pass --database sqlite:///ANOTHER.db, or delete {path} yourself"
            )
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    try:
        with contextlib.closing(sqlite3.connect(path)) as conn, conn:
            conn.execute(f"CREATE TABLE {_MARKER} (note TEXT NOT NULL)")
            conn.execute(
                f"INSERT INTO {_MARKER} VALUES ('made by askback demo, which replaces this database on every run')"
            )
    except sqlite3.Error as exc:
        raise ConfigurationError(
            f"cannot create the demo database {path} ({exc}); pass --database sqlite:///PATH in a writable folder"
        ) from exc


def _made_by_demo(path: Path) -> bool:
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as conn:
            found = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?", (_MARKER,))
            return bool(found.fetchone()[0])
    except sqlite3.Error:  # not an SQLite file at all, or unreadable: not ours either way
        return False


# --- asking the person at the terminal -------------------------------------------------------------------------


def _ask(prompt: str) -> str | None:
    """One line typed at the terminal; `None` when input has ended (Ctrl-D, or the end of piped input)."""
    try:
        return console.input(prompt)
    except EOFError:
        console.print()
        return None


def _answer_form(schema: dict[str, Any]) -> ElicitResult:
    content: dict[str, Any] = {}
    choices: dict[str, Any]
    for name, prop in schema.get("properties", {}).items():
        title = escape(str(prop.get("title", name)))
        if prop.get("description"):
            console.print(f"    [dim]{escape(str(prop['description']))}[/]")
        if prop.get("type") == "boolean":
            prompt = f"    {title} [bold]\\[y/n][/] (empty to decline): "
            choices = {"y": True, "yes": True, "n": False, "no": False}
        elif "enum" in prop:
            options = [str(v) for v in prop["enum"]]
            prompt = f"    {title} [bold]\\[{escape('/'.join(options))}][/] (empty to decline): "
            choices = {v: v for v in options}
        else:
            prompt = f"    {title} (empty to decline): "
            choices = {}
        while True:
            typed = _ask(prompt)
            if typed is None:
                return ElicitResult(action="cancel")
            typed = typed.strip()
            if typed == "":
                return ElicitResult(action="decline")
            if not choices:
                content[name] = typed
                break
            if typed.lower() in choices:
                content[name] = choices[typed.lower()]
                break
            console.print(f"    [red]type one of {escape(', '.join(choices))}, or nothing to decline[/]")
    return ElicitResult(action="accept", content=content)


def _open_link(url: str, user: str, interactive: bool) -> ElicitResult:
    """A URL question: the link opened by the scripted person, or by the person at the terminal in their browser."""
    console.print(f"    link {escape(url)}")
    if not interactive:
        connected = connect_account(url, user=user, say=lambda step: console.print(f"    [dim]{escape(step)}[/]"))
        # A person who could not finish closes the page: the retry then says what happened.
        return ElicitResult(action="accept" if connected else "cancel")
    console.print(
        f"    [dim]Open it in your browser: sign in as {escape(user)} when the demo server asks, then sign in at "
        f"{NAME} (any name) and allow access.[/]"
    )
    typed = _ask("    Press Enter once the page says Connected (n to decline): ")
    if typed is None:
        return ElicitResult(action="cancel")
    return ElicitResult(action="decline" if typed.strip().lower() in ("n", "no") else "accept")


def _answer(key: str, params: dict[str, Any], user: str, interactive: bool) -> ElicitResult:
    if params.get("mode") == "url":
        return _open_link(str(params["url"]), user, interactive)
    if not interactive:
        return ElicitResult(action="accept", content=_SCRIPT[key])
    return _answer_form(params.get("requestedSchema", {}))


# --- driving the flows -----------------------------------------------------------------------------------------


def _round(url: str, tool: str, arguments: dict[str, Any], **options: Any) -> Round:
    return anyio.run(functools.partial(call_round, url, tool, arguments, **options))


def _show_projects(url: str, user: str) -> None:
    # What a person would look up before typing a project's name to confirm its deletion.
    rnd = _round(url, "list_projects", {}, token=f"demo-{user}")
    if isinstance(rnd.result, CallToolResult) and isinstance(rnd.result.structured_content, dict):
        projects = rnd.result.structured_content.get("projects", [])
        listed = ", ".join(f"{p['id']} is {p['name']}" for p in projects) or "none"
        console.print(f"  [dim]{escape(user)} looks up the projects first: {escape(listed)}[/]")


def _drive(url: str, user: str, tool: str, arguments: dict[str, Any], interactive: bool) -> set[str]:
    console.rule(f"[bold]{user}[/] calls [cyan]{tool}[/] {escape(str(arguments))}")
    if interactive and tool == "delete_project":
        _show_projects(url, user)
    instances: set[str] = set()

    def answer(key: str, params: dict[str, Any]) -> ElicitResult:
        console.print(f"    asks [bold]{key}[/]: {escape(str(params.get('message')))}")
        given = _answer(key, params, user, interactive)
        console.print(f"    answers {given.action} {escape(str(given.content or ''))}")
        return given

    # One event loop per round: the person is asked between rounds, where one Ctrl-C stops the demo at once.
    plan = flow_plan(answer)
    request = next(plan)
    for number in itertools.count(1):
        rnd = _round(
            url, tool, arguments, token=f"demo-{user}", responses=request.responses, request_state=request.request_state
        )
        instances.add(rnd.instance or "?")
        where = f"[dim]served by worker {rnd.instance}[/]"
        if rnd.error is not None:
            console.print(f"  round {number}: error {rnd.error.error.code} {escape(rnd.error.error.message)} {where}")
        elif isinstance(rnd.result, CallToolResult):
            text = " ".join(getattr(c, "text", "") for c in rnd.result.content)
            console.print(f"  round {number}: [green]complete[/] {escape(repr(text))} {where}")
        else:
            console.print(f"  round {number}: [yellow]input_required[/] {where}")
        try:
            request = plan.send(rnd)
        except StopIteration:
            break
    return instances


@dataclass(frozen=True)
class DemoServers:
    """The demo's servers while they run: the demo server's /mcp `url`, and Demo Mail (`mail`, in this process)."""

    url: str
    mail: DevProvider


@contextlib.contextmanager
def serving_demo(
    *, workers: int, port: int, database: str, env: Mapping[str, str] | None = None
) -> Iterator[DemoServers]:
    """Demo Mail on loopback and the demo server (`askback serve askback.demo:server`) connected to it, with keys
    of their own and `env` besides (e.g. `ASKBACK_WEBHOOKS`), until the block ends."""
    public_url = f"http://127.0.0.1:{port}"
    client_secret = secrets.token_urlsafe(32)
    with serving_provider(client_secret=client_secret, redirect_uris=[callback_url(public_url)]) as mail:
        server_env = {
            **(env or {}),
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_DATABASE_URL": database,
            "ASKBACK_VAULT_KEYS": new_key(),
            ISSUER_ENV: mail.issuer,
            CLIENT_SECRET_ENV: client_secret,
            PUBLIC_URL_ENV: public_url,
            SIGN_IN_SECRET_ENV: secrets.token_urlsafe(32),
        }
        console.print(f"Starting {NAME}, a development OAuth provider, on {mail.issuer}")
        console.print(f"Starting the demo server: {workers} worker processes on 127.0.0.1:{port}, database {database}")
        with serving("askback.demo:server", port=port, workers=workers, env=server_env) as url:
            yield DemoServers(url, mail)


@contextlib.contextmanager
def demo_servers(*, workers: int, port: int, database: str, env: Mapping[str, str] | None = None) -> Iterator[str]:
    """`serving_demo`, yielding the demo server's /mcp URL."""
    with serving_demo(workers=workers, port=port, database=database, env=env) as servers:
        yield servers.url


# --- the demo's agent runtime, resumed by the server's own webhook ------------------------------------------

WEBHOOK_SECRET_ENV = "ASKBACK_DEMO_WEBHOOK_SECRET"
"""The variable the demo's webhooks file names for the endpoint's secret (set in the demo server's environment)."""

_LANDING_TIMEOUT = 60.0  # seconds to wait for the grant's webhook once the person is done


@dataclass(frozen=True)
class Landed:
    """A webhook the demo's receiver acted on: its event type, and the status of each call it resumed."""

    type: str
    calls: tuple[tuple[str, str], ...]


class _Watched:
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


def _runtime_options(user: str) -> dict[str, Any]:
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
def serving_receiver(database: str, *, user: str, port: int, secret: str) -> Iterator[tuple[str, queue.Queue[Landed]]]:
    """The demo's agent runtime on `database` (for `user`), in a thread, taking the signed webhooks of the demo server
    on `port` until the block ends: yields the receiver's URL and the queue each `Landed` webhook is put on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    landed: queue.Queue[Landed] = queue.Queue()
    watched = _Watched(landed)
    config = uvicorn.Config(watched, log_level="warning", log_config=None, access_log=False, lifespan="off")
    serving_it = uvicorn.Server(config)
    opened = threading.Event()
    failed: list[AskbackError] = []

    async def serve() -> None:
        try:
            async with await Runtime.open(database, **_runtime_options(user)) as runtime:
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


def _landing(landed: queue.Queue[Landed], call_id: str) -> Landed | None:
    """The webhook that resumed `call_id`, waited for in plain code (a Ctrl-C stops the wait at once)."""
    deadline = time.monotonic() + _LANDING_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        try:
            got = landed.get(timeout=left)
        except queue.Empty:
            return None
        if any(call == call_id for call, _ in got.calls):
            return got
    return None


def _drive_resumed(url: str, user: str, database: str, landed: queue.Queue[Landed], interactive: bool) -> bool:
    """True unless the person declined to connect or their input ended (then the demo asks them nothing more)."""
    tool = "summarize_inbox"
    console.rule(f"[bold]{user}[/] calls [cyan]{tool}[/] {{}} [dim]through the demo's agent runtime[/]")

    async def with_runtime(work: Callable[[Runtime], Awaitable[Outcome]]) -> Outcome:
        async with await Runtime.open(database, **_runtime_options(user)) as runtime:
            return await work(runtime)

    def done(outcome: Outcome, number: int) -> None:
        if isinstance(outcome, Completed):
            console.print(f"  round {number}: [green]complete[/] {escape(repr(outcome.text))}")
        else:
            console.print(f"  round {number}: [yellow]{type(outcome).__name__.lower()}[/] call {outcome.call_id}")

    first = anyio.run(with_runtime, lambda rt: rt.call_tool(url, tool, {}, principal=user))
    if not isinstance(first, Parked):
        done(first, 1)
        return True
    console.print(f"  round 1: [yellow]input_required[/]: the runtime parked call {first.call_id}")
    [question] = first.questions
    console.print(f"    asks [bold]{question.key}[/]: {escape(question.message)}")
    given = _open_link(question.url or "", user, interactive)
    if given.action != "accept":
        console.print(f"    answers {given.action}")

        async def answer(runtime: Runtime) -> Outcome:
            await runtime.answer(first.call_id, question.key, Answer(given.action))
            return await runtime.resume(first.call_id)

        done(anyio.run(with_runtime, answer), 2)
        return False
    console.print("    [dim]nobody answers the question: the runtime waits for the server's webhook[/]")
    got = _landing(landed, first.call_id)
    if got is None:
        console.print(
            f"  the grant's webhook did not arrive within {_LANDING_TIMEOUT:.0f} s; the call stays parked: "
            f"askback webhooks deliveries --database {database}"
        )
        return True
    console.print(f"  [bold]the grant landed: {escape(got.type)}; the call resumed by itself[/]")
    done(anyio.run(with_runtime, lambda rt: rt.resume(first.call_id)), first.round + 1)
    return True


def run_demo(*, interactive: bool, workers: int, port: int, database: str) -> int:
    prepare_database(database)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    port = port or free_port()  # the receiver takes the events of the demo server there, and of no other
    with (
        tempfile.TemporaryDirectory(prefix="askback-demo-") as folder,
        serving_receiver(database, user="carol", port=port, secret=secret) as (receiver, landed),
    ):
        env = {"ASKBACK_WEBHOOKS": str(webhooks_file(Path(folder), receiver)), WEBHOOK_SECRET_ENV: secret, **EXPOSE}
        with demo_servers(workers=workers, port=port, database=database, env=env) as url:
            console.print(f"The demo server sends account.connected to the demo's agent runtime at {receiver}")
            if interactive:
                console.print("[dim]Answer each question; an empty answer declines it. Ctrl-C stops the demo.[/]")
            seen = _drive(url, "alice", "delete_project", {"project_id": "prj_99"}, interactive)
            seen |= _drive(url, "bob", "deploy", {"service": "web-frontend"}, interactive)
            if _drive_resumed(url, "carol", database, landed, interactive) or not interactive:
                walk_meta(url, "erin", lambda link, user: _open_link(link, user, interactive), console)
    console.rule()
    console.print(f"Rounds were served by {len(seen)} different worker process(es): {', '.join(sorted(seen))}.")
    console.print(
        "Who confirmed the deletion of billing-legacy, and when:\n"
        f"  askback audit --database {database} --tool delete_project --event answered --contains billing-legacy"
    )
    console.print(
        "carol's connected account, its status and history, never its token:\n"
        f"  askback accounts list --database {database}"
    )
    console.print(
        "The webhook that resumed carol's call, and its every attempt:\n"
        f"  askback webhooks deliveries --attempts --database {database}"
    )
    return 0
