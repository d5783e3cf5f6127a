"""What each page of the web inbox shows, as plain values its templates lay out (no I/O, no markup).

Everything a server wrote reaches a page through these values and is escaped by the templates; text that a terminal
would also show (the server's name, the call's arguments) is made visible with `for_terminal` and bounded first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import quote

from askback.core.terminal_text import for_terminal, shorten
from askback.runtime.call_status import CallStatus
from askback.runtime.calls import Completed
from askback.runtime.forms import Field, fields
from askback.runtime.parked_calls import CallRecord
from askback.runtime.questions import CheckedLink, Origin, ParkedQuestion

# Form fields are sent as `f.<name>`, so a schema field can never be taken for `action` or the token.
PREFIX = "f."
# A choice of up to this many values is shown as radio buttons, a longer one as a select.
_RADIOS = 5
# The list shows the start of a long message (a question's page shows it whole), and of a call's arguments.
_MESSAGE_LISTED = 300
_CALL_SHOWN = 300

HELD = "a 2025-11-25 server (held in this process's memory)"

_DONE = {
    "accept": "Your answer is recorded.",
    "decline": "You declined the question.",
    "cancel": "You cancelled the question.",
}

Values = dict[str, str | list[str] | bool]
"""What a form shows in each field, by field name: text, the checked choices, or a checkbox's state."""

Attributes = tuple[tuple[str, str | None], ...]
"""An element's attributes in order; `None` for one without a value (`required`)."""


@dataclass(frozen=True)
class Asked:
    """A pending question of the person, with what the page says about its call. A URL question has its `link` (as
    a browser reads it: the address to hand it and the host it reaches), or why the link is `unsafe` to show as one."""

    question: ParkedQuestion
    asker: str
    deadline: float | None
    link: CheckedLink | None = None
    unsafe: str | None = None

    @property
    def host(self) -> str | None:
        """The host to show beside the link (an internationalised one with its ASCII form)."""
        return None if self.link is None else self.link.shown


@dataclass(frozen=True)
class ShownOrigin:
    """Which server asks (the host the runtime reached; the name it gives itself, which is only its claim) and the
    call: bounded in length, with invisible and direction-changing characters made visible, as on a terminal."""

    host: str
    name: str | None
    call: str


@dataclass(frozen=True)
class Listed:
    """One question in the person's list."""

    path: str
    message: str
    mode: str
    asker: str
    deadline: dt.datetime | None
    origin: ShownOrigin | None


@dataclass(frozen=True)
class Box:
    """One radio button or checkbox of a group."""

    id: str
    label: str
    attributes: Attributes


@dataclass(frozen=True)
class Option:
    value: str
    label: str
    selected: bool


Widget = Literal["check", "group", "select", "input"]


@dataclass(frozen=True)
class ShownField:
    """One field of a form: its widget, its label, its hint and error, and its control's attributes (a group's are
    its fieldset's)."""

    widget: Widget
    id: str
    title: str
    required: bool
    hint: str | None
    hint_id: str | None
    error: str | None
    error_id: str | None
    attributes: Attributes
    boxes: tuple[Box, ...] = ()
    options: tuple[Option, ...] = ()


def moment(at: float | None) -> dt.datetime | None:
    return None if at is None else dt.datetime.fromtimestamp(at, dt.UTC)


def asker(method: str, target: str) -> str:
    """Who asks, as words inside a sentence: "the tool deploy" (`at_start` makes it open one)."""
    kind = {"tools/call": "tool", "prompts/get": "prompt", "resources/read": "resource"}.get(method, "call")
    return f"the {kind} {for_terminal(shorten(target, 100))}"


def at_start(words: str) -> str:
    """`words` opening a sentence: its first letter capitalised, and only that one (a tool's name keeps its case)."""
    return words[:1].upper() + words[1:]


def shown_origin(origin: Origin | None) -> ShownOrigin | None:
    if origin is None:
        return None
    name = for_terminal(shorten(origin.server_name, 80)) if origin.server_name else None
    return ShownOrigin(for_terminal(origin.host), name, for_terminal(origin.call(_CALL_SHOWN)))


# A path segment of dots alone is one a browser (and httpx) resolves away (`.`, `..`, their percent-encoded forms), so
# a key of dots alone (the empty key too) travels as three more dots than it has: no other key is written that way.
_DOTS_ADDED = "..."


