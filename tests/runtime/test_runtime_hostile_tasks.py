"""A hostile server's tasks reach the person through the same guards as its MRTR rounds: the hostile server
(`tests/fixtures/hostile_server.py`) makes a task of a call that declares the extension with `"as_task": true`, and
puts every attack of `hostile_text.ATTACKS` in the task's question (message, title, description, choice label), its
status message, its result and its error. `askback call` and the inbox commands, in a real pseudo-terminal, show
each escape and let none of those bytes through; a form the runtime cannot render is parked with what is wrong, as
in an MRTR round."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from test_runtime_terminal import Terminal
from test_runtime_terminal_text import askback_quietly, assert_nothing_raw, assert_shown, pick_the_first_and_send
from tests.fixtures.hostile_server import serving_hostile
from tests.fixtures.hostile_text import ATTACKS, EVERY_ATTACK

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
