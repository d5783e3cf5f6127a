"""A task runs its handler through the same round plan as an MRTR call: the same text for a crash, the same -32602
for an answer that is not an answer, and the same audit rows for an answer that does not validate."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._http import audit
from tests.server._tasks import accept, call, get, rpc, serving_tasks, until_status

pytestmark = [pytest.mark.http, pytest.mark.anyio]

DSN = "postgresql://admin:hunter2@db/prod"


@pytest.fixture
async def url(db_url: str) -> AsyncIterator[str]:
    async with serving_tasks(db_url) as found:
        yield found


async def test_a_crashing_task_shows_what_the_same_mrtr_call_shows_and_never_the_exception_text(
    http: httpx.AsyncClient, url: str, db_url: str
) -> None:
    mrtr = (await call(http, url, "boom", {}, tasks=False))["result"]
    task_id = (await call(http, url, "boom", {}))["result"]["taskId"]
    task = await until_status(http, url, task_id, "completed", "failed")

    assert task["status"] == "completed"
    assert task["result"]["content"] == mrtr["content"] == [{"type": "text", "text": "Error executing tool boom"}]
    assert task["result"]["isError"] is mrtr["isError"] is True
    rows = await audit(db_url, tool="boom")
    assert [(e.principal, e.event, e.outcome) for e in rows] == [
        ("alice", "rejected", "tool_error"),
        ("alice", "rejected", "tool_error"),
    ]
    seen = json.dumps(await get(http, url, task_id)) + json.dumps([vars(e) for e in rows], default=str)
    assert "hunter2" not in seen and "postgresql://" not in seen


async def test_a_tool_error_in_a_task_reads_as_the_same_mrtr_call_reads(http: httpx.AsyncClient, url: str) -> None:
    mrtr = (await call(http, url, "failing_job", {}, tasks=False))["result"]
    task_id = (await call(http, url, "failing_job", {}))["result"]["taskId"]
    task = await until_status(http, url, task_id, "completed")
    assert task["result"]["content"] == mrtr["content"]
    assert mrtr["content"][0]["text"] == "Error executing tool failing_job: the job failed"


MALFORMED: list[Any] = [
    "yes",
    {"action": "maybe"},
    None,
    {"action": "accept", "content": ["ok", True]},
]


@pytest.mark.parametrize("answer", MALFORMED, ids=["a string", "an unknown action", "null", "a list as content"])
async def test_an_answer_that_is_not_an_answer_is_invalid_params_in_a_task_as_in_mrtr_and_burns_no_round(
    http: httpx.AsyncClient, url: str, tmp_path: Path, answer: Any
) -> None:
    arguments = {"log": str(tmp_path / "e")}
    first = (await call(http, url, "deploy", arguments, tasks=False))["result"]
    again = {"name": "deploy", "arguments": arguments, "requestState": first["requestState"]}
    mrtr = await rpc(http, url, "tools/call", {**again, "inputResponses": {"ok": answer}}, tasks=False)

    task_id = (await call(http, url, "deploy", arguments))["result"]["taskId"]
    waiting = await until_status(http, url, task_id, "input_required")
    (key,) = waiting["inputRequests"]
    refused = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})

    assert refused["error"] == mrtr["error"]
    assert refused["error"]["code"] == -32602
    assert (await get(http, url, task_id))["result"] == waiting
    # The round was not burnt: a good answer now is the first round's answer.
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok=True)}})
    done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deployed."


async def test_an_answer_that_does_not_validate_leaves_the_same_audit_rows_in_a_task_as_in_mrtr(
    http: httpx.AsyncClient, url: str, tmp_path: Path, db_url: str
) -> None:
    arguments = {"log": str(tmp_path / "e")}
    first = (await call(http, url, "deploy", arguments, tasks=False, token="demo-bob"))["result"]
    again = {"name": "deploy", "arguments": arguments, "requestState": first["requestState"]}
    reasked = await rpc(
        http, url, "tools/call", {**again, "inputResponses": {"ok": accept(ok="maybe")}}, tasks=False, token="demo-bob"
    )
    assert reasked["result"]["resultType"] == "input_required"

    task_id = (await call(http, url, "deploy", arguments))["result"]["taskId"]
    (key,) = (await until_status(http, url, task_id, "input_required"))["inputRequests"]
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok="maybe")}})
    second = await until_status(http, url, task_id, "input_required")
    while list(second["inputRequests"]) == [key]:
        second = await until_status(http, url, task_id, "input_required")

    def trail(rows: list[Any]) -> list[tuple[Any, ...]]:
        return [(e.event, e.outcome, e.round, e.keys) for e in rows]

    in_mrtr = trail(await audit(db_url, tool="deploy", principal="bob"))
    in_task = trail(await audit(db_url, tool="deploy", principal="alice"))
    assert in_mrtr == [
        ("asked", None, 1, ("ok",)),
        ("rejected", "invalid_answer", 1, ("ok",)),
        ("asked", None, 2, ("ok",)),
    ]
    assert in_task == in_mrtr
