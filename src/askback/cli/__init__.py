"""The `askback` command: serve a server, run the demo, make keys, read the audit trail, migrate the database."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import logging
import os
import secrets
import sqlite3
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import anyio
import anyio.to_thread
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from askback.cli.output import fail
from askback.errors import AskbackError, ConfigurationError

if TYPE_CHECKING:
    from askback.audit import AuditEvent
    from askback.server import Askback

# Plain help (click's formatter): typer's rich panels show every flag as taking a value (`--json <bool>`) and
# cram long help into narrow columns.
app = typer.Typer(
    help="askback: MCP tools that ask the human, on every instance.", no_args_is_help=True, rich_markup_mode=None
)
keys_app = typer.Typer(help="State keys for sealing requestState.", no_args_is_help=True, rich_markup_mode=None)
db_app = typer.Typer(
    help="The database behind flows, effects and the audit trail.", no_args_is_help=True, rich_markup_mode=None
)
app.add_typer(keys_app, name="keys")
app.add_typer(db_app, name="db")

_TARGET_ENV = "ASKBACK_SERVE_TARGET"
_HOST_ENV = "ASKBACK_SERVE_HOST"
_LOG_ENV = "ASKBACK_SERVE_LOG"
_VERIFIER_ENV = "ASKBACK_SERVE_VERIFIER"
_EVENTS = ("asked", "answered", "completed", "replayed", "rejected")
_T = TypeVar("_T")


def load_object(target: str, what: str) -> Any:
    """Import `MODULE:ATTR` and return the object it names."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"{target!r} is not MODULE:ATTR (for {what}, e.g. askback.demo:server)")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as exc:
        raise ConfigurationError(
            f"cannot import {module_name!r}: {type(exc).__name__} at {exc.filename}:{exc.lineno}: {exc.msg}"
        ) from exc
    except ImportError as exc:
        raise ConfigurationError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        # The module's own code raised while being imported: name the exception and where it was raised; running
        # `python -c "import MODULE"` shows the whole traceback.
        frames = traceback.extract_tb(exc.__traceback__)
        where = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
        raise ConfigurationError(
            f"cannot import {module_name!r}: it raised {type(exc).__name__}: {exc}{where}"
        ) from exc
    if not hasattr(module, attr):
        raise ConfigurationError(f"{module_name!r} has no {attr!r}")
    return getattr(module, attr)


def load_target(target: str) -> Askback:
    """Import `MODULE:ATTR` and return the `Askback` server it names."""
    from askback.server import Askback

    server = load_object(target, "an askback server")
    if not isinstance(server, Askback):
        raise ConfigurationError(f"{target!r} is not an askback.Askback server (got {type(server).__name__})")
    return server


def app_factory() -> Any:
    """The ASGI app for one worker of `askback serve` (uvicorn calls this in every worker process)."""
    from askback.cli import logs
    from askback.server.http import build_app

    level, _, fmt = os.environ.get(_LOG_ENV, "info:json").partition(":")
    logs.configure(level, "text" if fmt == "text" else "json")
    target = os.environ[_TARGET_ENV]
    verifier = os.environ.get(_VERIFIER_ENV)
    return build_app(
        load_target(target),
        host=os.environ.get(_HOST_ENV, "127.0.0.1"),
        token_verifier=load_object(verifier, "a token verifier") if verifier else None,
    )


def _run_with_database(url: str, fn: Callable[[], Awaitable[_T]]) -> _T:
    """Run `fn`, which opens the database at `url`, in an event loop of its own; a database error the store did not
    already put in words becomes one `ConfigurationError` that says which database and what to do."""
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    from askback.db.urls import normalize_database_url

    try:
        return anyio.run(fn)
    except (sa_exc.DBAPIError, sqlite3.DatabaseError) as exc:
        cause = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
        reason = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        safe = make_url(normalize_database_url(url)).render_as_string(hide_password=True)
        raise ConfigurationError(
            f"cannot use the database at {safe}: {reason}; point ASKBACK_DATABASE_URL at an askback database (run "
            "`askback db upgrade` on a new PostgreSQL one)"
        ) from exc


def _http_url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}/mcp" if ":" in host else f"http://{host}:{port}/mcp"


