"""The web inbox: where a person answers the questions their agent's parked calls wait on (`askback inbox serve`).

`inbox_app(runtime, principal=...)` is a small Starlette app over a `Runtime`'s store. `principal(request)` says who
opens a page (the one name of `--user`, or a header set by a signing-in proxy); a person sees and answers only the
questions of their own calls, and another person's question is answered 404, as if it did not exist.

- `GET /`: the person's pending questions (message, mode, the deadline, and who asks: the server's host and the
  name it gives itself, the tool and its arguments);
- `GET /q/{call_id}/{round}/{key}`: one question, with who asks: a form built from its schema (`forms.fields`), or a
  URL question's link shown with the host a browser reaches (`questions.check_link`) for the person to open
  themselves, the "Open" link being the address that was checked (the runtime never fetches it), with "Decline"
  and "Cancel" beside the answer;
- `POST /q/{call_id}/{round}/{key}`: the answer, checked against the form (400, the form again with the errors and
  what was typed) and recorded with `Runtime.answer`; with `resume=True`, the last answer of a round sends the round
  back to its server (`Runtime.resume`), and the call's page shows what came of it;
- `GET /calls/{call_id}`: a call's outcome: its result, the server's next questions, or why it failed.

The pages are plain server-rendered HTML: no JavaScript, no external resource, every value escaped. Every POST
carries a per-browser token (a random value in an HttpOnly, SameSite=Strict cookie, repeated in a hidden field),
and one sent from another origin is refused (403). Every response carries a strict Content-Security-Policy,
`no-store`, `no-referrer` and `nosniff`.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import logging
import re
import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.convertors import Convertor, register_url_convertor
from starlette.datastructures import FormData, MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from askback.asgi import CappedBody
from askback.errors import CallError, CallStateError, InvalidAnswerError, UnknownCallError, UnsafeLinkError
from askback.runtime.calls import Claimed, Completed, Runtime
from askback.runtime.forms import Field, check_field, fields, parse
from askback.runtime.questions import Action, Answer, Link, Origin, Question
from askback.runtime.store import CallRecord
from askback.terminal_text import for_terminal, shorten

__all__ = ["inbox_app"]

log = logging.getLogger("askback.runtime.inbox")

# A form of a few dozen fields is a few kilobytes.
_MAX_FORM_BYTES = 64 * 1024
_CSRF_COOKIE = "askback_inbox_csrf"
_CSRF_FIELD = "csrf"
_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")
# Form fields are sent as `f.<name>`, so a schema field can never be taken for `action` or the token.
_PREFIX = "f."
# A choice of up to this many values is shown as radio buttons, a longer one as a select.
_RADIOS = 5
_ACTIONS: tuple[Action, ...] = ("accept", "decline", "cancel")
# The list shows the start of a long message (a question's page shows it whole), and of a call's arguments.
_MESSAGE_LISTED = 300
_CALL_SHOWN = 300

_STYLE = (
    "body{font-family:system-ui,sans-serif;line-height:1.5;margin:0;color:#1a1a1a;background:#fafafa}"
    "main{max-width:42rem;margin:2rem auto;padding:0 1rem}"
    "h1{font-size:1.5rem}h2{font-size:1.15rem;margin:0 0 .25rem}"
    ".questions{list-style:none;padding:0}"
    ".questions li{border:1px solid #555;border-radius:4px;padding:.75rem 1rem;margin:1rem 0;background:#fff}"
    ".meta,.hint{color:#444;margin:.25rem 0}"
    ".field{margin:1.25rem 0;border:0;padding:0}"
    "label,legend{font-weight:600}label{display:block;margin-bottom:.25rem}"
    ".choice label,.check label{display:inline;font-weight:400;margin-left:.35rem}"
    ".check label{font-weight:600}"
    "input[type=text],input[type=email],input[type=url],input[type=date],input[type=number],select"
    "{font:inherit;width:100%;box-sizing:border-box;padding:.5rem;border:1px solid #555;border-radius:4px;"
    "background:#fff}"
    "input[aria-invalid=true],select[aria-invalid=true]{border:3px solid #b00020}"
    ".message{font-size:1.15rem;white-space:pre-line}"
    ".error{font-weight:700;color:#b00020;border-left:4px solid #b00020;padding-left:.5rem;margin:.25rem 0}"
    ".summary{border:3px solid #b00020;padding:.5rem 1rem;margin:1rem 0;background:#fff}"
    ".status{border:3px solid #1a7f37;padding:.5rem 1rem;margin:1rem 0;background:#fff}"
    ".host{font-size:1.3rem;font-weight:700;word-break:break-all}"
    ".open{display:inline-block;font-size:1.1rem;font-weight:700;padding:.5rem 1rem;border:2px solid currentColor;"
    "border-radius:4px}"
    "code{word-break:break-all}"
    "pre{white-space:pre-wrap;background:#fff;border:1px solid #555;padding:.75rem}"
    ".actions{margin-top:1.5rem;display:flex;flex-wrap:wrap;gap:.75rem}"
    "button{font:inherit;padding:.5rem 1.25rem;border:2px solid #1a1a1a;border-radius:4px;background:#fff;"
    "color:#1a1a1a;cursor:pointer}"
    "button.primary{background:#1a1a1a;color:#fff}"
    ".req{font-weight:400}"
    ":focus-visible{outline:3px solid #1558d6;outline-offset:2px}"
)
_STYLE_HASH = base64.b64encode(hashlib.sha256(_STYLE.encode()).digest()).decode()

_HEADERS: Mapping[str, str] = {
    "Content-Security-Policy": (
        f"default-src 'none'; style-src 'sha256-{_STYLE_HASH}'; form-action 'self'; frame-ancestors 'none'; "
        "base-uri 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}

_HELD = "a 2025-11-25 server (held in this process's memory)"

_DONE = {
    "accept": "Your answer is recorded.",
    "decline": "You declined the question.",
    "cancel": "You cancelled the question.",
}


# --- what a page shows (no I/O) -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Asked:
    """A pending question of the person, with what the page says about its call. A URL question has its `link` (as
    a browser reads it: the address to hand it and the host it reaches), or why the link is `unsafe` to show as one."""

    question: Question
    asker: str
    deadline: float | None
    link: Link | None = None
    unsafe: str | None = None

    @property
    def host(self) -> str | None:
        """The host to show beside the link (an internationalised one with its ASCII form)."""
        return None if self.link is None else self.link.shown


Values = dict[str, str | list[str] | bool]
"""What a form shows in each field, by field name: text, the checked choices, or a checkbox's state."""


