"""The agent runtime drives the tasks a real askback server makes of its calls (the tasks extension, SEP-2663): the
task is parked, its in-task questions wait in the inbox, the answers go back with `tasks/update`, any runtime on the
same database (another process too) polls on, the result comes back, and the deadline cancels the task."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.infra import ROOT
from tests.runtime import _driving as driving
from tests.server._tasks import get, lines, serving_tasks

from askback import load_settings
from askback.clock import FrozenClock
from askback.errors import ServerRefusedError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.runtime._tasks import Asks, Ended, Unchanged, poll_delay, read_task

pytestmark = [pytest.mark.anyio, pytest.mark.http]

AUTH = {"Authorization": "Bearer demo-alice"}


SEEN: list[tuple[str, str | None]] = []


def watching(app: Any) -> Any:
    """`app`, noting the `Mcp-Method` and `Mcp-Name` headers of every request it is sent (in `SEEN`)."""

    async def watched(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            SEEN.append((headers.get("mcp-method", ""), headers.get("mcp-name")))
        await app(scope, receive, send)

    return watched


@pytest.fixture
async def url(db_url: str) -> AsyncIterator[str]:
    SEEN.clear()
    async with serving_tasks(db_url, wrap=watching) as found:
        yield found


@pytest.fixture
def runtime_db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runtime.db'}"


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(1_900_000_000.0)


async def open_runtime(runtime_db: str, clock: FrozenClock, *, answer_wait: float = 3600) -> Runtime:
    return await Runtime.open(
        runtime_db,
        renderers=[WebInbox()],
        clock=clock,
        settings=load_settings(development=True, answer_wait=answer_wait),
        headers=lambda server: AUTH,
    )


@pytest.fixture
async def runtime(runtime_db: str, clock: FrozenClock) -> AsyncIterator[Runtime]:
    rt = await open_runtime(runtime_db, clock)
    try:
        yield rt
    finally:
        await rt.close()


async def parked(clock: FrozenClock, runtime: Runtime, url: str, tool: str, arguments: dict[str, Any]) -> Parked:
    return await driving.parked(clock, runtime, url, tool, arguments, principal="alice")


async def server_task(url: str, task_id: str) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=20) as http:
        reply = await get(http, url, task_id)
    result: dict[str, Any] = reply["result"]
    return result


async def test_a_task_s_question_is_parked_in_the_inbox_and_its_answer_completes_the_task(
    runtime: Runtime, clock: FrozenClock, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    outcome = await parked(clock, runtime, url, "confirm_delete", {"filename": "a.txt", "log": str(log)})
    (question,) = outcome.questions
    assert question.mode == "form" and question.message == "Go ahead?" and outcome.missing == (question.key,)
    record = await runtime.calls.get(outcome.call_id)
    assert record.task_id is not None and record.poll_interval == 0.25
    assert [p.question.key for p in await runtime.inbox(principal="alice")] == [question.key]
    assert (await server_task(url, record.task_id))["status"] == "input_required"

    assert await runtime.answer(outcome.call_id, question.key, Answer("accept", {"ok": True}), by="alice") == 0
    done = await driving.driven(clock, lambda: runtime.resume(outcome.call_id))
    assert isinstance(done, Completed) and done.text == "Deleted a.txt." and not done.cancelled
    assert lines(log) == ["delete a.txt"]
    assert await runtime.inbox(principal="alice") == []
    sent = {method for method, _ in SEEN if method.startswith("tasks/")}
    assert sent == {"tasks/get", "tasks/update"}
    assert {name for method, name in SEEN if method.startswith("tasks/")} == {record.task_id}
    rounds = await runtime.calls.rounds(outcome.call_id)
    assert rounds[outcome.round - 1]["sent"] == {question.key: {"action": "accept", "content": {"ok": True}}}
    again = await runtime.resume(outcome.call_id)  # a finished call gives its result again, sending nothing
    assert isinstance(again, Completed) and again.text == "Deleted a.txt." and lines(log) == ["delete a.txt"]


async def test_a_task_parked_by_one_runtime_is_answered_and_finished_by_another_on_the_same_database(
    runtime: Runtime, runtime_db: str, clock: FrozenClock, url: str, tmp_path: Path
) -> None:
    outcome = await parked(clock, runtime, url, "multi_input", {"log": str(tmp_path / "effects")})
    assert len(outcome.questions) == 2 and (await runtime.calls.get(outcome.call_id)).task_id is not None
    await runtime.close()
    other = await open_runtime(runtime_db, clock)
    try:
        first, second = (p.question for p in await other.inbox(principal="alice"))
        assert await other.answer(outcome.call_id, first.key, Answer("accept", {"ok": True})) == 1
        assert await other.answer(outcome.call_id, second.key, Answer("accept", {"ok": False})) == 0
        done = await driving.driven(clock, lambda: other.resume(outcome.call_id))
    finally:
        await other.close()
    assert isinstance(done, Completed) and done.text == "first=True second=False"
    assert lines(tmp_path / "effects") == ["both"]


async def test_another_process_sends_the_answers_and_polls_the_task_to_its_result(
    runtime: Runtime, runtime_db: str, clock: FrozenClock, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    outcome = await parked(clock, runtime, url, "confirm_delete", {"filename": "b.txt", "log": str(log)})
    assert (await runtime.calls.get(outcome.call_id)).task_id is not None
    await runtime.answer(outcome.call_id, outcome.questions[0].key, Answer("accept", {"ok": True}))
    await runtime.close()
    script = textwrap.dedent(
        f"""
        import anyio, json
        from askback.runtime import Runtime
        from askback.settings import load_settings

        async def main():
            rt = await Runtime.open({runtime_db!r}, settings=load_settings(development=True),
                                    headers=lambda server: {AUTH!r})
            try:
                outcome = await rt.resume({outcome.call_id!r})
                print(json.dumps({{"text": outcome.text, "kind": type(outcome).__name__}}))
            finally:
                await rt.close()

        anyio.run(main)
        """
    )
    done = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
        )
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"text": "Deleted b.txt.", "kind": "Completed"}
    assert lines(log) == ["delete b.txt"]


async def test_a_poll_stopped_with_its_process_is_resumed_by_another_runtime_and_cancelled_at_the_deadline(
    runtime_db: str, clock: FrozenClock, url: str
) -> None:
    first = await open_runtime(runtime_db, clock, answer_wait=30)
    with anyio.move_on_after(15):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(lambda: first.call_tool(url, "endless", {}, principal="alice"))
            await clock.until_sleeping()  # the task is working and polled: the process stops here
            tasks.cancel_scope.cancel()
    (record,) = await first.calls.listing(principal="alice")
    await first.close()
    assert record.status == "parked" and record.task_id is not None and record.questions == ()
    assert (await server_task(url, record.task_id))["status"] == "working"

    second = await open_runtime(runtime_db, clock, answer_wait=30)
    try:
        (done,) = await driving.driven(clock, second.resume_due)
    finally:
        await second.close()
    assert isinstance(done, Completed) and done.cancelled and done.is_error
    assert (await server_task(url, record.task_id))["status"] == "cancelled"


async def test_a_question_left_unanswered_past_the_deadline_cancels_the_task_and_its_effect_never_runs(
    runtime_db: str, clock: FrozenClock, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    rt = await open_runtime(runtime_db, clock, answer_wait=60)
    try:
        outcome = await parked(clock, rt, url, "confirm_delete", {"filename": "c.txt", "log": str(log)})
        assert outcome.deadline is not None
        clock.advance(outcome.deadline - clock.now())
        done = await rt.resume(outcome.call_id)
        task_id = (await rt.calls.get(outcome.call_id)).task_id
    finally:
        await rt.close()
    assert isinstance(done, Completed) and done.cancelled
    assert task_id is not None and (await server_task(url, task_id))["status"] == "cancelled"
    assert lines(log) == []


async def test_a_task_that_fails_fails_the_call_and_a_tool_error_completes_it(
    runtime: Runtime, clock: FrozenClock, url: str
) -> None:
    with pytest.raises(ServerRefusedError, match="the job broke") as refused:
        await driving.driven(clock, lambda: runtime.call_tool(url, "protocol_error_job", {}, principal="alice"))
    assert refused.value.server_code == -32603
    (failed,) = await runtime.calls.listing(status=("failed",))
    assert failed.task_id is not None and "the job broke" in (failed.error or "")
    errored = await driving.driven(clock, lambda: runtime.call_tool(url, "failing_job", {}, principal="alice"))
    assert isinstance(errored, Completed) and errored.is_error and not errored.cancelled


async def test_the_runtime_declares_the_extension_so_a_required_task_runs(
    runtime: Runtime, clock: FrozenClock, url: str
) -> None:
    done = await driving.driven(clock, lambda: runtime.call_tool(url, "required_job", {}, principal="alice"))
    assert isinstance(done, Completed) and done.text == "done"
    (record,) = await runtime.calls.listing(status=("completed",))
    assert record.task_id is not None


async def test_questions_asked_before_the_task_exists_are_answered_then_the_task_is_polled_to_its_result(
    runtime: Runtime, clock: FrozenClock, url: str
) -> None:
    # `named` asks its question as an MRTR round on tools/call (ask_first); the round that brings the answer is
    # answered with the CreateTaskResult, and the call goes on as that task.
    first = await parked(clock, runtime, url, "named", {})
    assert (await runtime.calls.get(first.call_id)).task_id is None
    (question,) = first.questions
    assert question.key == "user_name" and question.message == "Your name?"
    await runtime.answer(first.call_id, question.key, Answer("accept", {"name": "Alice"}), by="alice")

    done = await driving.driven(clock, lambda: runtime.resume(first.call_id))
    assert isinstance(done, Completed) and done.text == "Hello, Alice!", done
    record = await runtime.calls.get(first.call_id)
    assert record.status == "completed" and record.task_id is not None
    assert (await server_task(url, record.task_id))["status"] == "completed"
    rounds = await runtime.calls.rounds(first.call_id)
    assert [r["sent"] for r in rounds[:1]] == [{"user_name": {"action": "accept", "content": {"name": "Alice"}}}]
    assert rounds[1]["asked"]["taskId"] == record.task_id


def test_a_key_parked_once_is_never_parked_again_however_many_polls_show_it() -> None:
    asking = {"elicitation/create": {}}
    task = {"taskId": "t", "status": "input_required", "inputRequests": {"ok.1": asking}, "pollIntervalMs": 500}
    found = read_task("t", task, frozenset())
    assert isinstance(found, Asks) and list(found.pending["inputRequests"]) == ["ok.1"]
    assert read_task("t", task, frozenset({"ok.1"})) == Unchanged(0.5)
    again = {**task, "inputRequests": {"ok.1": asking, "ok.2": asking}}
    later = read_task("t", again, frozenset({"ok.1"}))
    assert isinstance(later, Asks) and list(later.pending["inputRequests"]) == ["ok.2"]
    assert read_task("t", {"taskId": "t", "status": "failed", "error": {"code": 1}}, frozenset()) == Ended(
        "failed", error={"code": 1}
    )


def test_polling_backs_off_from_the_server_s_interval_to_a_bound() -> None:
    delays = [poll_delay(1.0, idle) for idle in range(10)]
    assert delays[0] == 1.0 and delays == sorted(delays) and max(delays) == 8.0
    assert poll_delay(0.0, 0) > 0
