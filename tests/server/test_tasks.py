"""The tasks extension over real HTTP on loopback: a task tool's call becomes a durable task, its questions are
answered through `tasks/update`, and the task ends completed, failed or cancelled as SEP-2663 says."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from tests._http import audit
from tests.server._tasks import accept, call, get, lines, rpc, serving_tasks, until_status

from askback.clock import FrozenClock
from askback.store import Store

pytestmark = [pytest.mark.http, pytest.mark.anyio]


@pytest.fixture
async def url(db_url: str) -> AsyncIterator[str]:
    async with serving_tasks(db_url) as found:
        yield found


async def test_the_server_advertises_the_extension_as_an_empty_object(http: httpx.AsyncClient, url: str) -> None:
    reply = await rpc(http, url, "server/discover", {})
    assert reply["result"]["capabilities"]["extensions"]["io.modelcontextprotocol/tasks"] == {}


async def test_a_task_waits_for_its_answer_then_completes_with_the_result_inlined(
    http: httpx.AsyncClient, url: str, tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "effects"
    created = (await call(http, url, "confirm_delete", {"filename": "a.txt", "log": str(log)}))["result"]
    assert created["resultType"] == "task" and created["status"] == "working"
    assert {"taskId", "createdAt", "lastUpdatedAt", "ttlMs", "pollIntervalMs"} <= created.keys()
    assert not {"result", "error", "inputRequests", "requestState", "task"} & created.keys()
    assert created["createdAt"].endswith("Z") and created["pollIntervalMs"] == 250
    task_id = created["taskId"]

    waiting = await until_status(http, url, task_id, "input_required")
    (key,) = waiting["inputRequests"]
    assert key != "ok" and waiting["inputRequests"][key]["method"] == "elicitation/create"
    again = (await get(http, url, task_id))["result"]
    assert again["lastUpdatedAt"] == waiting["lastUpdatedAt"]  # a read changes nothing
    assert lines(log) == []

    ack = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok=True)}})
    assert ack["result"]["resultType"] == "complete"
    assert not {"taskId", "status", "result", "error", "inputRequests"} & ack["result"].keys()
    done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deleted a.txt."
    assert lines(log) == ["delete a.txt"]
    trail = [(e.event, e.outcome, e.principal) for e in await audit(db_url, tool="confirm_delete")]
    assert trail == [("asked", None, "alice"), ("answered", None, "alice"), ("completed", "completed", "alice")]


async def test_a_declined_task_ends_as_its_mrtr_call_ends_and_is_audited_declined(
    http: httpx.AsyncClient, url: str, db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    arguments = {"filename": "d.txt", "log": str(log)}
    task_id = (await call(http, url, "confirm_delete", arguments))["result"]["taskId"]
    (key,) = (await until_status(http, url, task_id, "input_required"))["inputRequests"]
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: {"action": "decline"}}})
    done = await until_status(http, url, task_id, "completed")

    first = (await call(http, url, "confirm_delete", arguments, tasks=False, token="demo-bob"))["result"]
    replay = {"name": "confirm_delete", "arguments": arguments, "inputResponses": {"ok": {"action": "decline"}}}
    mrtr = await rpc(
        http, url, "tools/call", {**replay, "requestState": first["requestState"]}, tasks=False, token="demo-bob"
    )
    assert done["result"]["content"] == mrtr["result"]["content"]
    assert done["result"].get("isError") == mrtr["result"].get("isError")
    assert lines(log) == []
    outcomes = [(e.principal, e.outcome) for e in await audit(db_url, tool="confirm_delete", event="completed")]
    assert outcomes == [("alice", "declined"), ("bob", "declined")]


async def test_a_partial_answer_keeps_the_task_waiting_for_the_rest(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    task_id = (await call(http, url, "multi_input", {"log": str(tmp_path / "e")}))["result"]["taskId"]
    waiting = await until_status(http, url, task_id, "input_required")
    one, two = sorted(waiting["inputRequests"])
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {one: accept(ok=True)}})
    partial = (await get(http, url, task_id))["result"]
    assert partial["status"] == "input_required" and list(partial["inputRequests"]) == [two]
    empty = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {}})
    assert empty["result"] == {"resultType": "complete", **{k: v for k, v in empty["result"].items() if k == "_meta"}}
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {two: accept(ok=False), "x": {}}})
    done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "first=True second=False"


async def test_an_invalid_answer_is_asked_again_under_a_new_key(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    task_id = (await call(http, url, "deploy", {"log": str(tmp_path / "e")}))["result"]["taskId"]
    first = await until_status(http, url, task_id, "input_required")
    (key,) = first["inputRequests"]
    await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok="maybe")}})
    second = await until_status(http, url, task_id, "input_required")
    while list(second["inputRequests"]) == [key]:
        second = await until_status(http, url, task_id, "input_required")
    (again,) = second["inputRequests"]
    assert again != key and "not accepted" in second["inputRequests"][again]["params"]["message"]


async def test_cancelling_a_waiting_task_ends_it_and_a_later_answer_does_not_revive_it(
    http: httpx.AsyncClient, url: str, db_url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    task_id = (await call(http, url, "confirm_delete", {"filename": "b", "log": str(log)}))["result"]["taskId"]
    key = next(iter((await until_status(http, url, task_id, "input_required"))["inputRequests"]))
    ack = await rpc(http, url, "tasks/cancel", {"taskId": task_id})
    assert ack["result"]["resultType"] == "complete" and "status" not in ack["result"]
    assert ack["result"]["_meta"]["askback/cancel"] == {"status": "cancelled"}
    cancelled = (await get(http, url, task_id))["result"]
    assert cancelled["status"] == "cancelled" and "inputRequests" not in cancelled
    late = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok=True)}})
    assert late["result"]["resultType"] == "complete"
    assert (await rpc(http, url, "tasks/cancel", {"taskId": task_id}))["result"]["resultType"] == "complete"
    after = (await get(http, url, task_id))["result"]
    assert after["status"] == "cancelled" and after["lastUpdatedAt"] == cancelled["lastUpdatedAt"]
    assert lines(log) == []
    trail = [(e.event, e.outcome) for e in await audit(db_url, tool="confirm_delete", principal="alice")]
    assert trail == [("asked", None), ("completed", "cancelled")]  # once, however often it is cancelled


async def test_cancelling_a_running_task_stops_it_and_it_stays_cancelled(http: httpx.AsyncClient, url: str) -> None:
    task_id = (await call(http, url, "endless", {}))["result"]["taskId"]
    assert (await get(http, url, task_id))["result"]["status"] == "working"
    await rpc(http, url, "tasks/cancel", {"taskId": task_id})
    assert (await get(http, url, task_id))["result"]["status"] == "cancelled"


async def test_a_tool_error_completes_and_a_json_rpc_error_fails(http: httpx.AsyncClient, url: str) -> None:
    tool_error = (await call(http, url, "failing_job", {}))["result"]["taskId"]
    protocol_error = (await call(http, url, "protocol_error_job", {}))["result"]["taskId"]
    completed = await until_status(http, url, tool_error, "completed", "failed")
    failed = await until_status(http, url, protocol_error, "completed", "failed")
    assert completed["status"] == "completed" and completed["result"]["isError"] is True
    assert failed["status"] == "failed" and "result" not in failed
    assert failed["error"]["code"] == -32603 and failed["error"]["message"] == "the job broke"


async def test_another_principal_and_unknown_ids_get_invalid_params(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    task_id = (await call(http, url, "deploy", {"log": str(tmp_path / "e")}))["result"]["taskId"]
    key = next(iter((await until_status(http, url, task_id, "input_required"))["inputRequests"]))
    answers = {"taskId": task_id, "inputResponses": {key: accept(ok=True)}}
    for method, params in [
        ("tasks/get", {"taskId": task_id}),
        ("tasks/update", answers),
        ("tasks/cancel", {"taskId": task_id}),
    ]:
        assert (await rpc(http, url, method, params, token="demo-bob"))["error"]["code"] == -32602
        unknown = {**params, "taskId": "no-such-task"}
        assert (await rpc(http, url, method, unknown))["error"]["code"] == -32602
    assert (await get(http, url, task_id))["result"]["status"] == "input_required"


async def test_an_unknown_task_error_shows_none_of_the_clients_task_id(http: httpx.AsyncClient, url: str) -> None:
    hostile = "\x1b[2J\x1b]8;;https://evil.example\x07task_" + "x" * 40
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    }
    for method in ("tasks/get", "tasks/cancel"):
        # No Mcp-Name header (it is optional), so the body's id reaches the lookup as the client wrote it.
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {"taskId": hostile, "_meta": meta}}
        headers = {"Authorization": "Bearer demo-alice", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
        reply = (
            await http.post(url, json=body, headers={**headers, "Accept": "application/json, text/event-stream"})
        ).json()
        error = reply["error"]
        assert error["code"] == -32602, reply
        shown = json.dumps(error)
        assert "\\u001b" not in shown and "evil" not in shown and "task_x" not in shown, shown
        assert "no such task" in error["message"]


async def test_without_the_extension_a_required_task_is_refused_and_an_optional_one_runs_as_mrtr(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    refused = await call(http, url, "required_job", {}, tasks=False)
    assert refused["error"]["code"] == -32021
    assert "io.modelcontextprotocol/tasks" in str(refused["error"])
    plain = await call(http, url, "confirm_delete", {"filename": "c", "log": str(tmp_path / "e")}, tasks=False)
    assert plain["result"]["resultType"] == "input_required" and "taskId" not in plain["result"]
    assert list(plain["result"]["inputRequests"]) == ["ok"]
    assert (await call(http, url, "greet", {"name": "W"}))["result"]["content"][0]["text"] == "Hello, W!"


async def test_a_required_task_tool_through_execute_tool_without_the_extension_answers_what_its_direct_call_does(
    http: httpx.AsyncClient, db_url: str
) -> None:
    async with serving_tasks(db_url, expose="both") as both:
        direct = await call(http, both, "required_job", {}, tasks=False)
        through_meta = await call(http, both, "execute_tool", {"name": "required_job"}, tasks=False)
        assert direct["error"]["code"] == -32021, direct
        assert through_meta["error"] == direct["error"]
        # A tool that needs no task still runs through execute_tool without the extension.
        greeted = await call(http, both, "execute_tool", {"name": "greet", "arguments": {"name": "W"}}, tasks=False)
        assert greeted["result"]["structuredContent"] == {"result": "Hello, W!"}


async def test_an_mrtr_flow_begun_without_the_extension_stays_mrtr_when_its_retry_declares_it(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "e"
    arguments = {"filename": "d", "log": str(log)}
    first = (await call(http, url, "confirm_delete", arguments, tasks=False))["result"]
    assert first["resultType"] == "input_required" and first["requestState"]
    params = {
        "name": "confirm_delete",
        "arguments": arguments,
        "inputResponses": {"ok": accept(ok=True)},
        "requestState": first["requestState"],
    }
    done = (await rpc(http, url, "tools/call", params))["result"]  # declares the extension now
    assert done["resultType"] == "complete" and "taskId" not in done, done
    assert done["content"][0]["text"] == "Deleted d."
    assert lines(log) == ["delete d"]


async def test_tasks_methods_without_the_extension_declared_are_refused_before_any_lookup(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    task_id = (await call(http, url, "deploy", {"log": str(tmp_path / "e")}))["result"]["taskId"]
    key = next(iter((await until_status(http, url, task_id, "input_required"))["inputRequests"]))
    for method, params in [
        ("tasks/get", {"taskId": task_id}),
        ("tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok=True)}}),
        ("tasks/cancel", {"taskId": task_id}),
        ("tasks/get", {"taskId": "no-such-task"}),
    ]:
        refused = (await rpc(http, url, method, params, tasks=False))["error"]
        assert refused["code"] == -32021, (method, refused)
        assert refused["data"]["requiredCapabilities"] == {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    still = await get(http, url, task_id)
    assert still["result"]["status"] == "input_required" and list(still["result"]["inputRequests"]) == [key]


async def test_a_legacy_task_field_in_the_request_is_ignored_the_server_decides(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    legacy = {"name": "confirm_delete", "arguments": {"filename": "l", "log": str(tmp_path / "e")}, "task": {"ttl": 5}}
    plain = (await rpc(http, url, "tools/call", legacy, tasks=False))["result"]
    assert plain["resultType"] == "input_required" and "taskId" not in plain
    created = (await rpc(http, url, "tools/call", legacy))["result"]
    assert created["resultType"] == "task" and created["ttlMs"] == 3_600_000
    greeted = (await rpc(http, url, "tools/call", {"name": "greet", "arguments": {"name": "W"}, "task": {}}))["result"]
    assert greeted["resultType"] == "complete" and "taskId" not in greeted


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tasks/get", {}),
        ("tasks/get", {"taskId": 7}),
        ("tasks/get", {"taskId": "\x1b]52;c;x\x07\u202e" * 200}),
        ("tasks/update", {"taskId": "t", "inputResponses": "yes"}),
        ("tasks/update", {"taskId": "t", "inputResponses": [1, 2]}),
        ("tasks/cancel", {"taskId": None}),
    ],
)
async def test_malformed_tasks_requests_are_invalid_params_never_a_server_error(
    http: httpx.AsyncClient, url: str, method: str, params: dict[str, object]
) -> None:
    reply = await rpc(http, url, method, params, name="t")
    assert reply["error"]["code"] in (-32602, -32020), reply  # -32020: the header does not name the task id sent


async def test_answers_for_keys_never_asked_change_nothing_and_a_body_over_the_limit_is_refused(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    log = tmp_path / "effects"
    task_id = (await call(http, url, "confirm_delete", {"filename": "h", "log": str(log)}))["result"]["taskId"]
    waiting = await until_status(http, url, task_id, "input_required")
    (key,) = waiting["inputRequests"]
    stray = {"not-asked": accept(ok=True), "<script>": accept(ok=True)}
    stray_ack = await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": stray})
    assert stray_ack["result"]["resultType"] == "complete"
    after = (await get(http, url, task_id))["result"]
    assert after["status"] == "input_required" and list(after["inputRequests"]) == [key]
    assert after["lastUpdatedAt"] == waiting["lastUpdatedAt"] and "<script>" not in json.dumps(after)
    # Over the SDK's body limit (4 MiB): refused at the door with 413, the task as it was.
    over = {key: {"action": "accept", "content": {"ok": True, "x": "y" * (DEFAULT_MAX_REQUEST_BODY_SIZE + 1)}}}
    refused = await http.post(
        url,
        json={
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tasks/update",
            "params": {"taskId": task_id, "inputResponses": over},
        },
        headers={
            "Authorization": "Bearer demo-alice",
            "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream",
            "Mcp-Method": "tasks/update",
            "Mcp-Name": task_id,
        },
    )
    assert refused.status_code == 413, refused.text[:500]
    assert (await get(http, url, task_id))["result"]["status"] == "input_required"
    # Under it, a large answer is an answer like any other: the task runs on, its effect once.
    large = {key: {"action": "accept", "content": {"ok": True, "x" * 64: "y" * 2_000_000}}}
    assert "result" in await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": large})
    done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deleted h." and lines(log) == ["delete h"]


async def test_tasks_result_and_tasks_list_are_not_methods(http: httpx.AsyncClient, url: str) -> None:
    assert (await rpc(http, url, "tasks/result", {"taskId": "x"}))["error"]["code"] == -32601
    assert (await rpc(http, url, "tasks/list", {}))["error"]["code"] == -32601


async def test_an_mcp_name_that_is_not_the_task_id_is_a_header_mismatch(
    http: httpx.AsyncClient, url: str, tmp_path: Path
) -> None:
    task_id = (await call(http, url, "deploy", {"log": str(tmp_path / "e")}))["result"]["taskId"]
    wrong = await get(http, url, task_id, name="another-task")
    assert wrong["error"]["code"] == -32020
    assert (await get(http, url, task_id))["result"]["taskId"] == task_id


async def test_questions_asked_before_the_task_reach_its_result(http: httpx.AsyncClient, url: str) -> None:
    first = (await call(http, url, "named", {}))["result"]
    assert first["resultType"] == "input_required" and "taskId" not in first
    (key,) = first["inputRequests"]
    params = {
        "name": "named",
        "arguments": {},
        "inputResponses": {key: accept(name="Alice")},
        "requestState": first["requestState"],
    }
    created = (await rpc(http, url, "tools/call", params))["result"]
    assert created["resultType"] == "task" and "requestState" not in created
    done = await until_status(http, url, created["taskId"], "completed")
    assert done["result"]["content"][0]["text"] == "Hello, Alice!"


async def test_a_task_lives_in_postgresql_as_in_sqlite(
    http: httpx.AsyncClient, fresh_pg_url: str, tmp_path: Path
) -> None:
    await (await Store.open(fresh_pg_url, migrate=True)).close()
    async with serving_tasks(fresh_pg_url) as url:
        task_id = (await call(http, url, "multi_input", {"log": str(tmp_path / "e")}))["result"]["taskId"]
        one, two = sorted((await until_status(http, url, task_id, "input_required"))["inputRequests"])
        await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {one: accept(ok=True)}})
        assert list((await get(http, url, task_id))["result"]["inputRequests"]) == [two]
        await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {two: accept(ok=True)}})
        done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "first=True second=True"


async def test_a_task_past_its_time_to_live_is_unknown(
    http: httpx.AsyncClient, db_url: str, clock: FrozenClock
) -> None:
    async with serving_tasks(db_url, clock) as url:
        created = (await call(http, url, "failing_job", {}))["result"]
        assert created["ttlMs"] == 3_600_000
        await until_status(http, url, created["taskId"], "completed")
        clock.advance(3601)
        gone = await get(http, url, created["taskId"])
    assert gone["error"]["code"] == -32602