def key_segment(key: str) -> str:
    """The path segment (before percent-encoding) a question's `key` travels in: the key itself, unless it is dots
    alone."""
    return key + _DOTS_ADDED if key.strip(".") == "" else key


def key_of(segment: str) -> str:
    """The key a path segment (percent-decoded) names: `key_segment` undone."""
    return segment.removesuffix(_DOTS_ADDED) if segment.strip(".") == "" else segment


def question_path(base: str, q: ParkedQuestion) -> str:
    """The question's page, every byte of its call id and key percent-encoded (a `/` in a key too)."""
    return f"{base}/q/{quote(q.call_id, safe='')}/{q.round}/{quote(key_segment(q.key), safe='')}"


def call_path(base: str, call_id: str) -> str:
    return f"{base}/calls/{quote(call_id, safe='')}"


def _mode(item: Asked) -> str:
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


def listing(base: str, person: str, items: Sequence[Asked], done: str | None, ready: bool) -> dict[str, Any]:
    """The list page: the person's pending questions, and what came of the answer just sent (`done`)."""
    status: str | None = None
    if done in _DONE:
        status = _DONE[done]
        if ready:
            status += (
                " Every question of that round is answered: the call goes back to its server when the runtime "
                "resumes it (askback inbox resume)."
            )
    rows = [
        Listed(
            question_path(base, item.question),
            shorten(item.question.message or "(the server sent no message)", _MESSAGE_LISTED),
            _mode(item),
            item.asker,
            moment(item.deadline),
            shown_origin(item.question.origin),
        )
        for item in items
    ]
    count = "1 question waits" if len(items) == 1 else f"{len(items)} questions wait"
    return {"person": person, "status": status, "items": rows, "count": count}


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


def _grouped(f: Field) -> bool:
    """Whether the field's choices are shown as a group of boxes (else a select)."""
    return f.kind != "boolean" and bool(f.choices) and (f.kind == "multi" or len(f.choices) <= _RADIOS)


def shown_field(index: int, f: Field, value: str | list[str] | bool, error: str | None) -> ShownField:
    fid = f"field-{index}"
    name = PREFIX + f.name
    hint = _hint_text(f)
    hint_id = f"{fid}-hint" if hint else None
    error_id = f"{fid}-error" if error else None
    described_by = " ".join(i for i in (hint_id, error_id) if i)
    described: Attributes = (("aria-describedby", described_by),) if described_by else ()
    invalid: Attributes = (("aria-invalid", "true"),) if error else ()
    required: Attributes = (("required", None),) if f.required else ()

    def made(
        widget: Widget, attributes: Attributes, boxes: tuple[Box, ...] = (), options: tuple[Option, ...] = ()
    ) -> ShownField:
        return ShownField(
            widget, fid, f.title, f.required, hint, hint_id, error, error_id, attributes, boxes=boxes, options=options
        )

    if f.kind == "boolean":
        checked: Attributes = (("checked", None),) if value is True else ()
        box = (("type", "checkbox"), ("id", fid), ("name", name), ("value", "true"), *checked, *invalid, *described)
        return made("check", box)

    if _grouped(f):
        chosen = set(value) if isinstance(value, list) else {value}
        kind = "checkbox" if f.kind == "multi" else "radio"
        options = list(zip(f.choices, f.choice_titles, strict=False))
        if kind == "radio" and not f.required:
            options.append(("", "No answer"))
        boxes = []
        for n, (choice, label) in enumerate(options):
            ticked: Attributes = (("checked", None),) if choice in chosen or (choice == "" and chosen <= {""}) else ()
            attributes = (("type", kind), ("id", f"{fid}-{n}"), ("name", name), ("value", choice), *ticked)
            boxes.append(Box(f"{fid}-{n}", label, (*attributes, *(required if kind == "radio" else ()), *invalid)))
        return made("group", (("id", fid), *described), boxes=tuple(boxes))

    if f.choices:
        empty = "Choose…" if f.required else "No answer"
        listed = [] if f.required and value in f.choices else [Option("", empty, False)]
        listed += [Option(c, t, c == value) for c, t in zip(f.choices, f.choice_titles, strict=False)]
        select = (("id", fid), ("name", name), *required, *invalid, *described)
        return made("select", select, options=tuple(listed))

    control: list[tuple[str, str | None]] = [
        ("type", _input_type(f)),
        ("id", fid),
        ("name", name),
        ("value", str(value)),
    ]
    if f.kind in ("number", "integer"):
        control.append(("step", "1" if f.kind == "integer" else "any"))
        if f.minimum is not None:
            control.append(("min", str(f.minimum)))
        if f.maximum is not None:
            control.append(("max", str(f.maximum)))
    elif f.kind == "string":
        if f.min_length is not None:
            control.append(("minlength", str(int(f.min_length))))
        if f.max_length is not None:
            control.append(("maxlength", str(int(f.max_length))))
    return made("input", (*control, *required, *invalid, *described))


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def initial(form_fields: Sequence[Field]) -> Values:
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


