"""What `askback inbox` and `askback call` share: their common options, opening the runtime for one command, the
bearer token a command sends (and to which server), and printing a call's outcome and a question (as text through
`for_terminal`, or as JSON).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import ExitStatus, UsageError
from askback.core.server_urls import same_server, server_endpoint
from askback.core.terminal_text import for_terminal, shorten

if TYPE_CHECKING:
    from askback.db.migrate import Component
    from askback.runtime import Runtime
    from askback.runtime.calls import Outcome
    from askback.runtime.questions import Mode, ParkedQuestion
    from askback.runtime.renderers import Renderer
    from askback.runtime.terminal import TerminalRenderer

__all__ = [
    "AS_JSON",
    "DATABASE",
    "DEFAULT_TIMEOUT",
    "QUESTIONS_LISTED",
    "TIMEOUT",
    "TOKEN",
    "TOKEN_SERVER",
    "asked_by",
    "bearer",
    "print_outcome",
    "question_json",
    "terminal_renderer",
    "when",
    "with_runtime",
]

_T = TypeVar("_T")

DATABASE = typer.Option("--database", help=DATABASE_HELP)
AS_JSON = typer.Option("--json", help="Print JSON.")
QUESTIONS_LISTED = 20
DEFAULT_TIMEOUT = 30.0
TIMEOUT = typer.Option(
    "--timeout",
    min=0.001,
    help="Seconds to wait for the server's answer to a round; a parked call stays parked when it runs out.",
)

TOKEN = typer.Option(
    "--token",
    envvar="ASKBACK_CALL_TOKEN",
    help="A bearer token for the call's server (never stored); --due and serve need --token-server too.",
)
TOKEN_SERVER = typer.Option(
    "--token-server",
    envvar="ASKBACK_CALL_TOKEN_SERVER",
    metavar="URL",
    help="The one server (its MCP URL) --token is sent to; calls to any other server go without it.",
)
# RFC 6750's b64token: what an Authorization header can carry without a parser reading it differently.
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")


def bearer(token: str | None, server: str | None, *, one_server: bool) -> Callable[[str], Mapping[str, str]] | None:
    """The runtime's `headers` for a command's `--token` (`None` without one): only to the server `--token-server`
    names, when it names one. A command that may reach several servers (`--due`, `serve`: `one_server=False`) needs
    it, so that a token never goes to every server a store's calls go to; a command on one call sends the token to
    that call's server."""
    if token is None:
        if server is not None:
            raise UsageError("--token-server names the server --token goes to: give --token (or ASKBACK_CALL_TOKEN)")
        return None
    if not _B64TOKEN.fullmatch(token):
        raise UsageError("--token is not a bearer token: letters, digits and -._~+/ only, then any '=' (RFC 6750)")
    if server is None and not one_server:
        raise UsageError(
            "a token goes to one server only, and this command may reach several: name it with --token-server URL "
            "(or ASKBACK_CALL_TOKEN_SERVER)"
        )
    if server is not None and server_endpoint(server)[0] not in ("http", "https"):
        raise UsageError(f"--token-server {server!r} is not an http(s) URL")
    header = {"Authorization": f"Bearer {token}"}
    if server is None:
        return lambda _server: header
    return lambda to: header if same_server(to, server) else {}


def when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def with_runtime(
    database: str | None,
    work: Callable[[Runtime], Awaitable[_T]],
    *,
    renderers: tuple[Renderer, ...] = (),
    timeout: float = DEFAULT_TIMEOUT,
    settings_given: Mapping[str, Any] | None = None,
    headers: Callable[[str], Mapping[str, str]] | None = None,
    components: tuple[Component, ...] = (),
) -> _T:
    from askback.cli.db import run_with_database
    from askback.runtime import Runtime, WebInbox
    from askback.settings import load_settings

    settings = load_settings(**(settings_given or {}))
    url = database or settings.database_url

    async def run() -> _T:
        if components:
            # An extension keeping its rows in the runtime's store (the inbox's people's sign-in): one store for both.
            from askback.runtime.parked_calls import MIGRATIONS
            from askback.store import Store

            store = await Store.open(url, components=(MIGRATIONS, *components))
            runtime = Runtime(store, settings=settings, renderers=renderers or (WebInbox(),), timeout=timeout)
        else:
            runtime = await Runtime.open(url, settings=settings, renderers=renderers or (WebInbox(),), timeout=timeout)
        runtime.headers = headers
        try:
            return await work(runtime)
        finally:
            await runtime.close()

    result: _T = run_with_database(url, run)
    return result


def print_outcome(outcome: Outcome, as_json: bool) -> int:
    """Print a call's outcome; the exit status: 0 completed, 1 a tool error, 3 parked or claimed."""
    from askback.runtime import Claimed, Completed

    if isinstance(outcome, Completed):
        if as_json:
            typer.echo(json.dumps({"call_id": outcome.call_id, "status": "completed", "result": outcome.result}))
        else:
            typer.echo(for_terminal(outcome.text, lines=True))
        return ExitStatus.FAILED if outcome.is_error else ExitStatus.OK
    if isinstance(outcome, Claimed):
        if as_json:
            typer.echo(json.dumps({"call_id": outcome.call_id, "status": "claimed", "round": outcome.round}))
        else:
            typer.echo(f"{outcome.call_id}: another process is resuming round {outcome.round}; nothing sent from here")
        return ExitStatus.WAITING
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "call_id": outcome.call_id,
                    "status": "parked",
                    "round": outcome.round,
                    "deadline": outcome.deadline,
                    "missing": list(outcome.missing),
                    "questions": [question_json(q) for q in outcome.questions],
                }
            )
        )
    else:
        keys = [shorten(key, 60, one_line=False) for key in outcome.missing[:QUESTIONS_LISTED]]
        more = len(outcome.missing) - len(keys)
        waiting = ", ".join(keys) + (f" and {more} more" if more > 0 else "") or "nothing (resume it)"
        typer.echo(f"{outcome.call_id}: parked on round {outcome.round}, waiting for {for_terminal(waiting)}")
        typer.echo(
            f"  answer with `askback inbox answer {outcome.call_id}`; it is cancelled at {when(outcome.deadline)}"
        )
    return ExitStatus.WAITING


def question_json(q: ParkedQuestion) -> dict[str, Any]:
    found: dict[str, Any] = {"call_id": q.call_id, "round": q.round, "key": q.key, "mode": q.mode, "message": q.message}
    if q.origin is not None:
        found["server"] = q.origin.server
        found["server_name"] = q.origin.server_name
    if q.problem is not None:
        found["problem"] = q.problem
    if q.mode == "form":
        found["schema"] = q.schema
    if q.mode == "url":
        found["url"] = q.url
        found["host"] = q.host
    return found


def terminal_renderer(modes: frozenset[Mode] | None = None) -> TerminalRenderer:
    from askback.runtime.terminal import TerminalRenderer
    from askback.settings import load_settings

    if modes is None:
        return TerminalRenderer(development=load_settings().development)
    return TerminalRenderer(development=load_settings().development, modes=modes)


def asked_by(q: ParkedQuestion, limit: int) -> str:
    """Which server asks `q` and for which call, on one line, safe to print."""
    origin = q.origin
    if origin is None:
        return "asked by a server this runtime did not record"
    name = f' (it calls itself "{for_terminal(shorten(origin.server_name, 60))}")' if origin.server_name else ""
    return f"asked by the server at {for_terminal(origin.host)}{name}, for the {for_terminal(origin.call(limit))}"