def _when(at: float | None) -> str:
    if at is None:
        return "no deadline"
    moment = dt.datetime.fromtimestamp(at, dt.UTC)
    return f'<time datetime="{moment.isoformat()}">{moment.strftime("%Y-%m-%d %H:%M UTC")}</time>'


def _asker(method: str, target: str) -> str:
    kind = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}.get(method, "call")
    return f"the {kind} {for_terminal(shorten(target, 100))}"


def _origin(origin: Origin | None) -> str:
    """Which server asks (the host the runtime reached; the name it gives itself, which is only its claim) and the
    call the question belongs to, as a paragraph. Bounded in length, and with invisible and direction-changing
    characters made visible, as on a terminal: the name and the arguments are the server's and the model's words."""
    if origin is None:
        return ""
    name = (
        f' (it calls itself <q class="name">{escape(for_terminal(shorten(origin.server_name, 80)))}</q>)'
        if origin.server_name
        else ""
    )
    return (
        f'<p class="meta origin">Asked by the server at <strong class="server">{escape(for_terminal(origin.host))}'
        f'</strong>{name}, for the <code class="call">{escape(for_terminal(origin.call(_CALL_SHOWN)))}</code>.</p>'
    )


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)} · askback inbox</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n<main>\n"
        f"{body}\n</main>\n</body>\n</html>\n"
    )


def _p(text: str, cls: str | None = None) -> str:
    return f'<p class="{cls}">{escape(text)}</p>' if cls else f"<p>{escape(text)}</p>"


def _back(base: str) -> str:
    return f'<p><a href="{escape(base)}/">Back to your questions</a></p>'


def _question_path(base: str, q: Question) -> str:
    return f"{base}/q/{quote(q.call_id, safe='')}/{q.round}/{quote(q.key, safe='')}"


def _call_path(base: str, call_id: str) -> str:
    return f"{base}/calls/{quote(call_id, safe='')}"


