"""The agent runtime against a hostile MCP server (`tests/fixtures/hostile_server.py`, its own process on loopback):
schemas it cannot render, results it cannot read, JSON nested past the parser's limit, a server that never answers.

A question the runtime cannot render is still a question: parked, listed, shown with what is wrong, and declined or
cancelled everywhere (the API, the inbox page in Chromium, the terminal prompt, `askback inbox`, `askback call`).
A result that cannot be read at all, a schema nested 200 levels and a server that never answers each end in one
askback error: never a pydantic `ValidationError`, an `ExceptionGroup` or a traceback on the person's terminal, and
a parked call stays parked exactly as it was.
"""

from __future__ import annotations

import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from rich.console import Console
from starlette.requests import Request
from tests.fixtures.hostile_schemas import PAYLOADS
from tests.fixtures.hostile_server import serving_hostile

from askback.errors import InvalidAnswerError, ServerProtocolError, ServerTimeoutError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.runtime.inbox import inbox_app
from askback.runtime.questions import pending_questions
from askback.runtime.terminal import TerminalRenderer
from askback.settings import load_settings
from askback.testing import free_port
from infra import async_browser_context, async_chromium, run_askback

pytestmark = [pytest.mark.anyio, pytest.mark.http]

# What each schema the runtime cannot render is said to have wrong.
UNRENDERABLE = {
    "schema_string": 'the requested schema\'s type is "string", not "object"',
    "schema_list": 'the requested schema is a list [{"type": "object"}], not an object schema',
    "properties_string": 'its properties are a string "abc", not an object',
    "required_string": 'its required list is a string "a", not a list of property names',
    "odd_values": 'property "count": its minimum is "zero", not a number',
}
# A timeout short enough for the suite, long enough for a loaded machine's loopback round trips before the call.
TIMEOUT = 2.0


@dataclass(frozen=True)
class Hostile:
    url: str
    log: Path

    def calls(self, tool: str, arguments: dict[str, Any]) -> list[Any]:
        """The `inputResponses` of every call of `tool` with these arguments, in order (None: a first round)."""
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [e["inputResponses"] for e in entries if e["tool"] == tool and e["arguments"] == arguments]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    log = tmp_path_factory.mktemp("hostile") / "calls.jsonl"
    with serving_hostile(free_port(), env={"HOSTILE_LOG": str(log)}) as url:
        yield Hostile(url, log)


def settings_for(url: str) -> Any:
    return load_settings(database_url=url, development=True, answer_wait=3600)


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agent.db'}"


@pytest.fixture
async def runtime(database: str) -> AsyncIterator[Runtime]:
    opened = await Runtime.open(database, renderers=[WebInbox()], settings=settings_for(database), timeout=TIMEOUT)
    try:
        yield opened
    finally:
        await opened.close()


async def every_call(runtime: Runtime) -> list[Any]:
    return await runtime.calls.listing(status=("parked", "resuming", "completed", "failed"))


