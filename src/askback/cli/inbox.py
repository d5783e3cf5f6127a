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
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from askback.cli._inbox_people import checked_serve_options, inbox_people
from askback.cli._runtime import (
    AS_JSON,
    DATABASE,
    DEFAULT_TIMEOUT,
    QUESTIONS_LISTED,
    TIMEOUT,
    TOKEN,
    TOKEN_SERVER,
    asked_by,
    bearer,
    print_outcome,
    question_json,
    terminal_renderer,
    when,
    with_runtime,
)
from askback.cli.call import call
from askback.cli.output import UsageError, reports_errors
from askback.errors import ResumeDueError, UnsafeLinkError
from askback.terminal_text import for_terminal, shorten

if TYPE_CHECKING:
    from askback.runtime import ParkedQuestion, Runtime
    from askback.runtime.calls import Outcome, Pending
    from askback.runtime.questions import CheckedLink

__all__ = ["register"]

inbox_app = typer.Typer(
    help="Parked calls of the agent runtime: list, answer, resume, and the web inbox.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

_USER = typer.Option("--user", help="Who answers (recorded with each answer).")
# `inbox list` is a table: a long message, a call's arguments and a round of many questions are shortened there.
_MESSAGE_LISTED = 120
_CALL_LISTED = 100
_CALL_SHOWN = 1000


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
    if as_json:
        typer.echo(
            json.dumps(
                [
                    {**question_json(p.question), "principal": p.principal, "target": p.target, "deadline": p.deadline}
                    for p in found
                ]
            )
        )
        return
    if not found:
        typer.echo("no questions waiting")
        return
    from askback.settings import load_settings

    development = load_settings().development
    calls: dict[str, list[Pending]] = {}
    for p in found:
        calls.setdefault(p.question.call_id, []).append(p)
    for call_id, pending in calls.items():
        first = pending[0]
        typer.echo(
            f"{call_id}  round {first.question.round}  for {for_terminal(first.principal)}  answer by "
            f"{when(first.deadline)}"
        )
        typer.echo(f"  {asked_by(first.question, _CALL_LISTED)}")
        for p in pending[:QUESTIONS_LISTED]:
            q = p.question
            where = f"  -> {_listed_host(q, development)}" if q.mode == "url" else ""
            if q.problem is not None:
                where = "  (cannot be shown: decline or cancel it)"
            message = for_terminal(shorten(q.message, _MESSAGE_LISTED))
            kind = for_terminal(shorten(q.mode or q.method, 40))
            typer.echo(f"  {for_terminal(shorten(q.key, 40, one_line=False))} ({kind}): {message}{where}")
        if len(pending) > QUESTIONS_LISTED:
            typer.echo(f"  … and {len(pending) - QUESTIONS_LISTED} more: `askback inbox show {call_id}` lists them all")


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
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "call_id": record.id,
                    "run_id": record.run_id,
                    "principal": record.principal,
                    "server": record.server,
                    "server_name": record.server_name,
                    "method": record.method,
                    "target": record.target,
                    "arguments": record.arguments,
                    "status": record.status,
                    "round": record.round,
                    "deadline": record.deadline,
                    "questions": [question_json(q) for q in record.questions],
                    "answers": answers,
                    "result": record.result,
                    "error": record.error,
                    "rounds": [{k: v for k, v in r.items() if k != "asked"} for r in rounds],
                }
            )
        )
        return
    origin = record.origin
    name = f' (it calls itself "{for_terminal(origin.server_name)}")' if origin.server_name else ""
    typer.echo(f"{record.id}: the {for_terminal(origin.call(_CALL_SHOWN))}, for {for_terminal(record.principal)}")
    typer.echo(f"  server {for_terminal(record.server)}{name}")
    typer.echo(f"status {record.status}, round {record.round}; deadline {when(record.deadline)}")
    for q in record.questions:
        state = answers.get(q.key, {}).get("action", "waiting")
        typer.echo(f"  {for_terminal(q.key)} ({q.mode}): {for_terminal(q.message, lines=True)}  [{state}]")
        if q.problem is not None:
            typer.echo(
                f"    cannot be shown: {for_terminal(q.problem)}; decline or cancel it "
                f"(askback inbox decline {record.id} KEY)"
            )
        elif q.mode == "url":
            typer.echo(f"    {_link_line(q)}")
    if record.error:
        typer.echo(f"error: {for_terminal(record.error, lines=True)}")
    for r in rounds:
        typer.echo(f"  round {r['round']}: asked {when(r['asked_at'])}, answered {when(r['sent_at'])}")


def _checked_link(q: ParkedQuestion, development: bool) -> CheckedLink | UnsafeLinkError:
    """A URL question's link as a browser reads it (`checked_link`, as every renderer reads it), or why it is not shown
    as a link."""
    from askback.runtime.questions import checked_link

    try:
        return checked_link(q.url or "", development=development)
    except UnsafeLinkError as exc:
        return exc


def _listed_host(q: ParkedQuestion, development: bool) -> str:
    """The host a URL question's link reaches, for `inbox list`: its ASCII form beside an internationalised one, and
    a link not shown as one said to be so."""
    link = _checked_link(q, development)
    if isinstance(link, UnsafeLinkError):
        return f"{for_terminal(q.host or 'no host')}, not shown as a link (`askback inbox show {q.call_id}` says why)"
    return for_terminal(link.shown)


