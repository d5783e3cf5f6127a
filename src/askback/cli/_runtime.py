"""What `askback inbox` and `askback call` share: their common options, opening the runtime for one command, and
printing a call's outcome and a question (as text through `for_terminal`, or as JSON).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from askback.cli.output import ExitStatus
from askback.terminal_text import for_terminal, shorten

if TYPE_CHECKING:
    from askback.runtime import ParkedQuestion, Runtime
    from askback.runtime.calls import Outcome
    from askback.runtime.questions import Mode
    from askback.runtime.renderers import Renderer
    from askback.runtime.terminal import TerminalRenderer

__all__ = [
    "AS_JSON",
    "DATABASE",
    "DEFAULT_TIMEOUT",
    "QUESTIONS_LISTED",
    "TIMEOUT",
    "print_outcome",
    "question_json",
    "terminal_renderer",
    "when",
    "with_runtime",
]

_T = TypeVar("_T")

DATABASE = typer.Option("--database", help="The runtime's database URL (default: ASKBACK_DATABASE_URL).")
AS_JSON = typer.Option("--json", help="Print JSON.")
QUESTIONS_LISTED = 20
DEFAULT_TIMEOUT = 30.0
TIMEOUT = typer.Option(
    "--timeout",
    min=0.001,
    help="Seconds to wait for the server's answer to a round; a parked call stays parked when it runs out.",
)


def when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def with_runtime(
    database: str | None,
    work: Callable[[Runtime], Awaitable[_T]],
    *,
    renderers: tuple[Renderer, ...] = (),
    timeout: float = DEFAULT_TIMEOUT,
    settings_given: Mapping[str, Any] | None = None,
) -> _T:
    from askback.cli.db import run_with_database
    from askback.runtime import Runtime, WebInbox
    from askback.settings import load_settings

    settings = load_settings(**(settings_given or {}))
    url = database or settings.database_url

    async def run() -> _T:
        runtime = await Runtime.open(url, settings=settings, renderers=renderers or (WebInbox(),), timeout=timeout)
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
        keys = [shorten(key, 60) for key in outcome.missing[:QUESTIONS_LISTED]]
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
