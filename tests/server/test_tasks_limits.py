"""The limits of an MRTR flow inside a task, over real HTTP on loopback with an injected clock, on SQLite and
PostgreSQL: the round cap ends a task that keeps asking with the "Stopped" result, and a task waiting for answers
past its flow deadline ends with the "Expired" result, by the late `tasks/update` or lazily by the next `tasks/get`,
without its handler running again. A task tool whose handler takes the SDK `Context` is refused when it is defined."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from tests._http import audit
from tests.fixtures.tasks_server import ok
from tests.server._tasks import accept, call, get, lines, rpc, serving_tasks, until_status

from askback import Askback, Flow, load_settings
from askback.clock import FrozenClock
from askback.core.round import Limits, expired
from askback.core.state import FlowState
from askback.errors import DefinitionError
from askback.server._tools import check_task_tool
from askback.server.tasks.rows import TaskRecord
from askback.server.tasks.runner import RunEnd, audit_events, lapse, overdue, settle
from askback.server.tasks.status import TaskStatus
from askback.store import Store
from askback.testing import call_round, drive_flow

pytestmark = pytest.mark.anyio

DEADLINE = 900.0
ROUNDS = 3


@pytest.fixture
async def database(any_database: str) -> str:
    """A new SQLite file or PostgreSQL database, migrated."""
    await (await Store.open(any_database, migrate=True)).close()
    return any_database


@pytest.fixture
async def url(database: str, clock: FrozenClock) -> AsyncIterator[str]:
    async with serving_tasks(database, clock, max_rounds=ROUNDS, flow_deadline=DEADLINE) as found:
        yield found


def text_of(result: dict[str, Any]) -> str:
    (content,) = result["content"]
    text: str = content["text"]
    return text


async def waiting(http: httpx.AsyncClient, url: str, tool: str, log: Path) -> tuple[str, str, dict[str, Any]]:
    """Create a task of `tool` and wait for its first question: the task id, the question's wire key, the task."""
    task_id = (await call(http, url, tool, {"log": str(log)}))["result"]["taskId"]
    task = await until_status(http, url, task_id, "input_required")
    (key,) = task["inputRequests"]
    return task_id, key, task


async def update(http: httpx.AsyncClient, url: str, task_id: str, key: str, answer: dict[str, Any]) -> dict[str, Any]:
    reply = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
    result: dict[str, Any] = reply["result"]
    return result


# --- over HTTP ------------------------------------------------------------------------------------------------


@pytest.mark.http
async def test_a_task_that_keeps_asking_is_stopped_by_the_round_cap_as_an_mrtr_call_is(
    http: httpx.AsyncClient, url: str, tmp_path: Path, database: str
) -> None:
    log = tmp_path / "effects"
    task_id, key, _ = await waiting(http, url, "survey", log)
    seen = [key]
    for _ in range(ROUNDS):
        await update(http, url, task_id, key, accept(ok=True))
        task = await until_status(http, url, task_id, "input_required", "completed")
        if task["status"] == "completed":
            break
        (key,) = task["inputRequests"]
        assert key not in seen
        seen.append(key)
    assert task["status"] == "completed" and len(seen) == ROUNDS
    stopped = text_of(task["result"])
    assert stopped.startswith(f"Stopped: this request asked {ROUNDS} rounds of questions")
    assert lines(log) == []

    yes = ElicitResult(action="accept", content={"ok": True})
    mrtr = await drive_flow(url, "survey", {"log": str(log)}, lambda _k, _p: yes, token="demo-alice", max_rounds=9)
    final = mrtr[-1][1].result
    assert isinstance(final, CallToolResult) and len(mrtr) == ROUNDS + 1
    assert final.content[0].text == stopped  # type: ignore[union-attr]
    assert bool(task["result"].get("isError")) == final.is_error
    assert lines(log) == []

    trail = [(e.event, e.outcome) for e in await audit(database, tool="survey") if e.detail in ("a task", "in a task")]
    assert trail[-1] == ("completed", "too_many_rounds")
    assert [event for event, _ in trail].count("asked") == ROUNDS