def _link_line(q: ParkedQuestion) -> str:
    """A URL question's link as a browser reads it, or why it is not shown as a link."""
    from askback.settings import load_settings

    link = _checked_link(q, load_settings().development)
    if isinstance(link, UnsafeLinkError):
        return f"not shown as a link: {for_terminal(str(link))}"
    return f"link to {for_terminal(link.shown)}: {for_terminal(link.href)}"


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
    prompt (forms from their schema, a review before sending, :d to decline, :c to cancel; a URL question shows
    its host and is accepted once you are done)."""
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


@inbox_app.command("serve")
@reports_errors
def inbox_serve(
    database: Annotated[str | None, DATABASE] = None,
    host: Annotated[str, typer.Option("--host", help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to listen on.")] = 8765,
    user: Annotated[
        str | None, typer.Option("--user", help="A one-person inbox: everyone who reaches it is NAME.")
    ] = None,
    user_header: Annotated[
        str | None,
        typer.Option(
            "--user-header",
            help=(
                "Behind a signing-in proxy: the request header naming the person. The inbox trusts that header as it "
                "comes, so only the proxy may reach the inbox, and the proxy must set (or remove) it on every request."
            ),
        ),
    ] = None,
    auth_issuer: Annotated[
        str | None,
        typer.Option(
            "--auth-issuer",
            help=(
                "People sign in with OpenID Connect at this issuer (with --auth-client-id; the client secret from "
                "ASKBACK_SIGNIN_CLIENT_SECRET, the session secret from ASKBACK_SESSION_SECRET, the public URL from "
                "ASKBACK_PUBLIC_URL, else http://HOST:PORT). Register {public URL}/auth/callback at the issuer."
            ),
        ),
    ] = None,
    auth_client_id: Annotated[
        str | None, typer.Option("--auth-client-id", help="The inbox's client id at the --auth-issuer.")
    ] = None,
    behind_proxy: Annotated[
        bool,
        typer.Option(
            "--behind-signing-in-proxy",
            help=(
                "With --user or --user-header on an address other machines reach (--host 0.0.0.0): only a proxy that "
                "signs people in reaches the inbox. Without it, such an inbox is refused."
            ),
        ),
    ] = False,
    resume: Annotated[
        bool, typer.Option("--resume/--no-resume", help="Resume a call once its round is answered.")
    ] = True,
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    webhook_secret_env: Annotated[
        list[str] | None,
        typer.Option(
            "--webhook-secret-env",
            metavar="URL=VAR",
            help=(
                "Also take the signed webhooks of the server at URL (its MCP URL, as calls are made to it) at "
                "/webhooks/askback: a call to it waiting for an account looks again when account.connected arrives. "
                "VAR holds the whsec_ secrets of that server's endpoint (comma-separated to rotate). Again for "
                "another server, with its own secrets."
            ),
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help=(
                "A further host name to answer (again for more), beside the loopback names, ASKBACK_PUBLIC_URL's host "
                "and ASKBACK_ALLOWED_HOSTS: the name a proxy forwards in Host. Other hosts are refused (421)."
            ),
            show_default=False,
        ),
    ] = None,
) -> None:
    """Serve the web inbox: each person's pending questions, a form page per question, URL questions shown with
    their host and an explicit link (never fetched by the runtime), decline and cancel buttons."""
    import uvicorn

    from askback.cli import logs

    hooks, hosts = checked_serve_options(
        host, port, (user, user_header, auth_issuer, auth_client_id), behind_proxy, webhook_secret_env, allowed_host
    )
    headers = bearer(token, token_server, one_server=False)
    served_at = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
    people = inbox_people(user, user_header, auth_issuer, auth_client_id, served_at)
    sign_in = people.sign_in

    # What a server wrote reaches the log (a refusal's text): escaped, one record a line, never a traceback's bytes raw.
    logs.configure("warning", "auto")

    async def work(runtime: Runtime) -> None:
        from starlette.routing import Route, Router

        from askback.extension import ExtensionContext
        from askback.runtime.inbox import inbox_app as build
        from askback.runtime.webhooks import RECEIVER_PATH

        if sign_in is not None:
            # Sessions live in the runtime's store, so signing out ends them for every inbox sharing it.
            await sign_in.start(ExtensionContext(store=runtime.store, settings=runtime.settings, clock=runtime.clock))
        app: Any = build(runtime, principal=people.principal, resume=resume, hosts=hosts)
        if hooks:
            receiver = hooks.receiver(runtime, hosts)
            # The inbox answers every other path, a line break in it too (a `Mount("/")` would leave that one bare).
            app = Router(routes=[Route(RECEIVER_PATH, receiver)], default=app, redirect_slashes=False)
        config = uvicorn.Config(app, host=host, port=port, log_level="warning", proxy_headers=False)
        if people.notice is not None:
            typer.echo(people.notice, err=True)
        typer.echo(f"askback inbox: {served_at}/", err=True)
        try:
            await uvicorn.Server(config).serve()
        finally:
            if sign_in is not None:
                await sign_in.close()

    with_runtime(database, work, headers=headers, components=() if sign_in is None else tuple(sign_in.migrations))


def register(app: typer.Typer) -> None:
    app.command("call")(reports_errors(call))
    app.add_typer(inbox_app, name="inbox")
