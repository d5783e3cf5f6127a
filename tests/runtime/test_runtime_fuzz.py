"""Property tests: whatever a server puts in a question, the runtime shows it safely and it can be declined.

Arbitrary JSON as a form's `requestedSchema` (and schemas that look almost right: odd values under the keys a form
reads), arbitrary text with control, bidirectional and zero-width characters as its message, its key and, for a URL
question, its link. Each round is read the way the runtime reads a server's answer (`unreadable_round`, then
`pending_questions`), its form built and parsed (`forms`), asked at the terminal prompt (rich, recorded to a string)
and in the web inbox (its app in process, over a real SQLite store): never an exception outside `askback.errors`,
never an HTTP 500, no control character but a line break on the terminal, and every question can be declined.

A few examples run with the suite; the deep run is `pytest -m fuzz --hypothesis-profile=deep` (10,000 examples).
"""

from __future__ import annotations

import contextlib
import io
import itertools
import unicodedata
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console
from starlette.requests import Request

from askback.errors import AskbackError
from askback.runtime import Answer, ParkedQuestion, Runtime, WebInbox
from askback.runtime.forms import fields, parse, validate
from askback.runtime.inbox import inbox_app
from askback.runtime.parked_calls import new_call_id
from askback.runtime.questions import pending_questions, unreadable_round
from askback.runtime.terminal import TerminalRenderer
from askback.settings import load_settings

pytestmark = [pytest.mark.anyio, pytest.mark.fuzz]

_ODD = ["\x1b[2J", "\x1b]52;c;aGk=\x07", "\x1b]8;;https://evil.example\x1b\\", "\x9b31m", "\r", "\t", "\x00", "\x7f"]
_ODD += ["\u202e", "\u2066", "\u200b", "\ufeff", "\u00ad", "\n", "é", "🙂", "<b>", "&amp;", '"', "'", "%2F", "/", " "]
odd = st.sampled_from(_ODD)
# Lone surrogates never arrive: the SDK's JSON parser refuses them before anything else reads the answer.
text = st.one_of(
    st.text(st.characters(exclude_categories=("Cs",)), max_size=30),
    st.lists(st.one_of(odd, st.text(max_size=3)), max_size=6).map("".join),
)
# JSON as the SDK's parser gives it: NaN, infinities and huge integers included.
scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300), st.floats(), text)
json_value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4), max_leaves=12
)
_KEYS = ["type", "title", "description", "enum", "enumNames", "oneOf", "anyOf", "minimum", "maximum", "minLength"]
_KEYS += ["maxLength", "minItems", "maxItems", "format", "default", "items", "const"]
_TYPES = st.sampled_from(["string", "number", "integer", "boolean", "array", "object", "null"])
choice = st.fixed_dictionaries({"const": st.one_of(text, json_value)}, optional={"title": st.one_of(text, json_value)})
value = st.one_of(
    json_value, _TYPES, st.lists(text, max_size=4), st.lists(choice, max_size=3), st.integers(-3, 12), st.floats()
)
prop = st.one_of(st.dictionaries(st.sampled_from(_KEYS), value, max_size=6), json_value)
schemaish = st.fixed_dictionaries(
    {"type": st.one_of(st.just("object"), json_value)},
    optional={
        "properties": st.one_of(st.dictionaries(text, prop, max_size=5), json_value),
        "required": st.one_of(st.lists(text, max_size=3), json_value),
    },
)
schema = st.one_of(schemaish, json_value)
# "." and ".." are path segments a URL cannot name (a browser resolves them away), so the inbox cannot link to them.
key = st.one_of(st.sampled_from(["ok", "confirm"]), text.filter(lambda k: 0 < len(k) <= 255 and k not in (".", "..")))
mode = st.sampled_from(["form", "url", None, "banana"])
url = st.one_of(st.sampled_from(["https://accounts.example.com/c?x=1", "http://127.0.0.1/x"]), text, json_value)
# What a person types at the terminal before declining: anything but the words that end a question another way (a
# yes/no question, one boolean field, is sent by its answer).
_YES_OR_NO = {"y", "yes", "true", "1", "on", "n", "no", "false", "0", "off"}
_ENDS = {"s", "send", "a", "finished", "e", "edit", "d", "decline", "c", "cancel", ":c", ":cancel", *_YES_OR_NO}
typed = st.lists(text.filter(lambda t: t.strip().casefold() not in _ENDS), max_size=4)
form_values = st.dictionaries(text, st.one_of(text, st.lists(text, max_size=3)), max_size=4)