def _mode(item: _Asked) -> str:
    q = item.question
    if q.problem is not None:
        return "question that cannot be shown (decline or cancel it)"
    if q.mode == "form":
        return "form to fill in"
    if q.mode == "url" and item.host is not None:
        return f"link to open ({item.host})"
    if q.mode == "url":
        return "link that is not safe to open (decline or cancel it)"
    return f"{q.method}: not for a person"


def _render_list(base: str, person: str, items: Sequence[_Asked], done: str | None, ready: bool) -> str:
    body = "<h1>Your questions</h1>\n" + _p(f"Signed in as {person}.", "meta")
    if done in _DONE:
        text = _DONE[done]
        if ready:
            text += (
                " Every question of that round is answered: the call goes back to its server when the runtime "
                "resumes it (askback inbox resume)."
            )
        body += f'\n<div class="status" role="status">{_p(text)}</div>'
    if not items:
        return _document(
            "Your questions",
            body + "\n" + _p("Nothing is waiting for you. A question appears here when a tool your agent calls asks."),
        )
    rows = []
    for item in items:
        q = item.question
        message = q.message or "(the server sent no message)"
        rows.append(
            f'<li>\n<h2><a href="{escape(_question_path(base, q))}">{escape(shorten(message, _MESSAGE_LISTED))}</a>'
            f'</h2>\n<p class="meta">A {escape(_mode(item))}, asked by {escape(item.asker)}. Answer by '
            f"{_when(item.deadline)}; unanswered then, it is cancelled.</p>\n{_origin(q.origin)}\n</li>"
        )
    count = "1 question waits" if len(items) == 1 else f"{len(items)} questions wait"
    return _document(
        "Your questions",
        body + "\n" + _p(f"{count} for your answer.") + '\n<ul class="questions">\n' + "\n".join(rows) + "\n</ul>",
    )


def _field_id(index: int) -> str:
    return f"field-{index}"


def _described(*ids: str | None) -> str:
    found = " ".join(i for i in ids if i)
    return f' aria-describedby="{found}"' if found else ""


def _hint_text(f: Field) -> str | None:
    """The description and what is accepted, when the field's widget does not already say it."""
    parts = [f.description] if f.description else []
    bounds = (f.minimum, f.maximum, f.min_length, f.max_length)
    if not f.choices and f.kind != "boolean" and any(b is not None for b in bounds):
        parts.append(f"Accepted: {f.hint}.")
    return " ".join(parts) or None


def _input_type(f: Field) -> str:
    if f.kind in ("number", "integer"):
        return "number"
    return {"email": "email", "uri": "url", "url": "url", "date": "date"}.get(f.format or "", "text")