def only_error_line(stderr: str) -> str:
    """The one line a failed command printed: `error: ...`, and nothing else (no traceback, no SDK log line)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    return lines[0]


# --- point 8: a question the runtime cannot render is parked, shown with what is wrong, declined ----------------


@pytest.mark.parametrize("tool", sorted(UNRENDERABLE))
async def test_a_form_the_runtime_cannot_render_is_parked_and_listed_with_what_is_wrong(
    runtime: Runtime, hostile: Hostile, tool: str
) -> None:
    outcome = await runtime.call_tool(hostile.url, tool, {"test": "parked"}, principal="ada")
    assert isinstance(outcome, Parked), outcome
    (question,) = outcome.questions
    assert question.problem is not None and UNRENDERABLE[tool] in question.problem
    (listed,) = await runtime.inbox(principal="ada")
    assert listed.question.ref == question.ref and listed.question.problem == question.problem


async def test_an_unrenderable_question_cannot_be_accepted_and_its_decline_reaches_the_server(
    runtime: Runtime, hostile: Hostile
) -> None:
    arguments = {"test": "decline-api"}
    outcome = await runtime.call_tool(hostile.url, "odd_values", arguments, principal="ada")
    assert isinstance(outcome, Parked)
    with pytest.raises(InvalidAnswerError, match=r"cannot be accepted.*Decline or cancel it"):
        await runtime.answer(outcome.call_id, "ok", Answer("accept", {"count": 1}))
    assert await runtime.calls.answers(outcome.call_id, 1) == {}
    assert await runtime.answer(outcome.call_id, "ok", Answer("decline")) == 0
    done = await runtime.resume(outcome.call_id)
    assert isinstance(done, Completed) and done.text == "answers: ok=decline\ndone"
    assert hostile.calls("odd_values", arguments) == [None, {"ok": {"action": "decline"}}]


@pytest.mark.parametrize("tool", ["requests_list", "params_string"])
async def test_a_round_that_cannot_be_read_at_all_is_one_protocol_error_and_nothing_is_kept(
    runtime: Runtime, hostile: Hostile, tool: str
) -> None:
    with pytest.raises(ServerProtocolError) as raised:
        await runtime.call_tool(hostile.url, tool, {"test": "unreadable"}, principal="ada")
    message = str(raised.value)
    assert hostile.url in message and "round 1 of call call_" in message and "nothing was kept" in message
    assert await every_call(runtime) == []


@pytest.mark.parametrize(("typed", "action"), [(":d", "decline"), ("d", "decline"), (":c", "cancel"), ("c", "cancel")])
async def test_the_terminal_says_why_a_question_cannot_be_shown_and_offers_only_decline_or_cancel(
    typed: str, action: str
) -> None:
    request = PAYLOADS["odd_values"].input_requests
    (question,) = pending_questions("call_1", 1, {"inputRequests": request})
    console = Console(file=io.StringIO(), width=200, color_system=None)
    prompts: list[str] = []

    def read_line(prompt: str) -> str:
        prompts.append(prompt)
        return typed

    assert await TerminalRenderer(console=console, read_line=read_line).ask(question) == Answer(action)  # type: ignore[arg-type]
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "This question cannot be shown as the server asked it:" in shown
    assert 'property "count": its minimum is "zero", not a number' in shown
    assert prompts == ["[d]ecline, [c]ancel: "]


def who(request: Request) -> str | None:
    return request.headers.get("x-user")


async def test_the_inbox_page_shows_what_is_wrong_refuses_accept_and_records_a_decline(
    runtime: Runtime, hostile: Hostile
) -> None:
    outcome = await runtime.call_tool(hostile.url, "odd_values", {"test": "inbox-http"}, principal="ada")
    assert isinstance(outcome, Parked)
    question = outcome.questions[0]
    path = f"/q/{question.call_id}/1/ok"
    transport = httpx.ASGITransport(app=inbox_app(runtime, principal=who))
    async with httpx.AsyncClient(
        transport=transport, base_url="http://127.0.0.1:8765", headers={"X-User": "ada"}
    ) as page:
        listing = await page.get("/")
        assert listing.status_code == 200 and "question that cannot be shown (decline or cancel it)" in listing.text
        shown = await page.get(path)
        assert shown.status_code == 200, shown.text
        assert "This question cannot be shown as the server asked it:" in shown.text
        assert "its minimum is &quot;zero&quot;, not a number" in shown.text
        assert 'value="accept"' not in shown.text and 'value="decline"' in shown.text
        token = shown.text.split('name="csrf" value="', 1)[1].split('"', 1)[0]
        accepted = await page.post(path, data={"csrf": token, "action": "accept", "f.count": "1"})
        assert (
            accepted.status_code == 400 and "This question cannot be accepted: decline or cancel it." in accepted.text
        )
        declined = await page.post(path, data={"csrf": token, "action": "decline"})
        assert declined.status_code == 303, declined.text
    assert await runtime.calls.answers(question.call_id, 1) == {"ok": Answer("decline")}


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}


@pytest.fixture
def inbox_served(database: str, tmp_path: Path) -> Iterator[str]:
    """`askback inbox serve` for ada over the agent's database, resuming a call once its round is answered."""
    port = free_port()
    log = (tmp_path / "inbox.log").open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "askback",
            "inbox",
            "serve",
            "--database",
            database,
            "--user",
            "ada",
            "--port",
            str(port),
        ],
        env=_clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


