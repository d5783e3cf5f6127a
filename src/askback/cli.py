"""The `askback` command: serve a server, run the demo, make keys, read the audit trail, migrate the database."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import os
import secrets
import sys
from typing import Annotated, Any

import anyio
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from askback.errors import AskbackError, ConfigurationError

app = typer.Typer(help="askback: MCP tools that ask the human, on every instance.", no_args_is_help=True)
keys_app = typer.Typer(help="State keys for sealing requestState.", no_args_is_help=True)
db_app = typer.Typer(help="The database behind flows, effects and the audit trail.", no_args_is_help=True)
app.add_typer(keys_app, name="keys")
app.add_typer(db_app, name="db")

_TARGET_ENV = "ASKBACK_SERVE_TARGET"
_HOST_ENV = "ASKBACK_SERVE_HOST"
_LOG_ENV = "ASKBACK_SERVE_LOG"
_VERIFIER_ENV = "ASKBACK_SERVE_VERIFIER"


def _fail(message: str, code: int = 2) -> typer.Exit:
    Console(stderr=True).print(f"[bold red]error:[/] {escape(message)}", highlight=False)
    return typer.Exit(code)


def load_object(target: str, what: str) -> Any:
    """Import `MODULE:ATTR` and return the object it names."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{target!r} is not MODULE:ATTR (for {what}, e.g. askback.demo:server)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    if not hasattr(module, attr):
        raise ConfigurationError(f"{module_name!r} has no {attr!r}")
    return getattr(module, attr)


def load_target(target: str) -> Any:
    """Import `MODULE:ATTR` and return the `Askback` server it names."""
    from askback.server import Askback

    server = load_object(target, "an askback server")
    if not isinstance(server, Askback):
        raise ConfigurationError(f"{target!r} is not an askback.Askback server (got {type(server).__name__})")
    return server


def app_factory() -> Any:
    """The ASGI app for one worker of `askback serve` (uvicorn calls this in every worker process)."""
    from askback import logs
    from askback.http import build_app

    level, _, fmt = os.environ.get(_LOG_ENV, "info:json").partition(":")
    logs.configure(level, "text" if fmt == "text" else "json")
    target = os.environ[_TARGET_ENV]
    verifier = os.environ.get(_VERIFIER_ENV)
    return build_app(
        load_target(target),
        host=os.environ.get(_HOST_ENV, "127.0.0.1"),
        token_verifier=load_object(verifier, "a token verifier") if verifier else None,
    )


@app.command()
def serve(
    target: Annotated[str, typer.Argument(help="MODULE:ATTR of an askback.Askback server, e.g. askback.demo:server")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    log_level: Annotated[str, typer.Option(help="Level of askback's logs (the audit lines are info).")] = "info",
    log_format: Annotated[str, typer.Option(help="json (one object per line) or text.")] = "json",
    token_verifier: Annotated[
        str | None, typer.Option(help="MODULE:ATTR of a token verifier; requests without a valid token get 401.")
    ] = None,
    graceful_timeout: Annotated[
        int, typer.Option(min=1, help="Seconds a stopping instance lets running calls finish.")
    ] = 30,
) -> None:
    """Serve TARGET over Streamable HTTP at /mcp (MCP 2026-07-28 statelessly, and 2025-11-25 sessions), with /healthz
    and /readyz."""
    import uvicorn

    from askback import logs

    if log_format not in ("json", "text"):
        raise _fail("--log-format is json or text")
    if log_level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise _fail("--log-level is one of debug, info, warning, error, critical")
    logs.configure(log_level, "json" if log_format == "json" else "text")
    os.environ[_LOG_ENV] = f"{log_level}:{log_format}"
    try:
        if token_verifier is not None:
            load_object(token_verifier, "a token verifier")
            os.environ[_VERIFIER_ENV] = token_verifier
        server = load_target(target)
        server.check_workers(workers)

        async def prepare() -> None:
            # Migrate (SQLite) or check (PostgreSQL) once here, before any worker takes a request.
            async with server.running():
                pass

        anyio.run(prepare)
    except AskbackError as exc:
        raise _fail(str(exc)) from None
    os.environ[_TARGET_ENV] = target
    os.environ[_HOST_ENV] = host
    uvicorn.run(
        "askback.cli:app_factory",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        log_config=None,
        app_dir=os.getcwd(),
        timeout_graceful_shutdown=graceful_timeout,
    )


@keys_app.command("new")
def keys_new() -> None:
    """Print a new random state key (put it in ASKBACK_STATE_KEYS; the first key of the ring seals)."""
    typer.echo(secrets.token_urlsafe(48))


@db_app.command("upgrade")
def db_upgrade(
    database: Annotated[
        str | None, typer.Option("--database", help="Database URL (default: ASKBACK_DATABASE_URL).")
    ] = None,
) -> None:
    """Apply the database migrations."""
    from askback.settings import load_settings
    from askback.store import Store

    url = database or load_settings().database_url

    async def run() -> str | None:
        store = await Store.open(url, migrate=False, check=False)
        try:
            await store.upgrade()
            return await store.current_revision()
        finally:
            await store.close()

    try:
        revision = anyio.run(run)
    except AskbackError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"database at revision {revision}")