def _anchor(index: int, f: Field) -> str:
    """Where an error summary's link to a field goes: its input, or the first box of its group."""
    return f"field-{index}-0" if _grouped(f) else f"field-{index}"


def question(
    base: str,
    item: Asked,
    *,
    values: Values | None = None,
    errors: Mapping[str, str] | None = None,
    problem: str | None = None,
) -> dict[str, Any]:
    """One question's page; `values`, `errors` and `problem` show a refused answer again."""
    q = item.question
    errors = errors or {}
    form_fields = fields(q.schema) if q.mode == "form" and q.problem is None else ()
    problems: list[tuple[str | None, str]] = [
        (_anchor(i, f), errors[f.name]) for i, f in enumerate(form_fields) if f.name in errors
    ]
    if problem is not None:
        problems.append((None, problem))
    shown: Sequence[ShownField] = ()
    accept: str | None = None
    kind: Literal["problem", "form", "link", "unsafe", "other"]
    if q.problem is not None:
        kind = "problem"
    elif q.mode == "form":
        kind, accept = "form", "Send answer"
        typed = values if values is not None else initial(form_fields)
        shown = [shown_field(i, f, typed.get(f.name, ""), errors.get(f.name)) for i, f in enumerate(form_fields)]
    elif q.mode == "url" and item.link is not None:
        kind, accept = "link", "I have finished"
    elif q.mode == "url":
        kind = "unsafe"
    else:
        kind = "other"
    return {
        "base": base,
        "item": item,
        "q": q,
        "kind": kind,
        "problems": problems,
        "origin": shown_origin(q.origin),
        "deadline": moment(item.deadline),
        "action": question_path(base, q),
        "fields": shown,
        "accept": accept,
        "unsafe": item.unsafe or "it has none",
    }


def call(base: str, record: CallRecord, pending: Sequence[ParkedQuestion], *, resumed: bool) -> dict[str, Any]:
    """A call's page: its result, why it failed, or the questions it waits on."""
    who = asker(record.method, record.target)
    state: Literal["completed", "failed", "resuming", "pending", "answered"]
    text = ""
    if record.status == CallStatus.COMPLETED:
        result = Completed(record.id, record.result or {}, rounds=record.round)
        state, title = "completed", "The tool reported an error" if result.is_error else "Done"
        text = result.text or "(no text)"
    elif record.status == CallStatus.FAILED:
        state, title, text = "failed", "The call failed", record.error or "The server gave no reason."
    elif record.status == CallStatus.RESUMING:
        state, title = "resuming", "Being sent back"
    elif pending:
        state, title = "pending", "The server asked again" if resumed else "Waiting for your answers"
    else:
        state, title = "answered", "Answered"
    links = [(question_path(base, q), q.message or q.key) for q in pending]
    return {
        "base": base,
        "state": state,
        "title": title,
        "text": text,
        "asker": who,
        "asker_first": at_start(who),
        "record": record,
        "links": links,
        "server": for_terminal(record.server),
        "origin": shown_origin(record.origin),
    }


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


def problem(
    status: int, base: str, *, detail: str | None = None, link: tuple[str, str] | None = None
) -> dict[str, Any]:
    """The page of an error status; `detail` a further paragraph, `link` a (path, text) to follow."""
    title, text = _PROBLEMS.get(status, ("Something went wrong", "The request could not be handled."))
    return custom_problem(title, text, base, detail=detail, link=link)


def custom_problem(
    title: str, text: str, base: str, *, detail: str | None = None, link: tuple[str, str] | None = None
) -> dict[str, Any]:
    return {"title": title, "text": text, "base": base, "detail": detail, "link": link}
