"""`askback inbox list|show|answer|decline|cancel|resume|serve` and `askback call`: the agent runtime's parked
calls from the command line.

A parked call waits in the runtime's store (`--database`, default ASKBACK_DATABASE_URL) until its questions are
answered here, in the web inbox (`askback inbox serve`), or by the runtime's own code, then `resume` sends the round
back to the server. `askback call` runs one call to completion at the terminal, answering through the terminal
prompt. `--json` prints one JSON document.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from askback.cli.output import UsageError, print_error, reports_errors

if TYPE_CHECKING:
    from askback.runtime import Runtime
    from askback.runtime.calls import Outcome, Pending
    from askback.runtime.renderers import Renderer

__all__ = ["register"]

_T = TypeVar("_T")

inbox_app = typer.Typer(
    help="Parked calls of the agent runtime: list, answer, resume, and the web inbox.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_DATABASE = typer.Option("--database", help="The runtime's database URL (default: ASKBACK_DATABASE_URL).")
_JSON = typer.Option("--json", help="Print JSON.")
_USER = typer.Option("--user", help="Who answers (recorded with each answer).")


def _when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _with_runtime(
    database: str | None, work: Callable[[Runtime], Awaitable[_T]], *, renderers: tuple[Renderer, ...] = ()
) -> _T:
    from askback.cli.db import run_with_database
    from askback.runtime import Runtime, WebInbox
    from askback.settings import load_settings

    settings = load_settings()
    url = database or settings.database_url

    async def run() -> _T:
        runtime = await Runtime.open(url, settings=settings, renderers=renderers or (WebInbox(),))
        try:
            return await work(runtime)
        finally:
            await runtime.close()

    result: _T = run_with_database(url, run)
    return result


def _outcome(outcome: Outcome, as_json: bool) -> int:
    """Print a call's outcome; the exit status: 0 completed, 3 parked or claimed, 1 a tool error."""
    from askback.runtime import Claimed, Completed

    if isinstance(outcome, Completed):
        if as_json:
            typer.echo(json.dumps({"call_id": outcome.call_id, "status": "completed", "result": outcome.result}))
        else:
            typer.echo(outcome.text)
        return 1 if outcome.is_error else 0
    if isinstance(outcome, Claimed):
        if as_json:
            typer.echo(json.dumps({"call_id": outcome.call_id, "status": "claimed", "round": outcome.round}))
        else:
            typer.echo(f"{outcome.call_id}: another process is resuming round {outcome.round}; nothing sent from here")
        return 3
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "call_id": outcome.call_id,
                    "status": "parked",
                    "round": outcome.round,
                    "deadline": outcome.deadline,
                    "missing": list(outcome.missing),
                    "questions": [_question(q) for q in outcome.questions],
                }
            )
        )
    else:
        waiting = ", ".join(outcome.missing) or "nothing (resume it)"
        typer.echo(f"{outcome.call_id}: parked on round {outcome.round}, waiting for {waiting}")
        typer.echo(
            f"  answer with `askback inbox answer {outcome.call_id}`; it is cancelled at {_when(outcome.deadline)}"
        )
    return 3


def _question(q: Any) -> dict[str, Any]:
    found = {"call_id": q.call_id, "round": q.round, "key": q.key, "mode": q.mode, "message": q.message}
    if q.mode == "form":
        found["schema"] = q.schema
    if q.mode == "url":
        found["url"] = q.url
        found["host"] = q.host
    return found