async def test_in_chromium_an_unrenderable_form_is_declined_and_the_call_completes_with_the_decline(
    runtime: Runtime, hostile: Hostile, inbox_served: str
) -> None:
    from playwright.async_api import expect

    arguments = {"test": "chromium"}
    outcome = await runtime.call_tool(hostile.url, "odd_values", arguments, principal="ada")
    assert isinstance(outcome, Parked)
    with anyio.fail_after(120):
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=7)) as http:
            assert (await http.get(inbox_served)).status_code == 200
        async with async_chromium() as browser:
            page = await (await async_browser_context(browser, timeout_ms=15_000)).new_page()
            await page.goto(inbox_served)
            await page.get_by_role("link", name="Fill in the odd form").click()
            await expect(page.locator("p.error")).to_contain_text('its minimum is "zero", not a number')
            await expect(page.get_by_role("button", name="Send answer")).to_have_count(0)
            await page.get_by_role("button", name="Decline").click()
            await expect(page.get_by_role("heading", level=1)).to_have_text("Done")
            await expect(page.locator("pre")).to_have_text("answers: ok=decline\ndone")
    assert hostile.calls("odd_values", arguments) == [None, {"ok": {"action": "decline"}}]


def park(database: str, url: str, tool: str, arguments: dict[str, Any]) -> str:
    async def run() -> str:
        async with await Runtime.open(database, renderers=[WebInbox()], settings=settings_for(database)) as rt:
            outcome = await rt.call_tool(url, tool, arguments, principal="ada")
        assert isinstance(outcome, Parked), outcome
        return outcome.call_id

    return anyio.run(run)


def test_askback_inbox_shows_what_is_wrong_refuses_accept_and_declines(hostile: Hostile, database: str) -> None:
    arguments = {"test": "inbox-cli"}
    call_id = park(database, hostile.url, "odd_values", arguments)

    shown = run_askback("inbox", "show", call_id, "--database", database)
    assert shown.returncode == 0 and "Traceback" not in shown.stderr, shown
    assert 'cannot be shown: its required list is a list ["count", {"not": "a name"}]' in shown.stdout
    as_json = run_askback("inbox", "show", call_id, "--json", "--database", database)
    (question,) = json.loads(as_json.stdout)["questions"]
    assert 'property "count": its minimum is "zero", not a number' in question["problem"]
    listed = run_askback("inbox", "list", "--database", database)
    assert listed.returncode == 0 and "(cannot be shown: decline or cancel it)" in listed.stdout, listed

    accepted = run_askback("inbox", "answer", call_id, "ok", "--json", '{"count": 1}', "--database", database)
    assert accepted.returncode == InvalidAnswerError.exit_code, accepted
    assert "cannot be accepted" in only_error_line(accepted.stderr)

    declined = run_askback("inbox", "decline", call_id, "--resume", "--database", database)
    assert declined.returncode == 0 and "Traceback" not in declined.stderr, declined
    assert declined.stdout.strip() == "answers: ok=decline\ndone"
    assert hostile.calls("odd_values", arguments) == [None, {"ok": {"action": "decline"}}]