def _render_field(index: int, f: Field, value: str | list[str] | bool, error: str | None) -> str:
    fid = _field_id(index)
    name = escape(_PREFIX + f.name)
    hint = _hint_text(f)
    hint_id = f"{fid}-hint" if hint else None
    error_id = f"{fid}-error" if error else None
    notes = (f'<p class="hint" id="{hint_id}">{escape(hint)}</p>\n' if hint else "") + (
        f'<p class="error" id="{error_id}">Error: {escape(error)}</p>\n' if error else ""
    )
    invalid = ' aria-invalid="true"' if error else ""
    required_mark = ' <span class="req">(required)</span>' if f.required else ""
    required = " required" if f.required else ""
    title = escape(f.title)

    if f.kind == "boolean":
        checked = " checked" if value is True else ""
        return (
            f'<div class="field check">\n<input type="checkbox" id="{fid}" name="{name}" value="true"{checked}'
            f'{invalid}{_described(hint_id, error_id)}>\n<label for="{fid}">{title}</label>\n{notes}</div>'
        )

    if f.choices and (f.kind == "multi" or len(f.choices) <= _RADIOS):
        chosen = set(value) if isinstance(value, list) else {value}
        kind = "checkbox" if f.kind == "multi" else "radio"
        options = list(zip(f.choices, f.choice_titles, strict=False))
        if kind == "radio" and not f.required:
            options.append(("", "No answer"))
        boxes = []
        for n, (choice, label) in enumerate(options):
            checked = " checked" if choice in chosen or (choice == "" and chosen <= {""}) else ""
            boxes.append(
                f'<div class="choice"><input type="{kind}" id="{fid}-{n}" name="{name}" value="{escape(choice)}"'
                f"{checked}{required if kind == 'radio' else ''}{invalid}>"
                f'<label for="{fid}-{n}">{escape(label)}</label></div>'
            )
        return (
            f'<fieldset class="field" id="{fid}"{_described(hint_id, error_id)}>\n<legend>{title}{required_mark}'
            f"</legend>\n{notes}" + "\n".join(boxes) + "\n</fieldset>"
        )

    label = f'<label for="{fid}">{title}{required_mark}</label>\n{notes}'
    if f.choices:
        empty = "Choose…" if f.required else "No answer"
        options_html = [] if f.required and value in f.choices else [f'<option value="">{empty}</option>']
        for choice, choice_title in zip(f.choices, f.choice_titles, strict=False):
            selected = " selected" if choice == value else ""
            options_html.append(f'<option value="{escape(choice)}"{selected}>{escape(choice_title)}</option>')
        return (
            f'<div class="field">\n{label}<select id="{fid}" name="{name}"{required}{invalid}'
            f"{_described(hint_id, error_id)}>\n" + "\n".join(options_html) + "\n</select>\n</div>"
        )

    attrs = [f'type="{_input_type(f)}"', f'id="{fid}"', f'name="{name}"', f'value="{escape(str(value))}"']
    if f.kind in ("number", "integer"):
        attrs.append('step="1"' if f.kind == "integer" else 'step="any"')
        if f.minimum is not None:
            attrs.append(f'min="{escape(str(f.minimum))}"')
        if f.maximum is not None:
            attrs.append(f'max="{escape(str(f.maximum))}"')
    elif f.kind == "string":
        if f.min_length is not None:
            attrs.append(f'minlength="{int(f.min_length)}"')
        if f.max_length is not None:
            attrs.append(f'maxlength="{int(f.max_length)}"')
    return (
        f'<div class="field">\n{label}<input {" ".join(attrs)}{required}{invalid}'
        f"{_described(hint_id, error_id)}>\n</div>"
    )


def _anchor(index: int, f: Field) -> str:
    """Where an error summary's link to a field goes: its input, or the first box of its group."""
    grouped = f.kind != "boolean" and bool(f.choices) and (f.kind == "multi" or len(f.choices) <= _RADIOS)
    return f"{_field_id(index)}-0" if grouped else _field_id(index)


def _summary(problems: Iterable[tuple[str | None, str]]) -> str:
    """The error summary at the top of a form: each problem, linked to its field when it has one."""
    items = []
    for anchor, text in problems:
        shown = escape(text)
        items.append(f'<li><a href="#{anchor}">{shown}</a></li>' if anchor else f"<li>{shown}</li>")
    return (
        '<div class="summary" role="alert" aria-labelledby="problems">\n<h2 id="problems">The answer was not sent'
        "</h2>\n<ul>\n" + "\n".join(items) + "\n</ul>\n</div>"
    )


def _buttons(accept: str | None) -> str:
    # Decline and cancel skip the browser's own checks of the form: nothing in it is sent with them.
    send = (
        f'<button type="submit" class="primary" name="action" value="accept">{escape(accept)}</button>\n'
        if accept
        else ""
    )
    return (
        f'<div class="actions">\n{send}'
        '<button type="submit" name="action" value="decline" formnovalidate>Decline</button>\n'
        '<button type="submit" name="action" value="cancel" formnovalidate>Cancel</button>\n</div>\n'
        '<p class="hint">Decline: you say no to what is asked. Cancel: you dismiss the question without answering.</p>'
    )