@inbox_app.command("list")
@reports_errors
def inbox_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this person's questions.")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's calls.")] = None,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """List the unanswered questions of parked calls: call, round, key, who answers, mode, message."""

    async def work(runtime: Runtime) -> list[Pending]:
        return await runtime.inbox(principal=user, run_id=run)

    found = _with_runtime(database, work)
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {**_question(p.question), "principal": p.principal, "target": p.target, "deadline": p.deadline}
                    for p in found
                ]
            )
        )
        return
    if not found:
        typer.echo("no questions waiting")
        return
    for p in found:
        q = p.question
        where = f"  -> {q.host}" if q.mode == "url" else ""
        typer.echo(f"{q.call_id}  round {q.round}  {q.key}  {p.principal}  {p.target}  {q.mode}  {q.message}{where}")


@inbox_app.command("show")
@reports_errors
def inbox_show(
    call_id: Annotated[str, typer.Argument(help="The call id (from `askback inbox list`).")],
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Show one call: what was called, its status, its pending questions and every round so far."""

    async def work(runtime: Runtime) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
        record = await runtime.calls.get(call_id)
        answers = await runtime.calls.answers(call_id, record.round)
        return record, {k: a.wire() for k, a in answers.items()}, await runtime.calls.rounds(call_id)

    record, answers, rounds = _with_runtime(database, work)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "call_id": record.id,
                    "run_id": record.run_id,
                    "principal": record.principal,
                    "server": record.server,
                    "method": record.method,
                    "target": record.target,
                    "arguments": record.arguments,
                    "status": record.status,
                    "round": record.round,
                    "deadline": record.deadline,
                    "questions": [_question(q) for q in record.questions],
                    "answers": answers,
                    "result": record.result,
                    "error": record.error,
                    "rounds": [{k: v for k, v in r.items() if k != "asked"} for r in rounds],
                }
            )
        )
        return
    typer.echo(f"{record.id}: {record.method} {record.target} on {record.server}, for {record.principal}")
    typer.echo(f"status {record.status}, round {record.round}; deadline {_when(record.deadline)}")
    for q in record.questions:
        state = answers.get(q.key, {}).get("action", "waiting")
        typer.echo(f"  {q.key} ({q.mode}): {q.message}  [{state}]")
        if q.mode == "url":
            typer.echo(f"    link to {q.host}: {q.url}")
    if record.error:
        typer.echo(f"error: {record.error}")
    for r in rounds:
        typer.echo(f"  round {r['round']}: asked {_when(r['asked_at'])}, answered {_when(r['sent_at'])}")


def _terminal() -> Renderer:
    from askback.runtime.terminal import TerminalRenderer
    from askback.settings import load_settings

    return TerminalRenderer(development=load_settings().development)


def _answer(
    call_id: str,
    key: str | None,
    action: str,
    content: str | None,
    user: str | None,
    database: str | None,
    resume: bool,
) -> None:
    from askback.runtime import Answer, WebInbox

    parsed: Any = None
    if content is not None:
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--json is not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(parsed, dict):
            raise UsageError('--json must be an object of field values, e.g. {"confirm": true}')
    # Accepting without --json asks at the terminal, this round and (with --resume) every round after it.
    at_terminal = action == "accept" and parsed is None

    async def work(runtime: Runtime) -> int:
        record = await runtime.calls.get(call_id)
        answered = await runtime.calls.answers(call_id, record.round)
        questions = [q for q in record.questions if (key is None or q.key == key) and q.key not in answered]
        if not questions:
            raise UsageError(
                f"call {call_id} has no unanswered question{f' {key!r}' if key else ''} in round {record.round} "
                f"(it is {record.status}; `askback inbox show {call_id}` says more)"
            )
        if at_terminal:
            waiting = await runtime.answer_here(call_id, by=user, keys=[q.key for q in questions])
        else:
            for q in questions:
                answer = Answer("accept", parsed) if action == "accept" else Answer(action)  # type: ignore[arg-type]
                waiting = await runtime.answer(call_id, q.key, answer, round_=q.round, by=user or record.principal)
        if not resume:
            typer.echo(f"{call_id}: answered; {waiting} question(s) of round {record.round} still waiting")
            return 0
        return _outcome(await runtime.resume(call_id), False)

    code = _with_runtime(database, work, renderers=(_terminal(),) if at_terminal else (WebInbox(),))
    if code:
        raise typer.Exit(code)


_KEY = typer.Argument(help="The question's key; all unanswered questions of the round when omitted.")
_RESUME = typer.Option("--resume", help="Resume the call afterwards (answering further rounds here too).")


@inbox_app.command("answer")
@reports_errors
def inbox_answer(
    call_id: Annotated[str, typer.Argument(help="The call id.")],
    key: Annotated[str | None, _KEY] = None,
    content: Annotated[
        str | None, typer.Option("--json", help="Accept with these field values (a JSON object).")
    ] = None,
    user: Annotated[str | None, _USER] = None,
    resume: Annotated[bool, _RESUME] = False,
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Accept a call's questions: with --json, or at the terminal prompt (forms from their schema, a review before
    sending, :d to decline, :c to cancel; a URL question shows its host and is accepted once you are done)."""
    _answer(call_id, key, "accept", content, user, database, resume)


@inbox_app.command("decline")
@reports_errors
def inbox_decline(
    call_id: Annotated[str, typer.Argument(help="The call id.")],
    key: Annotated[str | None, _KEY] = None,
    user: Annotated[str | None, _USER] = None,
    resume: Annotated[bool, _RESUME] = False,
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Decline a call's question (or every unanswered one of its round)."""
    _answer(call_id, key, "decline", None, user, database, resume)