def _parse_time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise _fail(f"--{name} takes an ISO date or time, e.g. 2026-11-30 or 2026-11-30T14:00") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


@app.command()
def audit(
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
    principal: Annotated[str | None, typer.Option("--principal", "--user", help="Only this user.")] = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow id.")] = None,
    event: Annotated[str | None, typer.Option(help="asked | answered | completed | rejected.")] = None,
    contains: Annotated[str | None, typer.Option(help="Answer content, outcome or detail contains this text.")] = None,
    since: Annotated[str | None, typer.Option(help="From this ISO time (UTC unless given).")] = None,
    until: Annotated[str | None, typer.Option(help="Until this ISO time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 1000,
    database: Annotated[
        str | None, typer.Option("--database", help="Database URL (default: ASKBACK_DATABASE_URL).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line, for machines.")] = False,
) -> None:
    """List audit events: who was asked what, who answered what, and how each flow ended.

    Who confirmed the deletion of billing-legacy, and when (after `askback demo`):

        askback audit --database sqlite:///askback-demo.db --tool delete_project --event answered --contains billing-legacy
    """
    from askback.settings import load_settings
    from askback.store import AuditFilter, Store

    if event is not None and event not in ("asked", "answered", "completed", "rejected"):
        raise _fail("--event is one of asked, answered, completed, rejected")
    url = database or load_settings().database_url
    flt = AuditFilter(
        tool=tool,
        principal=principal,
        flow_id=flow,
        event=event,
        contains=contains,
        since=_parse_time(since, "since"),
        until=_parse_time(until, "until"),
        limit=limit,
    )

    async def run() -> list[Any]:
        store = await Store.open(url, migrate=False)
        try:
            return await store.audit(flt)
        finally:
            await store.close()

    try:
        events = anyio.run(run)
    except AskbackError as exc:
        raise _fail(str(exc)) from None
    if as_json:
        for ev in events:
            row = {k: v for k, v in ev.__dict__.items() if v is not None and v != ()}
            row["keys"] = list(ev.keys)
            row["time"] = dt.datetime.fromtimestamp(ev.at, dt.UTC).isoformat()
            typer.echo(json.dumps(row, sort_keys=True))
        return
    console = Console()
    if not events:
        console.print("no audit events match")
        return
    table = Table(
        "time (UTC)", "event", "tool", "user", "flow", "round", "keys", "action / outcome", "answer", "instance"
    )
    for ev in events:
        when = dt.datetime.fromtimestamp(ev.at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        table.add_row(
            when,
            ev.event,
            ev.tool or "",
            ev.principal or "",
            (ev.flow_id or "")[:10],
            "" if ev.round is None else str(ev.round),
            ",".join(ev.keys),
            ev.action or ev.outcome or "",
            json.dumps(ev.content, sort_keys=True) if ev.content else (ev.detail or ""),
            ev.instance or "",
        )
    console.print(table)


@app.command()
def demo(
    interactive: Annotated[bool, typer.Option("--interactive", help="Ask the person at this terminal.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes for the demo server.")] = 3,
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = 0,
    database: Annotated[
        str, typer.Option("--database", help="Database file for the demo.")
    ] = "sqlite:///askback-demo.db",
) -> None:
    """Start the demo server with several workers and walk through a deletion and a production deploy."""
    from askback.demo_run import run_demo

    try:
        code = run_demo(interactive=interactive, workers=workers, port=port, database=database)
    except AskbackError as exc:
        raise _fail(str(exc)) from None
    raise typer.Exit(code)


def _register_tools() -> None:
    # The migration tools live in their own modules; they add their commands here.
    from askback import check_cli, lint_cli

    lint_cli.register(app)
    check_cli.register(app)


_register_tools()


def main() -> None:
    app()