@pytest.mark.http
async def test_answers_after_the_deadline_end_the_task_expired_without_running_its_handler_again(
    http: httpx.AsyncClient, url: str, clock: FrozenClock, tmp_path: Path, database: str
) -> None:
    log = tmp_path / "effects"
    task_id, key, _ = await waiting(http, url, "counted", log)
    assert lines(log) == ["run"]
    clock.advance(DEADLINE + 1)
    ack = await update(http, url, task_id, key, accept(ok=True))
    assert ack == {"resultType": "complete", **{k: v for k, v in ack.items() if k == "_meta"}}

    ended = (await get(http, url, task_id))["result"]
    assert ended["status"] == "completed" and "inputRequests" not in ended
    assert text_of(ended["result"]) == expired(FlowState("f", started=0), Limits(DEADLINE, ROUNDS)).text
    assert lines(log) == ["run"]  # the handler did not run again, and its effect never ran
    trail = [(e.event, e.outcome, e.detail) for e in await audit(database, tool="counted")]
    assert trail == [("asked", None, "in a task"), ("completed", "expired", "a task")]

    again = await update(http, url, task_id, key, accept(ok=True))
    assert again["resultType"] == "complete"
    assert (await get(http, url, task_id))["result"] == ended
    assert lines(log) == ["run"]


