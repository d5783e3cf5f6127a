"""A call's outcome follows what its task really did when the runtime asks the server to cancel it at the call's
deadline. Against a real `askback serve`, whose `gated` task waits at gates (named pipes) the test opens: a cancel
before the task's effect ends the call cancelled; a cancel the server turns down, the effect under way, keeps the
call waiting on the server until the task completes with its result; a task still working when
`ASKBACK_CALL_CANCEL_WAIT` runs out ends the call unconfirmed, never cancelled. The runtime's clock is frozen and
moved by the test."""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
import pytest
from tests.infra import Instance, wait_until
from tests.runtime import _driving as driving
from tests.server.test_tasks_cancel import release

from askback import load_settings
from askback.clock import FrozenClock
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.runtime._tasks import Ended, Unchanged, Unconfirmed, after_cancel

pytestmark = [pytest.mark.anyio, pytest.mark.http]

T = TypeVar("T")
AUTH = {"Authorization": "Bearer demo-alice"}
WAIT = 60.0  # the call's answer wait: its deadline


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('server') / 'server.db'}"
    env = {
        "ASKBACK_DATABASE_URL": database,
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DEMO_AUTH": "true",
    }
    instance = Instance("tests.fixtures.tasks_server:server", env)
    instance.start()
    try:
        yield instance.url
    finally:
        instance.stop()


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(1_900_000_000.0)


async def open_runtime(tmp_path: Path, clock: FrozenClock, **settings: float) -> Runtime:
    return await Runtime.open(
        f"sqlite:///{tmp_path / 'runtime.db'}",
        renderers=[WebInbox()],
        clock=clock,
        settings=load_settings(development=True, answer_wait=WAIT, **settings),
        headers=lambda server: AUTH,
    )


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


async def seen(log: Path, line: str) -> None:
    await anyio.to_thread.run_sync(lambda: wait_until(lambda: line in lines(log), what=f"{line!r} in the task's log"))


async def until_waiting(clock: FrozenClock, work: Callable[[], Awaitable[T]]) -> T | None:
    """Run `work` until it returns (what it returned) or waits on the clock (None: it is stopped there, as a process
    that exits; the call waits in the store)."""
    done: list[T] = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:

            async def go() -> None:
                done.append(await work())
                tasks.cancel_scope.cancel()

            async def sleeping() -> None:
                await clock.until_sleeping()
                tasks.cancel_scope.cancel()

            tasks.start_soon(go)
            tasks.start_soon(sleeping)
    return done[0] if done else None


async def answered_and_started(runtime: Runtime, clock: FrozenClock, server: str, log: Path) -> Parked:
    """A `gated` call, its question answered and sent, the task's handler waiting at its first gate."""
    os.mkfifo(f"{log}.before")
    os.mkfifo(f"{log}.during")
    parked = await driving.parked(clock, runtime, server, "gated", {"log": str(log)}, principal="alice")
    (question,) = parked.questions
    await runtime.answer(parked.call_id, question.key, Answer("accept", {"ok": True}))
    assert await until_waiting(clock, lambda: runtime.resume(parked.call_id)) is None  # sent; polling the task
    await seen(log, "ready")
    return parked


async def task_status(server: str, runtime: Runtime, call_id: str) -> str:
    task_id = (await runtime.calls.get(call_id)).task_id
    assert task_id is not None
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    headers = {**AUTH, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tasks/get", "Mcp-Name": task_id}
    body = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id, "_meta": meta}}
    async with httpx.AsyncClient(timeout=20) as http:
        reply = await http.post(server, json=body, headers={**headers, "Accept": "application/json, text/event-stream"})
    status: str = reply.json()["result"]["status"]
    return status


