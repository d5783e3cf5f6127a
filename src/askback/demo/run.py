"""`askback demo`: start the demo server with several workers and walk through three flows, round by round.

Every round is a new connection, so the retry can land on another worker process; each round prints the
questions, the answers, and the worker that served it. `--interactive` asks the person at the terminal instead of
answering from the script.

The third flow, `summarize_inbox`, needs the caller's account at Demo Mail, a development OAuth provider the demo
runs on loopback in a thread of this process (`askback.demo.provider`). Its first round asks with a link; the scripted
person follows it with plain HTTP (`askback.demo.person`): the demo server's development sign-in, the provider's
sign-in and consent page, the callback that stores the grant. The retry then reads the inbox. With `--interactive`,
the person opens the link in their own browser and presses Enter when it says Connected.

Each round runs in an event loop of its own and the questions are asked between rounds, in plain code: a prompt
inside a running event loop would not see Ctrl-C (asyncio turns the first SIGINT into a cancellation that a
blocked `input()` never notices). So one Ctrl-C raises `KeyboardInterrupt` wherever the demo is, and `serving`
stops the server's whole process group on the way out.

The demo's SQLite database is replaced on every run, so it carries a marker table (`askback_demo`) written when the
demo creates it; an existing file without it is refused rather than deleted.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
from mcp_types import CallToolResult, ElicitResult
from rich.console import Console
from rich.markup import escape

from askback.accounts.vault import new_key
from askback.core.plan import Round, flow_plan
from askback.demo.mail import (
    CLIENT_SECRET_ENV,
    ISSUER_ENV,
    PUBLIC_URL_ENV,
    SIGN_IN_SECRET_ENV,
    callback_url,
)
from askback.demo.person import connect_account
from askback.demo.provider import NAME, serving_provider
from askback.errors import ConfigurationError
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


@contextlib.contextmanager
def demo_servers(*, workers: int, port: int, database: str) -> Iterator[str]:
    """Demo Mail on loopback and the demo server (`askback serve askback.demo:server`) connected to it, with keys
    of their own, until the block ends; yields the demo server's /mcp URL."""
    public_url = f"http://127.0.0.1:{port}"
    client_secret = secrets.token_urlsafe(32)
    with serving_provider(client_secret=client_secret, redirect_uris=[callback_url(public_url)]) as mail:
        env = {
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
        with serving("askback.demo:server", port=port, workers=workers, env=env) as url:
            yield url


def run_demo(*, interactive: bool, workers: int, port: int, database: str) -> int:
    prepare_database(database)
    with demo_servers(workers=workers, port=port or free_port(), database=database) as url:
        if interactive:
            console.print("[dim]Answer each question; an empty answer declines it. Ctrl-C stops the demo.[/]")
        seen = _drive(url, "alice", "delete_project", {"project_id": "prj_99"}, interactive)
        seen |= _drive(url, "bob", "deploy", {"service": "web-frontend"}, interactive)
        seen |= _drive(url, "carol", "summarize_inbox", {}, interactive)
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
    return 0
