"""`askback inbox list|show|answer|decline|cancel|resume|serve` and `askback call`: the agent runtime's parked
calls from the command line.

A parked call waits in the runtime's store (`--database`, default ASKBACK_DATABASE_URL) until its questions are
answered here, in the web inbox (`askback inbox serve`), or by the runtime's own code, then `resume` sends the round
back to the server. `askback call` runs one call to completion at the terminal, answering through the terminal
prompt (`--park` only parks it). `--json` prints one JSON document.

Everything a server wrote (messages, keys, its name, results, errors) is printed through `for_terminal`, so that
it cannot drive the terminal; lists shorten long text (`show` and `--json` have it whole). Each question says
which server asks (the host reached, the name it gives itself) and for which call. Exit statuses are the command
line's one scheme (`askback.cli.output.ExitStatus`): 0 done, 1 the tool reported an error, 2 a usage error, 3 the
call waits (parked), 4 no such call, 5 the call could not go on, 70 a crash, 130 interrupted.

What `list` and `show` print is in `_inbox_text`; `serve` is in `_inbox_serve`, with who may open its pages in
`_inbox_people` and the webhooks it takes in `_inbox_webhooks`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from askback.cli._inbox_serve import inbox_serve
from askback.cli._inbox_text import print_call, print_inbox
from askback.cli._runtime import (
    AS_JSON,
    DATABASE,
    DEFAULT_TIMEOUT,
    TIMEOUT,
    TOKEN,
    TOKEN_SERVER,
    bearer,
    print_outcome,
    terminal_renderer,
    with_runtime,
)
from askback.cli.call import call
from askback.cli.output import UsageError, reports_errors
from askback.core.terminal_text import for_terminal, shorten
from askback.errors import ResumeDueError

if TYPE_CHECKING:
    from askback.runtime import Runtime
    from askback.runtime.calls import Outcome, Pending

__all__ = ["register"]

inbox_app = typer.Typer(
    help="Parked calls of the agent runtime: list, answer, resume, and the web inbox.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_USER = typer.Option("--user", help="Who answers (recorded with each answer).")


@inbox_app.command("list")
@reports_errors
def inbox_list(
    user: Annotated[str | None, typer.Option("--user", help="Only this person's questions.")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run's calls.")] = None,
    database: Annotated[str | None, DATABASE] = None,
    as_json: Annotated[bool, AS_JSON] = False,
) -> None:
    """List the unanswered questions of parked calls, call by call: who answers, which server asks (its host and
    the name it gives itself) for which tool, then each question's key, mode and message (shortened: `inbox show`
    and --json have them whole)."""

    async def work(runtime: Runtime) -> list[Pending]:
        return await runtime.inbox(principal=user, run_id=run)

    found = with_runtime(database, work)
    print_inbox(found, as_json)


@inbox_app.command("show")
@reports_errors
def inbox_show(
    call_id: Annotated[str, typer.Argument(help="The call id (from `askback inbox list`).")],
    database: Annotated[str | None, DATABASE] = None,
    as_json: Annotated[bool, AS_JSON] = False,
) -> None:
    """Show one call: what was called, its status, its pending questions and every round so far."""

    async def work(runtime: Runtime) -> tuple[Any, dict[str, Any], list[dict[str, Any]]]:
        record = await runtime.calls.get(call_id)
        answers = await runtime.calls.answers(call_id, record.round)
        return record, {k: a.wire() for k, a in answers.items()}, await runtime.calls.rounds(call_id)

    record, answers, rounds = with_runtime(database, work)
    print_call(record, answers, rounds, as_json)


def _answer(
    call_id: str,
    key: str | None,
    action: str,
    content: str | None,
    user: str | None,
    database: str | None,
    resume: bool,
    timeout: float = DEFAULT_TIMEOUT,
    accept: bool = False,
    token: tuple[str | None, str | None] = (None, None),
) -> None:
    from askback.runtime import Answer, WebInbox

    headers = bearer(*token, one_server=True)

    if accept and content is not None:
        raise UsageError("give --accept (a URL question) or --json (a form's values), not both")
    parsed: Any = None
    if content is not None:
        try:
            parsed = json.loads(content)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--json is not JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(parsed, dict):
            raise UsageError('--json must be an object of field values, e.g. {"confirm": true}')
    # Accepting without --json or --accept asks at the terminal, this round and (with --resume) every round after it.
    at_terminal = action == "accept" and parsed is None and not accept

    async def work(runtime: Runtime) -> int:
        record = await runtime.calls.get(call_id)
        answered = await runtime.calls.answers(call_id, record.round)
        questions = [q for q in record.questions if (key is None or q.key == key) and q.key not in answered]
        if not questions:
            raise UsageError(
                f"call {call_id} has no unanswered question{f' {key!r}' if key else ''} in round {record.round} "
                f"(it is {record.status}; `askback inbox show {call_id}` says more)"
            )
        forms = [q for q in questions if q.mode != "url"]
        if accept and forms:
            raise UsageError(
                f"--accept answers a URL question, and "
                f"{for_terminal(shorten(forms[0].key, 60, one_line=False))!r} of call {call_id} "
                "is not one: give its values with --json, or answer it at the prompt (no --accept)"
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
        return print_outcome(await runtime.resume(call_id), False)

    renderers = (terminal_renderer(),) if at_terminal else (WebInbox(),)
    code = with_runtime(database, work, renderers=renderers, timeout=timeout, headers=headers)
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
    accept: Annotated[
        bool, typer.Option("--accept", help="Accept a URL question (you have finished at its link).")
    ] = False,
    resume: Annotated[bool, _RESUME] = False,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    timeout: Annotated[float, TIMEOUT] = DEFAULT_TIMEOUT,
    database: Annotated[str | None, DATABASE] = None,
) -> None:
    """Accept a call's questions: a form with --json, a URL question with --accept, or either at the terminal
    prompt (forms from their schema, a review before sending, y or n alone for a yes/no question, :d to decline, :c to
    cancel; a URL question shows its host and is accepted once you are done)."""
    _answer(
        call_id, key, "accept", content, user, database, resume, timeout, accept=accept, token=(token, token_server)
    )


@inbox_app.command("decline")
@reports_errors
def inbox_decline(
    call_id: Annotated[str, typer.Argument(help="The call id.")],
    key: Annotated[str | None, _KEY] = None,
    user: Annotated[str | None, _USER] = None,
    resume: Annotated[bool, _RESUME] = False,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    timeout: Annotated[float, TIMEOUT] = DEFAULT_TIMEOUT,
    database: Annotated[str | None, DATABASE] = None,
) -> None:
    """Decline a call's question (or every unanswered one of its round)."""
    _answer(call_id, key, "decline", None, user, database, resume, timeout, token=(token, token_server))