async def test_a_call_past_its_deadline_ends_as_its_task_really_ended_cancelled_before_its_effect_completed_after(
    server: str, clock: FrozenClock, tmp_path: Path
) -> None:
    runtime = await open_runtime(tmp_path, clock)
    try:
        # The deadline comes before the effect: the server cancels the task, and the call ends cancelled.
        early = tmp_path / "early"
        call = await answered_and_started(runtime, clock, server, early)
        clock.advance(WAIT)
        cancelled = await until_waiting(clock, lambda: runtime.resume(call.call_id))
        assert isinstance(cancelled, Completed) and cancelled.cancelled
        release(Path(f"{early}.before"))
        await seen(early, "left")
        assert "deploy" not in lines(early)
        assert await task_status(server, runtime, call.call_id) == "cancelled"

        # The deadline comes while the effect runs: the server turns the cancel down, the call waits on, and ends
        # with the task's own result, not as cancelled.
        late = tmp_path / "late"
        call = await answered_and_started(runtime, clock, server, late)
        release(Path(f"{late}.before"))
        await seen(late, "deploy")
        clock.advance(WAIT)
        assert await until_waiting(clock, lambda: runtime.resume(call.call_id)) is None  # waits on the server
        record = await runtime.calls.get(call.call_id)
        assert record.status == "parked" and record.questions == ()
        release(Path(f"{late}.during"))
        done = await driving.driven(clock, lambda: runtime.resume(call.call_id))
        assert isinstance(done, Completed) and done.text == "Deployed." and not done.is_error
        assert not done.cancelled and not done.cancel_unconfirmed
        assert lines(late).count("deploy") == 1
    finally:
        await runtime.close()


async def test_a_task_still_working_when_the_cancel_wait_runs_out_ends_the_call_unconfirmed_never_cancelled(
    server: str, clock: FrozenClock, tmp_path: Path
) -> None:
    runtime = await open_runtime(tmp_path, clock, call_cancel_wait=300)
    log = tmp_path / "stuck"
    try:
        call = await answered_and_started(runtime, clock, server, log)
        release(Path(f"{log}.before"))
        await seen(log, "deploy")
        clock.advance(WAIT)
        assert await until_waiting(clock, lambda: runtime.resume(call.call_id)) is None
        assert (await runtime.calls.get(call.call_id)).deadline == clock.now() + 300

        # Polled up to the end of the wait, the task still working: the call ends, saying it may still complete.
        done = await driving.driven(clock, lambda: runtime.resume(call.call_id), step=30)
        assert isinstance(done, Completed) and done.is_error and done.cancel_unconfirmed and not done.cancelled
        assert "did not confirm the cancel" in done.text and "may still complete" in done.text
        assert done.text.startswith("Not cancelled:")
        assert (await runtime.resume(call.call_id)) == done  # ended: the same outcome again, nothing sent
        assert await task_status(server, runtime, call.call_id) == "working"
    finally:
        release(Path(f"{log}.during"))
        await runtime.close()
    await seen(log, "left")


def test_after_a_cancel_an_ended_task_counts_as_it_ended_and_one_still_working_waits_then_ends_unconfirmed() -> None:
    working = {"taskId": "t", "status": "working", "pollIntervalMs": 500}
    assert after_cancel("t", working, over=False, waited=600) == Unchanged(0.5)
    asking = {**working, "status": "input_required", "inputRequests": {"ok.1": {"method": "elicitation/create"}}}
    assert after_cancel("t", asking, over=False, waited=600) == Unchanged(0.5)  # nobody is asked past the deadline
    gave_up = after_cancel("t", working, over=True, waited=600)
    assert isinstance(gave_up, Unconfirmed)
    outcome = Completed("call", gave_up.result, rounds=2)
    assert outcome.cancel_unconfirmed and outcome.is_error and not outcome.cancelled
    assert "600 seconds" in outcome.text and "may still complete" in outcome.text
    completed = {"taskId": "t", "status": "completed", "result": {"content": [{"type": "text", "text": "Deployed."}]}}
    ended = after_cancel("t", completed, over=True, waited=600)
    assert isinstance(ended, Ended) and ended.status == "completed"
    assert Completed("call", ended.result or {}, rounds=2).text == "Deployed."
    # A completed task's result cannot pass for a cancelled or unconfirmed one.
    for claimed in ("cancelled", "working"):
        posing = {**completed, "result": {"_meta": {"io.modelcontextprotocol/tasks": {"status": claimed}}}}
        ended = after_cancel("t", posing, over=True, waited=600)
        assert isinstance(ended, Ended) and ended.status == "completed"
        told = Completed("call", ended.result or {}, rounds=2)
        assert not told.cancelled and not told.cancel_unconfirmed
    cancelled = after_cancel("t", {"taskId": "t", "status": "cancelled"}, over=False, waited=600)
    assert isinstance(cancelled, Ended) and Completed("call", cancelled.result or {}, rounds=2).cancelled