@app.command()
def serve(
    target: Annotated[str, typer.Argument(help="MODULE:ATTR of an askback.Askback server, e.g. askback.demo:server")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on, 1 to 65535.")] = 8000,
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

    from askback.cli import logs

    if not 1 <= port <= 65535:
        raise fail(f"--port is a TCP port, 1 to 65535, not {port}")
    if log_format not in ("json", "text"):
        raise fail("--log-format is json or text")
    if log_level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise fail("--log-level is one of debug, info, warning, error, critical")
    logs.configure(log_level, "json" if log_format == "json" else "text")
    os.environ[_LOG_ENV] = f"{log_level}:{log_format}"
    try:
        if token_verifier is not None:
            load_object(token_verifier, "a token verifier")
            os.environ[_VERIFIER_ENV] = token_verifier
        server = load_target(target)
        server.check_workers(workers)

        async def prepare() -> str:
            # Migrate (SQLite) or check (PostgreSQL) once here, before any worker takes a request.
            async with server.running():
                return (await server.store()).safe_url

        database = _run_with_database(server.settings.database_url, prepare)
    except AskbackError as exc:
        raise fail(str(exc), exc.exit_code) from None
    log = logging.getLogger("askback.serve")
    url = _http_url(host, port)
    log.info(
        "askback serving %s at %s with %s; database %s",
        target,
        url,
        "1 worker" if workers == 1 else f"{workers} workers",
        database,
        extra={"url": url, "workers": workers, "database": database},
    )
    if token_verifier is None and not server.settings.demo_auth:
        log.warning(
            "askback: no --token-verifier, so requests are not authenticated and state then binds to no user: anyone "
            "holding a pending requestState can answer it. Pass --token-verifier MODULE:ATTR where users are real."
        )
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

    try:
        url = database or load_settings().database_url
    except AskbackError as exc:
        raise fail(str(exc), exc.exit_code) from None

    async def run() -> str | None:
        store = await Store.open(url, migrate=False, check=False)
        try:
            await store.upgrade()
            return await store.current_revision()
        finally:
            await store.close()

    try:
        revision = _run_with_database(url, run)
    except AskbackError as exc:
        raise fail(str(exc), exc.exit_code) from None
    typer.echo(f"database at revision {revision}")


def _parse_time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise fail(f"--{name} takes an ISO date or time, e.g. 2026-11-30 or 2026-11-30T14:00") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def _answer_cell(ev: AuditEvent) -> str:
    """What a person answered, or how the flow ended: `accept (project_name: billing-legacy)`, `decline`,
    `completed`, `invalid_state (the detail)`. Spaces after each separator let a narrow column wrap between
    words rather than inside a value."""
    what = ev.action or ev.outcome or ""
    if ev.content:
        shown = ", ".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in ev.content.items())
    else:
        shown = ev.detail or ""
    return f"{what} ({shown})" if what and shown else what or shown


def _audit_table(events: list[AuditEvent], *, wide: bool) -> Table:
    # No borders: at 80 columns every character goes to the values. Time and event never wrap; the rest wrap
    # between words and fold a value too long for its column rather than cut it.
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    if wide:
        table.add_column("tool", overflow="fold")
    table.add_column("user", overflow="fold")
    if wide:
        table.add_column("flow", overflow="fold")
    table.add_column("round", justify="right")
    table.add_column("question", overflow="fold")
    table.add_column("answer / outcome", overflow="fold", min_width=16)
    if wide:
        table.add_column("instance", overflow="fold")
    for ev in events:
        when = dt.datetime.fromtimestamp(ev.at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        cells = [when, ev.event]
        if wide:
            cells.append(ev.tool or "")
        cells.append(ev.principal or "")
        if wide:
            cells.append(ev.flow_id or "")
        cells += ["" if ev.round is None else str(ev.round), ", ".join(ev.keys), _answer_cell(ev)]
        if wide:
            cells.append(ev.instance or "")
        table.add_row(*(Text(cell) for cell in cells))  # Text: what a user typed is never read as markup
    return table


@app.command()
def audit(
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
    principal: Annotated[str | None, typer.Option("--principal", "--user", help="Only this user.")] = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow id.")] = None,
    event: Annotated[str | None, typer.Option(help=f"Only this kind: {' | '.join(_EVENTS)}.")] = None,
    contains: Annotated[str | None, typer.Option(help="Answer content, outcome or detail contains this text.")] = None,
    since: Annotated[str | None, typer.Option(help="From this ISO time (UTC unless given).")] = None,
    until: Annotated[str | None, typer.Option(help="Until this ISO time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 1000,
    database: Annotated[
        str | None, typer.Option("--database", help="Database URL (default: ASKBACK_DATABASE_URL).")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column: also tool, full flow id and instance.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line, for machines.")] = False,
) -> None:
    """List audit events: who was asked what, who answered what, and how each flow ended.

    Who confirmed the deletion of billing-legacy, and when (after `askback demo`):

    \b
        askback audit --database sqlite:///askback-demo.db \\
          --tool delete_project --event answered --contains billing-legacy
    """
    from askback.audit import AuditFilter
    from askback.settings import load_settings
    from askback.store import Store

    if event is not None and event not in _EVENTS:
        raise fail(f"--event is one of {', '.join(_EVENTS)}, not {event!r}")
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

    async def run() -> list[AuditEvent]:
        store = await Store.open(url, migrate=False)
        try:
            return await store.audit(flt)
        finally:
            await store.close()

    try:
        url = database or load_settings().database_url
        events = _run_with_database(url, run)
    except AskbackError as exc:
        raise fail(str(exc), exc.exit_code) from None
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
    console.print(_audit_table(events, wide=wide))


@app.command()
def demo(
    interactive: Annotated[bool, typer.Option("--interactive", help="Ask the person at this terminal.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes for the demo server.")] = 3,
    port: Annotated[int, typer.Option(help="Port (0 picks a free one).")] = 0,
    database: Annotated[
        str,
        typer.Option(
            "--database",
            help="SQLite database for the demo. The demo creates it, marked as the demo's (a table askback_demo), "
            "and replaces it on the next run; an existing file without that mark is refused, never deleted.",
        ),
    ] = "sqlite:///askback-demo.db",
) -> None:
    """Start the demo server with several workers and walk through a deletion and a production deploy."""
    from askback.demo.run import run_demo

    if not 0 <= port <= 65535:
        raise fail(f"--port is a TCP port, 1 to 65535 (or 0 for a free one), not {port}")
    try:
        code = run_demo(interactive=interactive, workers=workers, port=port, database=database)
    except AskbackError as exc:
        raise fail(str(exc), exc.exit_code) from None
    except KeyboardInterrupt:
        # The demo server and its workers are stopped by now (demo_run.serving).
        typer.echo("\ninterrupted: the demo server and its workers are stopped", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def _register_tools() -> None:
    # The migration tools live in their own modules; they add their commands here.
    from askback.cli import check as check_cli
    from askback.cli import lint as lint_cli

    lint_cli.register(app)
    check_cli.register(app)


_register_tools()


def main() -> None:
    app()
