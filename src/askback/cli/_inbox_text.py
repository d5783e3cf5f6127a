"""What `askback inbox list` and `askback inbox show` print: a table of the questions waiting, call by call, and one
call whole; each as one JSON document with `--json`. Everything a server wrote goes through `for_terminal`, and a URL
question's link is shown as a browser reads it (`askback.runtime.questions.checked_link`), or said not to be shown."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import typer

from askback.cli._runtime import QUESTIONS_LISTED, asked_by, question_json, when
from askback.core.terminal_text import for_terminal, shorten
from askback.errors import UnsafeLinkError

if TYPE_CHECKING:
    from askback.runtime import ParkedQuestion
    from askback.runtime.calls import Pending
    from askback.runtime.questions import CheckedLink

__all__ = ["print_call", "print_inbox"]

# `inbox list` is a table: a long message, a call's arguments and a round of many questions are shortened there.
_MESSAGE_LISTED = 120
_CALL_LISTED = 100
_CALL_SHOWN = 1000
# `inbox show` prints a finished call's result, up to a screenful or two of it (`--json` has it whole).
_RESULT_SHOWN = 2000


def print_inbox(found: list[Pending], as_json: bool) -> None:
    """The unanswered questions `found`, call by call (`askback inbox list`)."""
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


def print_call(record: Any, answers: dict[str, Any], rounds: list[dict[str, Any]], as_json: bool) -> None:
    """One call (`askback inbox show`): what was called, its status, its pending questions with this round's
    `answers`, and every round so far."""
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
    if record.result is not None:
        typer.echo(_result_lines(record))
    if record.error:
        typer.echo(f"error: {for_terminal(record.error, lines=True)}")
    for r in rounds:
        typer.echo(f"  round {r['round']}: asked {when(r['asked_at'])}, answered {when(r['sent_at'])}")


def _result_lines(record: Any) -> str:
    """A finished call's result text, indented under its heading; cut at `_RESULT_SHOWN` characters, saying so."""
    from askback.runtime import Completed

    done = Completed(record.id, record.result, rounds=record.round)
    text = done.text or "(no text)"
    heading = "result (the tool reported an error):" if done.is_error else "result:"
    shown = for_terminal(shorten(text, _RESULT_SHOWN, one_line=False), lines=True)
    body = "\n".join(f"  {line}" for line in shown.split("\n"))
    if len(text) > _RESULT_SHOWN:
        body += (
            f"\n  (cut: the first {_RESULT_SHOWN - 1} of its {len(text)} characters; "
            f"`askback inbox show {record.id} --json` has it whole)"
        )
    return f"{heading}\n{body}"


def _link_or_refusal(q: ParkedQuestion, development: bool) -> CheckedLink | UnsafeLinkError:
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
    link = _link_or_refusal(q, development)
    if isinstance(link, UnsafeLinkError):
        return f"{for_terminal(q.host or 'no host')}, not shown as a link (`askback inbox show {q.call_id}` says why)"
    return for_terminal(link.shown)


def _link_line(q: ParkedQuestion) -> str:
    """A URL question's link as a browser reads it, or why it is not shown as a link."""
    from askback.settings import load_settings

    link = _link_or_refusal(q, load_settings().development)
    if isinstance(link, UnsafeLinkError):
        return f"not shown as a link: {for_terminal(str(link))}"
    return f"link to {for_terminal(link.shown)}: {for_terminal(link.href)}"