@inbox_app.command("cancel")
@reports_errors
def inbox_cancel(
    call_id: Annotated[str, typer.Argument(help="The call id.")],
    key: Annotated[str | None, _KEY] = None,
    user: Annotated[str | None, _USER] = None,
    resume: Annotated[bool, _RESUME] = False,
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Cancel (dismiss) a call's question (or every unanswered one of its round)."""
    _answer(call_id, key, "cancel", None, user, database, resume)


@inbox_app.command("resume")
@reports_errors
def inbox_resume(
    call_id: Annotated[str | None, typer.Argument(help="The call id; every call that can go when omitted.")] = None,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Send a parked round back to its server once its questions are answered (or its deadline has passed:
    unanswered questions go as cancel). Exit status 0 completed, 3 still parked or resumed elsewhere, 1 tool error."""

    async def work(runtime: Runtime) -> list[Outcome]:
        if call_id is not None:
            return [await runtime.resume(call_id)]
        return await runtime.resume_due()

    outcomes = _with_runtime(database, work)
    if call_id is None and not outcomes:
        typer.echo("no call can be resumed now")
        return
    codes = [_outcome(o, as_json) for o in outcomes]
    if call_id is not None and codes[0]:
        raise typer.Exit(codes[0])


@inbox_app.command("serve")
@reports_errors
def inbox_serve(
    database: Annotated[str | None, _DATABASE] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    user: Annotated[
        str | None, typer.Option("--user", help="A one-person inbox: everyone who reaches it is NAME.")
    ] = None,
    user_header: Annotated[
        str | None,
        typer.Option("--user-header", help="Behind a signing-in proxy: the request header naming the person."),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Resume a call once its round is answered.")
    ] = True,
) -> None:
    """Serve the web inbox: each person's pending questions, a form page per question, URL questions shown with
    their host and an explicit link (never fetched by the runtime), decline and cancel buttons."""
    import uvicorn
    from starlette.requests import Request

    if (user is None) == (user_header is None):
        raise UsageError("say who answers: --user NAME (one person) or --user-header HEADER (behind a sign-in proxy)")
    if not 0 < port < 65536:
        raise UsageError(f"--port {port} is not a TCP port")

    def principal(request: Request) -> str | None:
        if user is not None:
            return user
        assert user_header is not None
        return request.headers.get(user_header) or None

    async def work(runtime: Runtime) -> None:
        from askback.runtime.inbox import inbox_app as build

        config = uvicorn.Config(
            build(runtime, principal=principal, resume=resume), host=host, port=port, log_level="warning"
        )
        typer.echo(f"askback inbox: http://{host}:{port}/", err=True)
        await uvicorn.Server(config).serve()

    _with_runtime(database, work)


def call(
    server: Annotated[str, typer.Argument(help="The MCP server's URL.")],
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    arguments: Annotated[str, typer.Option("--args", help="The tool's arguments, a JSON object.")] = "{}",
    user: Annotated[str, typer.Option("--user", help="Who answers (recorded with each answer).")] = "me",
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="ASKBACK_CALL_TOKEN", help="A bearer token for the server (never stored)."),
    ] = None,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Call a tool and answer its questions at the terminal, round after round, until it completes. The call is
    kept in the runtime's store meanwhile: if this command stops, `askback inbox` has it."""
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(args, dict):
        raise UsageError('--args must be a JSON object, e.g. {"service": "web"}')

    async def work(runtime: Runtime) -> int:
        if token is not None:
            runtime.headers = lambda _server: {"Authorization": f"Bearer {token}"}
        return _outcome(await runtime.call_tool(server, tool, args, principal=user), as_json)

    try:
        code = _with_runtime(database, work, renderers=(_terminal(),))
    except KeyboardInterrupt:
        print_error(f"interrupted: a call that asked waits in the store; `askback inbox list --user {user}` shows it")
        raise typer.Exit(130) from None
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("call")(reports_errors(call))
    app.add_typer(inbox_app, name="inbox")