def test_askback_call_offers_decline_for_a_form_it_cannot_show_and_prints_the_result(
    hostile: Hostile, database: str
) -> None:
    args = ("call", hostile.url, "schema_string", "--args", '{"test": "call-cli"}', "--database", database)
    done = subprocess.run(
        [sys.executable, "-m", "askback", *args],
        env={**_clean_env(), "COLUMNS": "200"},
        input=":d\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done
    assert 'cannot be shown as the server asked it: the requested schema\'s type is "string"' in done.stderr
    assert done.stdout.strip() == "answers: ok=decline\ndone"


def test_askback_call_reports_a_result_it_cannot_read_in_one_line(hostile: Hostile, database: str) -> None:
    done = run_askback("call", hostile.url, "requests_list", "--database", database)
    assert done.returncode == ServerProtocolError.exit_code, done
    assert "its inputRequests are not an object of questions by key" in only_error_line(done.stderr)


# --- point 9: a server that never answers -----------------------------------------------------------------------


async def test_a_first_call_the_server_never_answers_is_a_timeout_error_and_leaves_nothing_parked(
    runtime: Runtime, hostile: Hostile
) -> None:
    with pytest.raises(ServerTimeoutError) as raised:
        await runtime.call_tool(hostile.url, "never_answers", {"test": "first"}, principal="ada")
    message = str(raised.value)
    assert hostile.url in message and f"within {TIMEOUT:g} s" in message and "--timeout" in message
    assert "nothing was kept" in message
    assert await every_call(runtime) == []


async def test_a_resume_the_server_never_answers_leaves_the_call_parked_as_it_was_to_be_resumed_again(
    runtime: Runtime, hostile: Hostile
) -> None:
    arguments = {"test": "resume"}
    outcome = await runtime.call_tool(hostile.url, "never_answers_the_answers", arguments, principal="ada")
    assert isinstance(outcome, Parked)
    call_id = outcome.call_id
    await runtime.answer(call_id, "ok", Answer("accept", {"ok": True}))
    before = await runtime.calls.get(call_id)
    for _ in range(2):
        with pytest.raises(ServerTimeoutError) as raised:
            await runtime.resume(call_id)
        assert f"call {call_id} was resumed; the call stays parked on round 1 with its answers" in str(raised.value)
        after = await runtime.calls.get(call_id)
        assert (after.status, after.round, after.pending_json, after.waiting, after.deadline) == (
            "parked",
            1,
            before.pending_json,
            0,
            before.deadline,
        )
        assert await runtime.calls.answers(call_id, 1) == {"ok": Answer("accept", {"ok": True})}
        assert call_id in await runtime.calls.due(now=runtime.clock.now())
    sent = {"ok": {"action": "accept", "content": {"ok": True}}}
    assert hostile.calls("never_answers_the_answers", arguments) == [None, sent, sent]


def test_askback_call_and_resume_take_a_timeout_and_report_it_in_one_line(hostile: Hostile, database: str) -> None:
    called = run_askback("call", hostile.url, "never_answers", "--timeout", "1", "--database", database)
    assert called.returncode == ServerTimeoutError.exit_code, called
    assert f"{hostile.url} did not answer call call_" in only_error_line(called.stderr)
    assert "within 1 s" in called.stderr

    call_id = park(database, hostile.url, "never_answers_the_answers", {"test": "resume-cli"})
    answered = run_askback(
        "inbox", "answer", call_id, "--json", '{"ok": true}', "--resume", "--timeout", "1", "--database", database
    )
    assert answered.returncode == ServerTimeoutError.exit_code, answered
    assert "stays parked on round 1 with its answers" in only_error_line(answered.stderr)
    resumed = run_askback("inbox", "resume", call_id, "--timeout", "1", "--database", database)
    assert resumed.returncode == ServerTimeoutError.exit_code, resumed
    assert f"askback inbox resume {call_id}" in only_error_line(resumed.stderr)
    shown = json.loads(run_askback("inbox", "show", call_id, "--json", "--database", database).stdout)
    assert (shown["status"], shown["round"], shown["answers"]) == (
        "parked",
        1,
        {"ok": {"action": "accept", "content": {"ok": True}}},
    )


# --- point 10: a schema nested 200 levels -----------------------------------------------------------------------


async def test_a_schema_nested_200_levels_is_one_protocol_error_and_the_sdks_traceback_one_debug_line(
    runtime: Runtime, hostile: Hostile, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="mcp")
    with pytest.raises(ServerProtocolError, match=r"its JSON cannot be parsed \(recursion limit exceeded"):
        await runtime.call_tool(hostile.url, "deep_schema", {"test": "deep"}, principal="ada")
    parsing = [r for r in caplog.records if r.name.startswith("mcp.") and "Error parsing JSON" in r.getMessage()]
    assert parsing, [r.getMessage() for r in caplog.records]
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in parsing)
    assert await every_call(runtime) == []


def test_the_sdks_records_outside_the_runtimes_connections_keep_their_level_and_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from askback.runtime import _sdk

    _sdk._quieten_sdk()
    try:
        raise ValueError("someone else's client")
    except ValueError:
        logging.getLogger("mcp.client.streamable_http").exception("Error parsing JSON response")
    (record,) = [r for r in caplog.records if r.name == "mcp.client.streamable_http"]
    assert record.levelno == logging.ERROR and record.exc_info is not None


def test_askback_call_reports_a_schema_nested_200_levels_in_one_line_without_a_traceback(
    hostile: Hostile, database: str
) -> None:
    done = run_askback("call", hostile.url, "deep_schema", "--database", database)
    assert done.returncode == ServerProtocolError.exit_code, done
    assert "its JSON cannot be parsed" in only_error_line(done.stderr)
