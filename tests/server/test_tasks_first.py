"""Questions a task tool asks before its task exists (`ask_first`), over real HTTP on loopback: they are an MRTR
round like any other, so an answer is taken only under a `requestState` this server sealed for the call and the
person, validated as MRTR validates it, and audited as the same call without the extension is."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests._http import audit
from tests.server._tasks import TASKS, accept, call, lines, rpc, serving_tasks, until_status

pytestmark = [pytest.mark.http, pytest.mark.anyio]


@pytest.fixture
async def url(db_url: str) -> AsyncIterator[str]:
    async with serving_tasks(db_url) as found:
        yield found


async def raw_call(http: httpx.AsyncClient, url: str, params: dict[str, Any]) -> dict[str, Any]:
    """`tools/call` declaring the extension, its body as JSON with every non-ASCII character escaped (so a lone
    surrogate goes as `\\ud800`, as a client in another language may send it)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "extensions": {TASKS: {}}},
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {**params, "_meta": meta}}
    headers = {
        "Authorization": "Bearer demo-alice",
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Mcp-Method": "tools/call",
        "Mcp-Name": params["name"],
    }
    reply = await http.post(url, content=json.dumps(body).encode("ascii"), headers=headers)
    message: dict[str, Any] = reply.json()
    return message


def trail(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [(e.event, e.outcome, e.round, e.keys, e.action) for e in rows]


async def test_answers_without_a_sealed_state_open_no_task_run_no_effect_and_are_audited_as_in_mrtr(
    http: httpx.AsyncClient, url: str, tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "effects"
    unsealed = {"name": "approved", "arguments": {"log": str(log)}, "inputResponses": {"ok": accept(ok=True)}}
    in_mrtr = (await rpc(http, url, "tools/call", unsealed, tasks=False, token="demo-bob"))["result"]
    assert in_mrtr["resultType"] == "input_required"
    for _ in range(3):
        # A client retrying the same request: each is asked again under a sealed state, none makes a task.
        again = (await rpc(http, url, "tools/call", unsealed))["result"]
        assert again["resultType"] == "input_required" and "taskId" not in again, again
        assert list(again["inputRequests"]) == ["ok"] and again["requestState"]
    assert lines(log) == []

    mrtr_rows = trail(await audit(db_url, tool="approved", principal="bob"))
    assert mrtr_rows == [
        ("answered", None, 0, ("ok",), "accept"),
        ("rejected", "ignored_answer", 0, ("ok",), None),
        ("asked", None, 1, ("ok",), None),
    ]
    assert trail(await audit(db_url, tool="approved", principal="alice")) == mrtr_rows * 3


async def test_the_two_step_flow_leaves_the_audit_rows_of_mrtr_and_a_replay_opens_no_second_task(
    http: httpx.AsyncClient, url: str, tmp_path: Path, db_url: str
) -> None:
    mrtr_log, task_log = tmp_path / "mrtr", tmp_path / "task"
    first = (await call(http, url, "approved", {"log": str(mrtr_log)}, tasks=False, token="demo-bob"))["result"]
    final = {
        "name": "approved",
        "arguments": {"log": str(mrtr_log)},
        "requestState": first["requestState"],
        "inputResponses": {"ok": accept(ok=True)},
    }
    done = (await rpc(http, url, "tools/call", final, tasks=False, token="demo-bob"))["result"]
    assert done["content"][0]["text"] == "Approved."

    first = (await call(http, url, "approved", {"log": str(task_log)}))["result"]
    assert first["resultType"] == "input_required" and list(first["inputRequests"]) == ["ok"]
    final = {**final, "arguments": {"log": str(task_log)}, "requestState": first["requestState"]}
    created = (await rpc(http, url, "tools/call", final))["result"]
    assert created["resultType"] == "task" and "requestState" not in created, created
    ended = await until_status(http, url, created["taskId"], "completed")
    assert ended["result"]["content"][0]["text"] == "Approved."
    # The same final round sent again answers the same task: nothing is opened or run twice.
    replayed = (await rpc(http, url, "tools/call", final))["result"]
    assert replayed["resultType"] == "task" and replayed["taskId"] == created["taskId"]
    assert lines(mrtr_log) == lines(task_log) == ["approved"]

    def asked_and_answered(rows: list[Any]) -> list[tuple[Any, ...]]:
        return [row for row in trail(rows) if row[0] in ("asked", "answered")]

    mrtr_rows = await audit(db_url, tool="approved", principal="bob")
    task_rows = await audit(db_url, tool="approved", principal="alice")
    assert (
        asked_and_answered(task_rows)
        == asked_and_answered(mrtr_rows)
        == [
            ("asked", None, 1, ("ok",), None),
            ("answered", None, 1, ("ok",), "accept"),
        ]
    )
    # One flow, ended once: by its task.
    assert {e.flow_id for e in task_rows} == {task_rows[0].flow_id}
    completed = [e for e in task_rows if e.event == "completed"]
    assert [(e.outcome, e.detail) for e in completed] == [("completed", "a task")]


@pytest.mark.parametrize("name", ["Ali\x00ce", "Ali\ud800ce"], ids=["nul", "lone-surrogate"])
async def test_an_answer_no_database_can_store_is_asked_again_before_the_task_as_in_mrtr(
    http: httpx.AsyncClient, url: str, db_url: str, name: str
) -> None:
    first = (await call(http, url, "named", {}))["result"]
    answer = {
        "name": "named",
        "arguments": {},
        "requestState": first["requestState"],
        "inputResponses": {"user_name": accept(name=name)},
    }
    again = (await raw_call(http, url, answer))["result"]
    assert again["resultType"] == "input_required" and "taskId" not in again, again
    assert again["inputRequests"]["user_name"]["params"]["message"].startswith("That answer was not accepted")
    rows = trail(await audit(db_url, tool="named", principal="alice"))
    assert rows == [
        ("asked", None, 1, ("user_name",), None),
        ("rejected", "invalid_answer", 1, ("user_name",), None),
        ("asked", None, 2, ("user_name",), None),
    ]


async def test_a_round_asked_for_a_task_sent_again_without_the_extension_is_minus_32021_never_a_tool_failure(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    first = (await call(http, url, "approved", {"log": str(log)}))["result"]
    final = {
        "name": "approved",
        "arguments": {"log": str(log)},
        "requestState": first["requestState"],
        "inputResponses": {"ok": accept(ok=True)},
    }
    # Before the task exists, and after: a client without the extension cannot go on with a task's questions.
    before = await rpc(http, url, "tools/call", final, tasks=False)
    created = (await rpc(http, url, "tools/call", final))["result"]
    await until_status(http, url, created["taskId"], "completed")
    after = await rpc(http, url, "tools/call", final, tasks=False)

    for refused in (before, after):
        assert "result" not in refused and refused["error"]["code"] == -32021, refused
    assert lines(log) == ["approved"]