@pytest.mark.http
async def test_an_mrtr_answer_after_the_deadline_gets_the_same_expired_text_as_a_task(
    http: httpx.AsyncClient, url: str, clock: FrozenClock, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    task_id, key, _ = await waiting(http, url, "counted", log)
    first = await call_round(url, "counted", {"log": str(log)}, token="demo-alice")
    assert isinstance(first.result, InputRequiredResult)
    clock.advance(DEADLINE + 1)
    await update(http, url, task_id, key, accept(ok=True))
    late = await call_round(
        url,
        "counted",
        {"log": str(log)},
        token="demo-alice",
        responses={"ok": ElicitResult(action="accept", content={"ok": True})},
        request_state=first.result.request_state,
    )
    assert isinstance(late.result, CallToolResult)
    task = (await get(http, url, task_id))["result"]
    assert text_of(task["result"]) == late.result.content[0].text  # type: ignore[union-attr]
    assert bool(task["result"].get("isError")) == late.result.is_error
    assert lines(log) == ["run", "run"]


@pytest.mark.http
async def test_a_task_left_waiting_past_its_deadline_ends_at_the_next_get(
    http: httpx.AsyncClient, url: str, clock: FrozenClock, tmp_path: Path, database: str
) -> None:
    log = tmp_path / "effects"
    task_id, key, first = await waiting(http, url, "counted", log)
    clock.advance(DEADLINE)
    still = (await get(http, url, task_id))["result"]
    assert still == first  # at the deadline itself it may still wait, and a read changes nothing

    clock.advance(1)
    ended = (await get(http, url, task_id))["result"]
    assert ended["status"] == "completed" and "inputRequests" not in ended
    assert text_of(ended["result"]).startswith("Expired: this request waited more than 15 minutes")
    assert ended["lastUpdatedAt"] != first["lastUpdatedAt"]
    clock.advance(60)
    assert (await get(http, url, task_id))["result"] == ended  # lastUpdatedAt moves only when the task does
    await update(http, url, task_id, key, accept(ok=True))
    assert (await get(http, url, task_id))["result"] == ended
    assert lines(log) == ["run"]
    trail = [(e.event, e.outcome) for e in await audit(database, tool="counted")]
    assert trail == [("asked", None), ("completed", "expired")]


@pytest.mark.http
async def test_a_task_answered_just_in_time_runs_and_completes(
    http: httpx.AsyncClient, url: str, clock: FrozenClock, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    task_id, key, _ = await waiting(http, url, "counted", log)
    clock.advance(DEADLINE)
    await update(http, url, task_id, key, accept(ok=True))
    done = await until_status(http, url, task_id, "completed")
    assert text_of(done["result"]) == "Acted." and not done["result"].get("isError")
    assert lines(log) == ["run", "run", "act"]


@pytest.mark.http
async def test_a_partial_answer_after_the_deadline_ends_the_task_too(
    http: httpx.AsyncClient, url: str, clock: FrozenClock, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    task_id = (await call(http, url, "multi_input", {"log": str(log)}))["result"]["taskId"]
    one, _two = sorted((await until_status(http, url, task_id, "input_required"))["inputRequests"])
    clock.advance(DEADLINE + 1)
    await update(http, url, task_id, one, accept(ok=True))
    ended = (await get(http, url, task_id))["result"]
    assert ended["status"] == "completed" and text_of(ended["result"]).startswith("Expired:")
    assert lines(log) == []


# --- the decisions, as data -----------------------------------------------------------------------------------

LIMITS = Limits(flow_deadline=600, max_rounds=3)
T0 = 1_800_000_000.0


def record(status: TaskStatus = TaskStatus.INPUT_REQUIRED, **changes: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "task_id": "t1",
        "principal": "alice",
        "scopes": (),
        "tool": "counted",
        "arguments": {},
        "capabilities": {},
        "status": status,
        "status_message": "Waiting for your answer." if status == TaskStatus.INPUT_REQUIRED else None,
        "created_at": T0,
        "updated_at": T0 + 5,
        "expires_at": T0 + 3600,
        "ttl_ms": 3_600_000,
        "poll_ms": 1000,
        "flow": FlowState("flow-1", started=T0, round=1),
        "outstanding": {"ok.1": {"key": "ok", "request": {"method": "elicitation/create"}}},
        "responses": {"first": accept(ok=True)},
    }
    return TaskRecord(**(fields | changes))


EXPIRED = RunEnd(result={"content": [{"type": "text", "text": "Expired: ..."}]}, reason="expired")


def test_a_waiting_task_is_overdue_only_once_its_deadline_has_passed() -> None:
    assert overdue(record(), now=T0 + 600, limits=LIMITS) is None
    end = overdue(record(), now=T0 + 600.5, limits=LIMITS)
    assert end == expired(record().flow, LIMITS)
    assert end is not None and end.reason == "expired" and end.text.startswith("Expired: ")
    longer = Limits(flow_deadline=3600, max_rounds=3)
    assert overdue(record(), now=T0 + 601, limits=longer) is None


def test_a_task_that_is_not_waiting_is_never_overdue() -> None:
    late = T0 + 10_000
    for status in (TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
        assert overdue(record(status, outstanding={}), now=late, limits=LIMITS) is None


def test_a_lapsed_task_completes_with_the_result_and_drops_what_it_waited_for() -> None:
    after = lapse(record(), EXPIRED, now=T0 + 700)
    assert after is not None
    assert after.status == TaskStatus.COMPLETED and after.result == EXPIRED.result and after.error is None
    assert after.outstanding == {} and after.responses == {} and after.status_message is None
    assert after.updated_at == T0 + 700 and after.lease_owner is None and after.lease_until is None
    assert after.flow == record().flow


def test_a_task_no_longer_waiting_does_not_lapse() -> None:
    for status in (TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.CANCELLED):
        assert lapse(record(status, outstanding={}), EXPIRED, now=T0 + 700) is None


def test_an_end_by_a_limit_is_audited_with_its_reason_and_a_plain_one_with_the_status() -> None:
    lapsed = lapse(record(), EXPIRED, now=T0 + 700)
    assert lapsed is not None
    (event,) = audit_events(lapsed, EXPIRED, at=T0 + 700, instance="i1")
    assert (event.event, event.outcome, event.detail, event.flow_id) == ("completed", "expired", "a task", "flow-1")
    working = record(TaskStatus.WORKING, lease_owner="i1", lease_until=T0 + 30)
    returned = RunEnd(result={"content": []})
    settled = settle(working, returned, owner="i1", now=T0 + 10)
    assert settled is not None
    (plain,) = audit_events(settled, returned, at=T0 + 10, instance="i1")
    assert plain.outcome == "completed"


# --- the definition check -------------------------------------------------------------------------------------


async def _with_context(note: str, ctx: Context) -> str:  # type: ignore[type-arg]
    return note


async def _with_flow(note: str, flow: Flow) -> str:
    return note


@pytest.mark.parametrize("task", ["optional", "required"])
def test_a_task_tool_whose_handler_takes_the_sdk_context_is_refused_when_defined(task: Any) -> None:
    app = Askback("limits", settings=load_settings(state_keys=secrets.token_urlsafe(32)))
    with pytest.raises(DefinitionError) as refused:
        app.tool(name="notes", task=task)(_with_context)
    message = str(refused.value)
    assert "'notes'" in message and "'ctx'" in message and "task" in message
    assert "Flow" in message and "flow.caller" in message
    assert "notes" not in app.task_tools
    app.tool(name="plain")(_with_context)  # the same handler as an ordinary tool is fine


def test_a_task_tool_with_a_flow_passes_and_keeps_its_questions_asked_first() -> None:
    assert check_task_tool("notes", _with_flow, [ok]) == (ok,)
    with pytest.raises(DefinitionError, match="keys must differ"):
        check_task_tool("notes", _with_flow, [ok, ok])
