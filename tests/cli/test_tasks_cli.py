"""`askback tasks list|show|cancel`, run as a user runs it, on a SQLite file holding tasks made through a real server
on loopback: what an operator sees (never an answer, an argument's value or a result), and a cancel that is the one
`tasks/cancel` makes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from tests._http import audit
from tests.infra import run_askback
from tests.server._tasks import accept, call, get, rpc, serving_tasks, until_status

pytestmark = [pytest.mark.http, pytest.mark.anyio]

CANARY = "canary-7f3a91"


@asynccontextmanager
async def serving(database_url: str) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """The tasks test server on `database_url` under uvicorn on loopback, and a client; yields both (its /mcp URL)."""
    async with serving_tasks(database_url) as url, httpx.AsyncClient(timeout=20) as http:
        yield http, url


async def tasks(*args: str, database: str) -> subprocess.CompletedProcess[str]:
    """`askback tasks ARGS --database URL` in a subprocess, off the event loop the server runs on."""
    return await anyio.to_thread.run_sync(lambda: run_askback("tasks", *args, "--database", database, timeout=60))


async def test_tasks_are_listed_and_shown_with_their_questions_but_never_answers_arguments_or_results(
    db_url: str, tmp_path: Path
) -> None:
    async with serving(db_url) as (http, url):
        log = str(tmp_path / f"effects-{CANARY}")
        waiting = (await call(http, url, "confirm_delete", {"filename": CANARY, "log": log}))["result"]["taskId"]
        key = next(iter((await until_status(http, url, waiting, "input_required"))["inputRequests"]))
        first = (await call(http, url, "named", {}, token="demo-bob"))["result"]
        (asked,) = first["inputRequests"]
        params = {
            "name": "named",
            "arguments": {},
            "inputResponses": {asked: accept(name=CANARY)},
            "requestState": first["requestState"],
        }
        done = (await rpc(http, url, "tools/call", params, token="demo-bob"))["result"]["taskId"]
        assert (
            CANARY
            in (await until_status(http, url, done, "completed", token="demo-bob"))["result"]["content"][0]["text"]
        )

        listed = await tasks("list", "--json", database=db_url)
        assert listed.returncode == 0, listed.stderr
        rows = {r["task_id"]: r for r in json.loads(listed.stdout)}
        assert set(rows) == {waiting, done}
        assert (rows[waiting]["status"], rows[waiting]["tool"], rows[waiting]["principal"]) == (
            "input_required",
            "confirm_delete",
            "alice",
        )
        assert rows[waiting]["waiting_for"] == [key] and rows[done]["waiting_for"] == []
        only_bob = json.loads((await tasks("list", "--principal", "bob", "--json", database=db_url)).stdout)
        assert [r["task_id"] for r in only_bob] == [done]
        only_waiting = json.loads((await tasks("list", "--status", "input_required", "--json", database=db_url)).stdout)
        assert [r["task_id"] for r in only_waiting] == [waiting]

        shown = json.loads((await tasks("show", waiting, "--json", database=db_url)).stdout)
        assert shown["arguments"] == ["filename", "log"] and shown["answers_received"] == 0
        assert shown["waiting_for"] == [{"key": key, "question": "ok", "method": "elicitation/create", "mode": "form"}]
        ended = json.loads((await tasks("show", done, "--json", database=db_url)).stdout)
        assert ended["status"] == "completed" and ended["result"] == {"is_error": False}
        outputs = [listed.stdout, json.dumps(shown), json.dumps(ended)]
        for args in (("list",), ("show", waiting), ("show", done)):
            plain = await tasks(*args, database=db_url)
            assert plain.returncode == 0, plain.stderr
            outputs.append(plain.stdout)
        assert f"{waiting}  input_required  confirm_delete  alice" in outputs[-3]
        assert "waiting for" in outputs[-2] and "Go ahead?" not in outputs[-2]
    for out in outputs:
        assert CANARY not in out


async def test_cancelling_from_the_command_line_is_the_cancel_tasks_cancel_makes(db_url: str, tmp_path: Path) -> None:
    log = tmp_path / "effects"
    async with serving(db_url) as (http, url):
        task_id = (await call(http, url, "confirm_delete", {"filename": "a", "log": str(log)}))["result"]["taskId"]
        assert task_id.startswith("task_"), (
            "a bare random id starts with '-' one time in 64, and the CLI reads an option"
        )
        key = next(iter((await until_status(http, url, task_id, "input_required"))["inputRequests"]))
        before = (await get(http, url, task_id))["result"]

        cancelled = await tasks("cancel", task_id, database=db_url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert cancelled.stdout.startswith(f"{task_id}: cancelled")
        after = (await get(http, url, task_id))["result"]
        assert after["status"] == "cancelled" and "inputRequests" not in after
        assert after["lastUpdatedAt"] != before["lastUpdatedAt"]
        await rpc(http, url, "tasks/update", {"taskId": task_id, "inputResponses": {key: accept(ok=True)}})
        assert (await get(http, url, task_id))["result"]["status"] == "cancelled"

        again = await tasks("cancel", task_id, database=db_url)
        assert again.returncode == 0 and again.stdout.startswith(f"{task_id}: cancelled already")
        assert (await get(http, url, task_id))["result"]["lastUpdatedAt"] == after["lastUpdatedAt"]

        other = (await call(http, url, "confirm_delete", {"filename": "a", "log": str(log)}))["result"]["taskId"]
        await until_status(http, url, other, "input_required")
        await rpc(http, url, "tasks/cancel", {"taskId": other})
        by_cli, by_wire = [
            json.loads((await tasks("show", found, "--json", database=db_url)).stdout) for found in (task_id, other)
        ]
    assert not log.exists()
    ended = [(e.flow_id, e.outcome) for e in await audit(db_url, tool="confirm_delete", event="completed")]
    assert sorted(outcome for _, outcome in ended) == ["cancelled", "cancelled"] and len(set(ended)) == 2
    moments = {"task_id", "created_at", "updated_at", "expires_at"}
    assert {k: v for k, v in by_cli.items() if k not in moments} == {
        k: v for k, v in by_wire.items() if k not in moments
    }


async def test_an_unknown_task_id_exits_with_the_not_found_status(db_url: str) -> None:
    async with serving(db_url) as (http, url):
        await until_status(http, url, (await call(http, url, "failing_job", {}))["result"]["taskId"], "completed")
    for command in ("show", "cancel"):
        unknown = await tasks(command, "no-such-task", database=db_url)
        assert unknown.returncode == 4, unknown.stderr
        assert unknown.stderr.startswith("error: there is no task 'no-such-task'")
    refused = await tasks("list", "--status", "done", database=db_url)
    assert refused.returncode == 2 and "--status is one of working, input_required" in refused.stderr
