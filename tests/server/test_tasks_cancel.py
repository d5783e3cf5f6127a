"""A cancelled task did not do its work: `tasks/cancel` sent to one `askback serve` instance while another runs the
task's handler, on the same database, either wins before the task claims its effect (the effect never runs, the
task ends `cancelled`) or finds the effect claimed (the task runs on and ends `completed` with its result), and the
cancel's answer says which. The handler waits at gates (named pipes) the test opens, so each race is forced."""

from __future__ import annotations

import errno
import os
import secrets
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from tests.infra import Instance, wait_until
from tests.server._tasks import TASKS

from askback.audit import AuditFilter
from askback.store import Store

pytestmark = pytest.mark.http

TARGET = "tests.fixtures.tasks_server:server"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}, "extensions": {TASKS: {}}},
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


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def release(gate: Path) -> None:
    """Open the gate the handler waits at (once it waits there)."""

    def opened() -> bool:
        try:
            fd = os.open(gate, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads the pipe yet
                return False
            raise
        os.write(fd, b"go")
        os.close(fd)
        return True

    wait_until(opened, what=f"the handler at {gate.name}")


def started(url: str, log: Path) -> str:
    """A `gated` task on `url`, answered, its handler waiting at its first gate."""
    os.mkfifo(f"{log}.before")
    os.mkfifo(f"{log}.during")
    task_id: str = rpc(url, "tools/call", {"name": "gated", "arguments": {"log": str(log)}})["taskId"]
    asked: dict[str, Any] = {}
    wait_until(
        lambda: asked.update(rpc(url, "tasks/get", {"taskId": task_id})) or asked["status"] == "input_required",
        what="the question",
    )
    (key,) = asked["inputRequests"]
    rpc(
        url, "tasks/update", {"taskId": task_id, "inputResponses": {key: {"action": "accept", "content": {"ok": True}}}}
    )
    wait_until(lambda: "ready" in lines(log), what="the handler at its first gate")
    return task_id


def ended(url: str, task_id: str) -> dict[str, Any]:
    task: dict[str, Any] = {}
    wait_until(
        lambda: task.update(rpc(url, "tasks/get", {"taskId": task_id})) or task["status"] not in ("working",),
        what="the task's end",
    )
    return task


async def migrated(database: str) -> None:
    await (await Store.open(database, migrate=True)).close()


async def outcomes(database: str) -> list[str | None]:
    """The outcomes of the `completed` events of the `gated` tasks, oldest first."""
    store = await Store.open(database, migrate=False)
    try:
        rows = await store.audit_log.query(AuditFilter(tool="gated", event="completed"))
    finally:
        await store.close()
    return [e.outcome for e in rows]


def test_a_cancel_either_wins_before_the_effect_or_finds_it_started_and_the_task_completes(
    tmp_path: Path, any_database: str
) -> None:
    anyio.run(migrated, any_database)
    env = {
        "ASKBACK_DATABASE_URL": any_database,
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DEMO_AUTH": "true",
    }
    runner, other = Instance(TARGET, env), Instance(TARGET, env)
    runner.start()
    other.start()
    try:
        # The cancel comes first: the effect never starts, and the task says it was cancelled.
        early = tmp_path / "early"
        task_id = started(runner.url, early)
        answer = rpc(other.url, "tasks/cancel", {"taskId": task_id})
        assert answer["resultType"] == "complete" and "status" not in answer  # SEP-2663's empty acknowledgement
        assert answer["_meta"]["askback/cancel"] == {"status": "cancelled"}
        release(Path(f"{early}.before"))
        wait_until(lambda: "left" in lines(early), what="the handler's end")
        assert "deploy" not in lines(early)
        assert ended(other.url, task_id)["status"] == "cancelled"
        assert ended(runner.url, task_id)["status"] == "cancelled"

        # The effect is claimed first: the cancel does not end the task, says so, and the task completes.
        late = tmp_path / "late"
        task_id = started(runner.url, late)
        release(Path(f"{late}.before"))
        wait_until(lambda: "deploy" in lines(late), what="the effect running")
        answer = rpc(other.url, "tasks/cancel", {"taskId": task_id})
        assert answer["resultType"] == "complete" and "status" not in answer
        told = answer["_meta"]["askback/cancel"]
        assert told["status"] == "working" and told["message"].startswith("Not cancelled")
        assert rpc(other.url, "tasks/get", {"taskId": task_id})["status"] == "working"
        release(Path(f"{late}.during"))
        done = ended(other.url, task_id)
        assert done["status"] == "completed", done
        assert done["result"]["content"][0]["text"] == "Deployed."
        assert lines(late).count("deploy") == 1
        assert anyio.run(outcomes, any_database) == ["cancelled", "completed"]
    finally:
        runner.stop()
        other.stop()


def test_a_task_whose_effect_started_and_raised_is_not_cancelled_afterwards(tmp_path: Path, any_database: str) -> None:
    anyio.run(migrated, any_database)
    env = {
        "ASKBACK_DATABASE_URL": any_database,
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DEMO_AUTH": "true",
    }
    runner, other = Instance(TARGET, env), Instance(TARGET, env)
    runner.start()
    other.start()
    try:
        log = tmp_path / "stumbling"
        task_id = rpc(runner.url, "tools/call", {"name": "stumbling", "arguments": {"log": str(log)}})["taskId"]
        asked: dict[str, Any] = {}

        def waiting_on(prefix: str) -> bool:
            asked.update(rpc(runner.url, "tasks/get", {"taskId": task_id}))
            keys = list(asked.get("inputRequests", {})) if asked["status"] == "input_required" else []
            return bool(keys) and keys[0].startswith(prefix)

        wait_until(lambda: waiting_on("ok."), what="the first question")
        (key,) = asked["inputRequests"]
        yes = {"action": "accept", "content": {"ok": True}}
        rpc(runner.url, "tasks/update", {"taskId": task_id, "inputResponses": {key: yes}})
        # The effect ran and raised; its claim was released, and the handler asks again.
        wait_until(lambda: waiting_on("again."), what="the question after the effect")
        assert lines(log) == ["attempt"]

        answer = rpc(other.url, "tasks/cancel", {"taskId": task_id})
        told = answer["_meta"]["askback/cancel"]
        assert told["status"] == "input_required" and told["message"].startswith("Not cancelled"), told
        assert rpc(other.url, "tasks/get", {"taskId": task_id})["status"] == "input_required"
        (key,) = rpc(other.url, "tasks/get", {"taskId": task_id})["inputRequests"]
        rpc(other.url, "tasks/update", {"taskId": task_id, "inputResponses": {key: yes}})
        done = ended(other.url, task_id)
        assert done["status"] == "completed" and done["result"]["content"][0]["text"] == "Stumbled.", done
    finally:
        runner.stop()
        other.stop()
