"""Done-when 3 of the tasks work: an `askback serve` instance killed (SIGKILL) while its task runs, after the
person's answer, is replaced by another instance on the same database, which takes the task's lease over, reruns its
handler and finishes it; the effect ran once, and `tasks/get` never answered "unknown" in between."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.infra import Instance, wait_until

pytestmark = pytest.mark.http

TARGET = "tests.fixtures.tasks_server:server"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "elicitation": {"form": {}},
        "extensions": {"io.modelcontextprotocol/tasks": {}},
    },
}


def rpc(url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
    headers = {
        "Authorization": "Bearer demo-alice",
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": method,
        "Mcp-Name": str(params.get("name", params.get("taskId"))),
    }
    body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": META}}
    message: dict[str, Any] = httpx.post(url, json=body, headers=headers, timeout=20).json()
    assert "result" in message, message
    result: dict[str, Any] = message["result"]
    return result


def test_a_killed_instance_s_task_is_finished_by_another_and_its_effect_runs_once(tmp_path: Path) -> None:
    log = tmp_path / "effects"
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'askback.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DEMO_AUTH": "true",
        "ASKBACK_TASK_LEASE": "1",
    }
    first = Instance(TARGET, {**env, "TASKS_TEST_HANG": "1"})
    second = Instance(TARGET, env)
    first.start()
    second.start()
    try:
        task_id = rpc(first.url, "tools/call", {"name": "deploy", "arguments": {"log": str(log)}})["taskId"]
        asked: dict[str, Any] = {}
        wait_until(
            lambda: (
                asked.update(rpc(first.url, "tasks/get", {"taskId": task_id})) or asked["status"] == "input_required"
            ),
            what="the question",
        )
        (key,) = asked["inputRequests"]
        answer = {"action": "accept", "content": {"ok": True}}
        rpc(first.url, "tasks/update", {"taskId": task_id, "inputResponses": {key: answer}})
        hang = tmp_path / "effects.hang"
        wait_until(hang.exists, what="the effect recorded on the first instance")
        assert log.read_text() == "deploy\n"
        first.kill()

        seen: list[str] = []
        task: dict[str, Any] = {}

        def finished() -> bool:
            task.update(rpc(second.url, "tasks/get", {"taskId": task_id}))  # an unknown id fails the assert in rpc
            seen.append(task["status"])
            return task["status"] == "completed"

        wait_until(finished, timeout=30, what="the task finished by the second instance")
        assert set(seen) <= {"working", "completed"}
        assert task["result"]["content"][0]["text"] == "Deployed."
        assert log.read_text() == "deploy\n"
    finally:
        first.stop()
        second.stop()