def round_of(key: str, mode: str | None, message: Any, schema: Any, link: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"message": message}
    if mode is not None:
        params["mode"] = mode
    if mode == "url":
        params["url"] = link
        params["elicitationId"] = "e1"
    else:
        params["requestedSchema"] = schema
    request = {"method": "elicitation/create", "params": params}
    return {"resultType": "input_required", "inputRequests": {key: request}, "requestState": "s1"}


def visible(shown: str) -> str | None:
    """The first character that would drive the terminal (any C0 or C1 control but a line break), or None."""
    for char in shown:
        if char != "\n" and unicodedata.category(char) == "Cc":
            return repr(char)
    return None


def check_form(question: ParkedQuestion, lines: list[str], content: dict[str, Any]) -> None:
    """Building and parsing the form: only askback errors, whatever the schema and whatever is typed."""
    if question.mode != "form":
        return
    try:
        built = fields(question.schema)
    except AskbackError:
        assert question.problem is not None
        return
    assert question.problem is None
    for field, line in zip(built, itertools.cycle(lines or [""]), strict=False):
        with contextlib.suppress(AskbackError):
            parse(field, line)
    with contextlib.suppress(AskbackError):
        validate(question.schema, content)


async def at_the_terminal(question: ParkedQuestion, lines: list[str]) -> None:
    console = Console(file=io.StringIO(), width=100, color_system=None, force_terminal=False)
    prompts: list[str] = []
    replies = iter(lines)

    def read_line(prompt: str) -> str:
        prompts.append(prompt)
        return next(replies, ":d")

    answer = await TerminalRenderer(console=console, read_line=read_line, development=True).ask(question)
    assert answer == Answer("decline"), answer
    shown = console.file.getvalue() + "".join(prompts)  # type: ignore[attr-defined]
    assert visible(shown) is None, (visible(shown), shown)


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def runtime(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{tmp_path_factory.mktemp('runtime-fuzz') / 'agent.db'}"
    opened = await Runtime.open(url, renderers=[WebInbox()], settings=load_settings(database_url=url, development=True))
    try:
        yield opened
    finally:
        await opened.close()


def who(request: Request) -> str | None:
    return request.headers.get("x-user")


_people = itertools.count()


async def in_the_inbox(runtime: Runtime, outcome: dict[str, Any], form: dict[str, Any]) -> None:
    """Two parked copies of the call: one sent an accept with whatever fields, one declined."""
    person = f"person-{next(_people)}"  # each example's own inbox: a page lists only its own questions
    now = runtime.clock.now()
    questions = []
    for _ in range(2):
        record = await runtime.calls.add(
            call_id=new_call_id(),
            run_id=None,
            principal=person,
            server="https://tools.example.com/mcp",
            protocol="2026-07-28",
            method="tools/call",
            target="fuzz",
            arguments={},
            outcome=outcome,
            sent=None,
            deadline=now + 3600,
            now=now,
        )
        (question,) = record.questions
        questions.append(question)
    app = inbox_app(runtime, principal=who)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8765", headers={"X-User": person}
    ) as page:
        listing = await page.get("/")
        assert listing.status_code == 200, listing.text
        for question, action in zip(questions, ("accept", "decline"), strict=True):
            path = f"/q/{question.call_id}/{question.round}/{quote(question.key, safe='')}"
            shown = await page.get(path)
            assert shown.status_code == 200, shown.text
            token = shown.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
            data = {"csrf": token, "action": action}
            if action == "accept":
                data.update({f"f.{name}": v for name, v in form.items()})
            sent = await page.post(path, data=data)
            if action == "accept":
                assert sent.status_code in (303, 400), sent.text
                continue
            assert sent.status_code == 303, sent.text
            assert await runtime.calls.answers(question.call_id, question.round) == {question.key: Answer("decline")}
            call = await page.get(f"/calls/{question.call_id}")
            assert call.status_code == 200, call.text


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    key=key,
    mode=mode,
    message=st.one_of(text, json_value),
    schema=schema,
    link=url,
    lines=typed,
    content=st.dictionaries(text, json_value, max_size=4),
    form=form_values,
)
async def test_any_question_a_server_sends_is_shown_safely_and_can_be_declined(
    runtime: Runtime,
    key: str,
    mode: str | None,
    message: Any,
    schema: Any,
    link: Any,
    lines: list[str],
    content: dict[str, Any],
    form: dict[str, Any],
) -> None:
    outcome = round_of(key, mode, message, schema, link)
    assert unreadable_round(outcome) is None
    (question,) = pending_questions("call_fuzz", 1, outcome)
    check_form(question, lines, content)
    await at_the_terminal(question, lines)
    await in_the_inbox(runtime, outcome, form)