@inbox_app.command("cancel")
@reports_errors
def inbox_cancel(
    call_id: Annotated[str, typer.Argument(help="The call id.")],
    key: Annotated[str | None, _KEY] = None,
    user: Annotated[str | None, _USER] = None,
    resume: Annotated[bool, _RESUME] = False,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    timeout: Annotated[float, TIMEOUT] = DEFAULT_TIMEOUT,
    database: Annotated[str | None, DATABASE] = None,
) -> None:
    """Cancel (dismiss) a call's question (or every unanswered one of its round)."""
    _answer(call_id, key, "cancel", None, user, database, resume, timeout, token=(token, token_server))


@inbox_app.command("resume")
@reports_errors
def inbox_resume(
    call_id: Annotated[str | None, typer.Argument(help="The call id (or --due).")] = None,
    due: Annotated[
        bool, typer.Option("--due", help="Resume every call of the store that can go now, everyone's.")
    ] = False,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    timeout: Annotated[float, TIMEOUT] = DEFAULT_TIMEOUT,
    database: Annotated[str | None, DATABASE] = None,
    as_json: Annotated[bool, AS_JSON] = False,
) -> None:
    """Send a parked round back to its server once its questions are answered (or its deadline has passed:
    unanswered questions go as cancel). Exit status 0 completed, 3 still parked or resumed elsewhere, 1 tool error.
    With --due instead of a call id, every call of the store that can go now (in a shared store: everyone's); one
    that cannot go on does not stop the others, and ends the command with status 5 once they are done."""
    if call_id is None and not due:
        raise UsageError(
            "say which call to resume: `askback inbox resume CALL_ID`, or `--due` for every call of the store that "
            "can go now (in a shared store, everyone's)"
        )
    if call_id is not None and due:
        raise UsageError("give a call id or --due, not both")
    headers = bearer(token, token_server, one_server=call_id is not None)

    async def work(runtime: Runtime) -> list[Outcome]:
        if call_id is not None:
            return [await runtime.resume(call_id)]
        return await runtime.resume_due()

    try:
        outcomes = with_runtime(database, work, timeout=timeout, headers=headers)
    except ResumeDueError as exc:
        for outcome in exc.outcomes:  # what the calls that went on came to; then the error line, exit status 5
            print_outcome(outcome, as_json)
        raise
    if call_id is None and not outcomes:
        typer.echo("no call can be resumed now")
        return
    codes = [print_outcome(o, as_json) for o in outcomes]
    if call_id is not None and codes[0]:
        raise typer.Exit(codes[0])


inbox_app.command("serve")(reports_errors(inbox_serve))


def register(app: typer.Typer) -> None:
    app.command("call")(reports_errors(call))
    app.add_typer(inbox_app, name="inbox")