def _render_question(
    base: str,
    item: _Asked,
    token: str,
    *,
    values: Values | None = None,
    errors: Mapping[str, str] | None = None,
    problem: str | None = None,
) -> str:
    """One question's page; `values`, `errors` and `problem` show a refused answer again."""
    q = item.question
    errors = errors or {}
    parts = [f"<h1>A question from {escape(item.asker)}</h1>"]
    form_fields = fields(q.schema) if q.mode == "form" and q.problem is None else ()
    problems: list[tuple[str | None, str]] = [
        (_anchor(i, f), errors[f.name]) for i, f in enumerate(form_fields) if f.name in errors
    ]
    if problem is not None:
        problems.append((None, problem))
    if problems:
        parts.append(_summary(problems))
    parts.append(_p(q.message or "(the server sent no message)", "message"))
    origin = _origin(q.origin)
    if origin:
        parts.append(origin)
    parts.append(
        f'<p class="meta">Call {escape(q.call_id)}, round {q.round}. Answer by {_when(item.deadline)}; unanswered '
        "then, it is cancelled.</p>"
    )
    hidden = f'<input type="hidden" name="{_CSRF_FIELD}" value="{escape(token)}">'
    action = escape(_question_path(base, q))
    accept: str | None = None
    inside = ""
    if q.problem is not None:
        parts.append(
            f'<p class="error">This question cannot be shown as the server asked it: {escape(q.problem)}.</p>\n'
            + _p("You can decline or cancel it.")
        )
    elif q.mode == "form":
        shown = values if values is not None else _initial(form_fields)
        inside = "\n".join(
            _render_field(i, f, shown.get(f.name, ""), errors.get(f.name)) for i, f in enumerate(form_fields)
        )
        if not form_fields:
            inside = _p("This form asks for nothing: send it to agree.")
        accept = "Send answer"
    elif q.mode == "url":
        link = item.link
        if link is not None:
            shown_host = escape(link.host)
            spelled = (
                f"<p>Spelled with Latin letters only: <code>{escape(link.ascii_host)}</code></p>\n"
                if link.ascii_host != link.host
                else ""
            )
            # The address handed to the browser is the parser's serialization of the link: the one that was checked.
            parts.append(
                f'<p>This link goes to</p>\n<p class="host">{shown_host}</p>\n{spelled}<p>Check that this is the '
                "site you expect before you enter anything there.</p>\n"
                f'<p><a class="open" href="{escape(link.href)}" rel="noopener noreferrer" target="_blank">Open '
                f"{shown_host}</a> (opens in a new tab)</p>\n"
                f'<p class="meta">Full address: <code>{escape(link.href)}</code></p>\n'
                + _p('When you have finished there, come back and press "I have finished".')
            )
            accept = "I have finished"
        else:
            why = escape(item.unsafe or "it has none")
            parts.append(
                f'<p class="error">This question\'s link is not shown as a link: {why}</p>'
                + (f'\n<p class="meta">Its address, as text: <code>{escape(q.url)}</code></p>' if q.url else "")
                + "\n"
                + _p("You can decline or cancel the question.")
            )
    else:
        parts.append(
            _p(f"This question ({q.method}) is for your agent's model, not for a person: it cannot be answered here.")
        )
    parts.append(f'<form method="post" action="{action}">\n{hidden}\n{inside}\n{_buttons(accept)}\n</form>')
    parts.append(_back(base))
    return _document(f"A question from {item.asker}", "\n".join(parts))


def _render_call(base: str, record: CallRecord, pending: Sequence[Question], *, resumed: bool) -> str:
    asker = _asker(record.method, record.target)
    if record.status == "completed":
        result = Completed(record.id, record.result or {}, rounds=record.round)
        title = "The tool reported an error" if result.is_error else "Done"
        body = f"<h1>{escape(title)}</h1>\n" + _p(f"The {asker} answered:")
        body += f"\n<pre>{escape(result.text or '(no text)')}</pre>"
    elif record.status == "failed":
        title = "The call failed"
        body = f"<h1>{title}</h1>\n" + _p(record.error or "The server gave no reason.")
    elif record.status == "resuming":
        title = "Being sent back"
        body = f"<h1>{title}</h1>\n" + _p(
            f"The answers to the {asker} are being sent back to its server. Reload this page to see what came of it."
        )
    elif pending:
        title = "The server asked again" if resumed else "Waiting for your answers"
        links = "\n".join(
            f'<li><a href="{escape(_question_path(base, q))}">{escape(q.message or q.key)}</a></li>' for q in pending
        )
        body = f"<h1>{title}</h1>\n" + _p(f"The {asker} asks (round {record.round}):") + f"\n<ul>\n{links}\n</ul>"
    else:
        title = "Answered"
        body = f"<h1>{title}</h1>\n" + _p(
            f"Every question of round {record.round} is answered. The call goes back to its server when the runtime "
            "resumes it."
        )
    meta = _p(f"Call {record.id}: the {asker} on {for_terminal(record.server)}.", "meta")
    origin = _origin(record.origin)
    return _document(title, f"{body}\n{origin}\n{meta}\n{_back(base)}")


def _render_problem(title: str, text: str, base: str, *, more: str = "") -> str:
    return _document(title, f"<h1>{escape(title)}</h1>\n{_p(text)}{more}\n{_back(base)}")


