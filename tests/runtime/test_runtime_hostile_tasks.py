"""A hostile server's tasks reach the person through the same guards as its MRTR rounds: the hostile server
(`tests/fixtures/hostile_server.py`) makes a task of a call that declares the extension with `"as_task": true`, and
puts every attack of `hostile_text.ATTACKS` in the task's question (message, title, description, choice label), its
status message, its result and its error. `askback call` and the inbox commands, in a real pseudo-terminal, show
each escape and let none of those bytes through; a form the runtime cannot render is parked with what is wrong, as
in an MRTR round. A later round answered with a task that names none fails the call with what was wrong; one whose
id is full of escapes is polled to its result."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_runtime_terminal import Terminal
from test_runtime_terminal_text import askback_quietly, assert_nothing_raw, assert_shown, pick_the_first_and_send
from tests.fixtures.hostile_server import serving_hostile
from tests.fixtures.hostile_text import ATTACKS, EVERY_ATTACK

from askback.errors import ServerProtocolError, ServerRefusedError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port

pytestmark = [pytest.mark.http, pytest.mark.anyio]

AS_TASK = json.dumps({"as_task": True})


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    log = tmp_path_factory.mktemp("hostile-tasks") / "calls.jsonl"
    with serving_hostile(free_port(), env={"HOSTILE_SERVER_NAME": EVERY_ATTACK, "HOSTILE_LOG": str(log)}) as url:
        yield url, log


def task_methods(log: Path, tool: str) -> list[str]:
    """What the server logged of `tool`'s tasks: `created`, then each `tasks/update` and `tasks/cancel`."""
    return [e["method"] for e in map(json.loads, log.read_text().splitlines()) if "method" in e and e["tool"] == tool]


def test_askback_call_shows_a_task_s_hostile_question_and_result_made_visible(
    hostile: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = hostile
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    args = ("call", url, "escapes", "--args", AS_TASK, "--database", database, "--user", "ada")
    with Terminal(*args) as term:
        term.expect("1. A ")
        pick_the_first_and_send(term)
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, *ATTACKS)  # the question's every part, the server's name, and the task's result
    assert "Result \\x1b]52;c;" in term.shown
    assert task_methods(log, "escapes") == ["created", "tasks/update"]  # a task, answered through tasks/update


def test_a_failed_task_s_hostile_error_is_one_line_with_every_attack_made_visible(
    hostile: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = hostile
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with Terminal("call", url, "escapes_in_error", "--args", AS_TASK, "--database", database) as term:
        term.expect("error: ")
        status = term.finish()
    assert status == 5, term.shown
    assert "failed on the server" in term.shown
    assert_nothing_raw(term)
    assert_shown(term, "osc52", "osc8", "clear", "title", "dcs", "rlo", "isolate", "zwsp", "bom", "markup")


def test_inbox_list_and_show_of_a_parked_task_show_every_attack_made_visible(
    hostile: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = hostile
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    parked = askback_quietly(
        "call", url, "escapes_in_key", "--args", AS_TASK, "--park", "--database", database, "--user", "ada"
    )
    assert parked.returncode == 0, parked.stderr
    call_id = parked.stdout.decode().strip()
    assert call_id.startswith("call_"), parked
    assert task_methods(log, "escapes_in_key") == ["created"]
    for command in (("inbox", "list"), ("inbox", "show", call_id)):
        with Terminal(*command, "--database", database) as term:
            term.expect(call_id)
            assert term.finish() == 0, term.shown
        assert_nothing_raw(term)
        assert_shown(term, "osc52", "rlo")  # the input key, the server's name


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    settings = load_settings(database_url=database, development=True, answer_wait=3600)
    opened = await Runtime.open(database, renderers=[WebInbox()], settings=settings, timeout=5)
    try:
        yield opened
    finally:
        await opened.close()


async def test_an_in_task_form_the_runtime_cannot_render_is_parked_with_what_is_wrong_and_declined(
    runtime: Runtime, hostile: tuple[str, Path]
) -> None:
    url, _ = hostile
    outcome = await runtime.call_tool(url, "odd_values", {"as_task": True}, principal="ada")
    assert isinstance(outcome, Parked), outcome
    (question,) = outcome.questions
    assert question.problem is not None and 'property "count": its minimum is "zero", not a number' in question.problem
    record = await runtime.calls.get(outcome.call_id)
    assert record.task_id is not None
    assert await runtime.answer(outcome.call_id, question.key, Answer("decline")) == 0
    done = await runtime.resume(outcome.call_id)
    assert isinstance(done, Completed) and done.text == "answers: ok=decline\ndone"


@pytest.mark.parametrize(
    "later", [{}, {"taskId": 12}, {"taskId": ""}, {"taskId": None}], ids=["none", "12", "", "null"]
)
async def test_a_later_round_answered_with_a_task_that_names_none_fails_the_call_with_what_was_wrong(
    runtime: Runtime, hostile: tuple[str, Path], later: dict[str, object]
) -> None:
    url, _ = hostile
    outcome = await runtime.call_tool(url, "escapes", {"task_on_retry": later}, principal="ada")
    assert isinstance(outcome, Parked), outcome
    (question,) = outcome.questions
    await runtime.answer(outcome.call_id, question.key, Answer("decline"))
    with pytest.raises(ServerProtocolError) as unreadable:
        await runtime.resume(outcome.call_id)
    said = str(unreadable.value)
    assert f"answered call {outcome.call_id} with a task that has no taskId; the call is marked failed" in said
    record = await runtime.calls.get(outcome.call_id)
    assert (record.status, record.task_id) == ("failed", None)
    with pytest.raises(ServerRefusedError):  # it stays failed, and says why
        await runtime.resume(outcome.call_id)


async def test_a_later_round_s_task_with_an_id_full_of_escapes_is_polled_to_its_result(
    runtime: Runtime, hostile: tuple[str, Path]
) -> None:
    url, _ = hostile
    task_id = "t\r\nX-Injected: 1\x1b]52;c;aGk=\x07\u202e"
    later = {"taskId": task_id, "pollIntervalMs": -5}
    outcome = await runtime.call_tool(url, "escapes", {"task_on_retry": later}, principal="ada")
    assert isinstance(outcome, Parked), outcome
    (question,) = outcome.questions
    await runtime.answer(outcome.call_id, question.key, Answer("decline"))
    done = await runtime.resume(outcome.call_id)
    assert isinstance(done, Completed), done
    assert done.text.startswith(f"answers: {question.key}=decline")
    record = await runtime.calls.get(outcome.call_id)
    assert record.task_id == task_id and record.poll_interval is not None and record.poll_interval > 0


async def test_a_task_poll_answered_with_what_is_not_json_leaves_the_call_waiting_and_never_quotes_the_body(
    runtime: Runtime, hostile: tuple[str, Path]
) -> None:
    url, _ = hostile
    arguments = {"as_task": True, "get_garbage": True, "task_id": "garbage-1"}
    with pytest.raises(ServerProtocolError) as unreadable:
        await runtime.call_tool(url, "escapes", arguments, principal="ada")
    said = str(unreadable.value)
    assert "cannot be parsed" in said and "not json at all" not in said and "pydantic" not in said, said
    (record,) = [r for r in await runtime.calls.listing() if r.task_id == "garbage-1"]
    # One unreadable answer to a poll is not the task's end: the call waits on the server, as it did.
    assert record.status == "parked" and record.error is None
    with pytest.raises(ServerProtocolError):
        await runtime.resume(record.id)
    assert (await runtime.calls.get(record.id)).status == "parked"