_PROBLEMS: Mapping[int, tuple[str, str]] = {
    401: (
        "Sign in to see your questions",
        "This inbox does not know who you are. Open it through your organisation's sign-in (the proxy that names you "
        "to it), or, on your own machine, start it for yourself: askback inbox serve --user NAME.",
    ),
    403: (
        "This form cannot be sent",
        "The form was sent without this page's security token, or from another site. Nothing was recorded. Open the "
        "question again from your inbox and send it from there.",
    ),
    404: ("Not found", "There is no such page or question here. Your questions are listed in your inbox."),
    405: ("Not allowed", "This page cannot be used that way."),
    409: (
        "Already answered",
        "This question was already answered, or its call has moved on (resumed, finished, or cancelled at its "
        "deadline). Nothing was recorded.",
    ),
    413: ("Too much was sent", "The form sent more than this inbox accepts. Nothing was recorded."),
}


def _problem_page(status: int, base: str, *, more: str = "") -> str:
    title, text = _PROBLEMS.get(status, ("Something went wrong", "The request could not be handled."))
    return _render_problem(title, text, base, more=more)


# --- reading a form (no I/O) ----------------------------------------------------------------------------------------


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def _initial(form_fields: Sequence[Field]) -> Values:
    """What a form shows before the person types anything: the schema's defaults."""
    values: Values = {}
    for f in form_fields:
        if f.kind == "boolean":
            values[f.name] = f.default is True
        elif f.kind == "multi" and f.choices:
            values[f.name] = [str(v) for v in f.default] if isinstance(f.default, list) else []
        elif isinstance(f.default, list):
            values[f.name] = ", ".join(str(v) for v in f.default)
        else:
            values[f.name] = _text(f.default)
    return values


def _submitted(form_fields: Sequence[Field], form: FormData) -> Values:
    """What the person sent in each field, as sent (to be shown again if the answer is refused)."""
    values: Values = {}
    for f in form_fields:
        name = _PREFIX + f.name
        if f.kind == "boolean":
            values[f.name] = form.get(name) is not None
        elif f.kind == "multi" and f.choices:
            values[f.name] = [v for v in form.getlist(name) if isinstance(v, str)]
        else:
            raw = form.get(name)
            values[f.name] = raw if isinstance(raw, str) else ""
    return values


def _one_field_problem(f: Field, value: Any) -> str | None:
    wrong = check_field(f, value)
    return f"{f.title}: {'; '.join(wrong)}" if wrong else None


def _content(
    schema: Mapping[str, Any], form_fields: Sequence[Field], values: Values
) -> tuple[dict[str, Any], dict[str, str]]:
    """The answer's content from what was sent, and what is wrong with each field (by name). An unticked checkbox
    is `false`; a group of checkboxes is the list of ticked values (none ticked: no value)."""
    content: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in form_fields:
        raw = values.get(f.name, "")
        value: Any
        try:
            if f.kind == "boolean":
                value = raw is True
            elif isinstance(raw, list):
                value = raw or None
            else:
                value = parse(f, str(raw))
        except InvalidAnswerError as exc:
            errors[f.name] = str(exc)
            continue
        problem = _one_field_problem(f, value)
        if problem is not None:
            errors[f.name] = problem
        elif value is not None:
            content[f.name] = value
    return content, errors


# --- small ASGI pieces ----------------------------------------------------------------------------------------------


class _InputKey(Convertor[str]):
    """A question's input key in a page's path: whatever the server chose, line breaks included (Starlette's `path`
    convertor stops at one, and its pattern's `$` matches before a final one)."""

    regex = "[\\s\\S]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("input_key", _InputKey())


class _PageHeaders:
    """Puts the inbox's security headers on every response that passes through it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)


# --- the app --------------------------------------------------------------------------------------------------------


def _base(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _html(document: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(document, status_code=status)


def _from_elsewhere(request: Request) -> bool:
    """True for a POST a browser says comes from another origin (`Origin`, or `Sec-Fetch-Site`)."""
    origin = request.headers.get("origin")
    # Under `Referrer-Policy: no-referrer` a browser sends `Origin: null` with its own same-origin form posts, so
    # "null" is judged by `Sec-Fetch-Site` alone (an opaque origin from elsewhere says cross-site there).
    if origin not in (None, "null") and origin != f"{request.url.scheme}://{request.url.netloc}":
        return True
    site = request.headers.get("sec-fetch-site")
    return site is not None and site not in ("same-origin", "none")


def _csrf_token(request: Request) -> tuple[str, bool]:
    """This browser's token, or a new one (True: set it)."""
    token = request.cookies.get(_CSRF_COOKIE, "")
    if _TOKEN.fullmatch(token):
        return token, False
    return secrets.token_urlsafe(32), True


def _csrf_ok(request: Request, form: FormData) -> bool:
    cookie = request.cookies.get(_CSRF_COOKIE, "")
    sent = form.get(_CSRF_FIELD)
    if not isinstance(sent, str) or not _TOKEN.fullmatch(cookie) or not _TOKEN.fullmatch(sent):
        return False
    return hmac.compare_digest(cookie.encode(), sent.encode())


def inbox_app(runtime: Runtime, *, principal: Callable[[Request], str | None], resume: bool = False) -> Starlette:
    """The web inbox over `runtime`'s parked calls. `principal(request)` names the person who opens a page (None:
    nobody is signed in, and the page says how to sign in). With `resume`, the last answer of a round sends the round
    back to its server at once; without, `askback inbox resume` (or the agent) does."""

    async def asked(person: str, call_id: str, round_: int, key: str) -> _Asked | CallRecord | None:
        """The person's pending question; their call when it no longer waits on that question; None when there is no
        such call of theirs (another person's call is None too: never revealed)."""
        held = runtime.held.get(call_id)
        if held is not None:
            q = held.question
            if held.principal != person or q.round != round_ or q.key != key:
                return None
            return shown(q, _HELD, held.deadline)
        try:
            record = await runtime.calls.get(call_id)
        except UnknownCallError:
            return None
        if record.principal != person:
            return None
        question = next((q for q in record.questions if q.round == round_ and q.key == key), None)
        if question is None or record.status != "parked":
            return record
        if key in await runtime.calls.answers(call_id, round_):
            return record
        return shown(question, _asker(record.method, record.target), record.deadline)

    def shown(q: Question, asker: str, deadline: float | None) -> _Asked:
        if q.mode != "url":
            return _Asked(q, asker, deadline)
        try:
            return _Asked(q, asker, deadline, link=runtime.link(q))
        except (UnsafeLinkError, InvalidAnswerError) as exc:
            return _Asked(q, asker, deadline, unsafe=str(exc))

    def question_page(
        request: Request,
        item: _Asked,
        status: int = 200,
        *,
        values: Values | None = None,
        errors: Mapping[str, str] | None = None,
        problem: str | None = None,
    ) -> Response:
        token, new = _csrf_token(request)
        document = _render_question(_base(request), item, token, values=values, errors=errors, problem=problem)
        response = _html(document, status)
        if new:
            response.set_cookie(
                _CSRF_COOKIE,
                token,
                path="/",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    def gone(request: Request, call_id: str) -> Response:
        base = _base(request)
        more = f'\n<p><a href="{escape(_call_path(base, call_id))}">See what came of the call</a></p>'
        return _html(_problem_page(409, base, more=more), 409)

    async def listing(request: Request) -> Response:
        base = _base(request)
        person = principal(request)
        if person is None:
            return _html(_problem_page(401, base), 401)
        items = [
            shown(p.question, _HELD if p.in_memory else _asker(p.method, p.target), p.deadline)
            for p in await runtime.inbox(principal=person)
        ]
        done = request.query_params.get("done")
        ready = request.query_params.get("ready") == "1"
        return _html(_render_list(base, person, items, done, ready))

    async def show(request: Request) -> Response:
        base = _base(request)
        person = principal(request)
        if person is None:
            return _html(_problem_page(401, base), 401)
        params = request.path_params
        found = await asked(person, params["call_id"], params["round"], params["key"])
        if found is None:
            return _html(_problem_page(404, base), 404)
        if isinstance(found, CallRecord):
            return gone(request, found.id)
        return question_page(request, found)

    async def answer(request: Request) -> Response:
        base = _base(request)
        form = await request.form(max_files=0)
        if _from_elsewhere(request) or not _csrf_ok(request, form):
            return _html(_problem_page(403, base), 403)
        person = principal(request)
        if person is None:
            return _html(_problem_page(401, base), 401)
        params = request.path_params
        call_id, round_, key = params["call_id"], params["round"], params["key"]
        found = await asked(person, call_id, round_, key)
        if found is None:
            return _html(_problem_page(404, base), 404)
        if isinstance(found, CallRecord):
            return gone(request, found.id)
        q = found.question
        action = _action(form.get("action"))
        if action is None:
            problem = "Press one of the buttons: Send answer, Decline or Cancel."
            return question_page(request, found, 400, problem=problem)
        chosen = Answer(action) if action != "accept" else None
        if chosen is None and q.problem is not None:
            problem = "This question cannot be accepted: decline or cancel it."
            return question_page(request, found, 400, problem=problem)
        if chosen is None and q.mode == "form":
            form_fields = fields(q.schema)
            values = _submitted(form_fields, form)
            content, errors = _content(q.schema or {}, form_fields, values)
            if errors:
                return question_page(request, found, 400, values=values, errors=errors)
            chosen = Answer("accept", content)
        elif chosen is None:
            if found.host is None:
                problem = "This question cannot be accepted here: decline or cancel it."
                return question_page(request, found, 400, problem=problem)
            chosen = Answer("accept")
        try:
            waiting = await runtime.answer(call_id, key, chosen, round_=round_, by=person)
        except InvalidAnswerError as exc:
            kept = _submitted(fields(q.schema), form) if q.mode == "form" and q.problem is None else None
            if exc.problems and kept is not None:
                titles = {f.name: f.title for f in fields(q.schema)}
                shown = {name: f"{titles.get(name, name)}: {'; '.join(ps)}" for name, ps in exc.problems.items()}
                return question_page(request, found, 400, values=kept, errors=shown)
            return question_page(request, found, 400, values=kept, problem=str(exc))
        except CallStateError:
            return gone(request, call_id)
        except UnknownCallError:
            return _html(_problem_page(404, base), 404)
        if waiting > 0 or call_id in runtime.held:
            return _redirect(f"{base}/?{urlencode({'done': chosen.action})}")
        if not resume:
            return _redirect(f"{base}/?{urlencode({'done': chosen.action, 'ready': '1'})}")
        try:
            outcome = await runtime.resume(call_id)
        except CallError as exc:
            log.warning("the inbox could not resume call %s: %s", call_id, exc)
            more = f'\n<p>{escape(str(exc))}</p>\n<p><a href="{escape(_call_path(base, call_id))}">See the call</a></p>'
            text = "Your answer is recorded, but the call could not be sent back to its server:"
            return _html(_render_problem("Answer recorded; the call did not go on", text, base, more=more), 502)
        flag = "" if isinstance(outcome, Claimed) else "?resumed=1"
        return _redirect(f"{_call_path(base, call_id)}{flag}")

    async def call_page(request: Request) -> Response:
        base = _base(request)
        person = principal(request)
        if person is None:
            return _html(_problem_page(401, base), 401)
        call_id = request.path_params["call_id"]
        try:
            record = await runtime.calls.get(call_id)
        except UnknownCallError:
            record = None
        if record is None or record.principal != person:
            return _html(_problem_page(404, base), 404)
        pending = [q for q in await runtime.pending(principal=person) if q.call_id == call_id]
        resumed = request.query_params.get("resumed") == "1"
        return _html(_render_call(base, record, pending, resumed=resumed))

    async def problem(request: Request, exc: Exception) -> Response:
        # A 500 is re-raised by Starlette once this page is sent, so the server logs it with its traceback. Starlette
        # answers it outside the middleware, so this response carries the headers itself.
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
        allow = {k: v for k, v in headers.items() if k == "Allow"}
        return HTMLResponse(_problem_page(status, _base(request)), status_code=status, headers={**_HEADERS, **allow})

    routes = [
        Route("/", listing, methods=["GET"]),
        Route("/q/{call_id}/{round:int}/{key:input_key}", show, methods=["GET"]),
        Route("/q/{call_id}/{round:int}/{key:input_key}", answer, methods=["POST"]),
        Route("/calls/{call_id}", call_page, methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(_PageHeaders), Middleware(CappedBody, limit=_MAX_FORM_BYTES)],
        exception_handlers={HTTPException: problem, Exception: problem},
    )


def _action(value: object) -> Action | None:
    for action in _ACTIONS:
        if value == action:
            return action
    return None


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=303)
