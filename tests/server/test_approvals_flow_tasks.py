"""`flow.approve` in a task: the task's run reaches the same approvals port as an MRTR round, asks the status link in
the task, follows the request that link showed, and runs the effect once it is approved. Raw 2026-07-28 JSON-RPC
with the tasks extension declared, under uvicorn on loopback; the approvals are the dict-backed test port."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import httpx
import pytest
from tests.infra import serving_asgi
from tests.server._tasks import call, rpc, until_status
from tests.server.test_approvals_flow import DEPLOY, ApprovalsTestBoard, ApprovalsTestExtension

from askback import Askback, Flow, load_settings
from askback.clock import FrozenClock
from askback.server.http import build_app

pytestmark = [pytest.mark.http, pytest.mark.anyio]


async def test_a_task_asks_the_status_link_and_runs_its_effect_once_the_request_is_approved(
    http: httpx.AsyncClient, db_url: str, tmp_path: Path
) -> None:
    clock = FrozenClock(at=1_800_000_000.0)
    board = ApprovalsTestBoard(clock)
    settings = load_settings(
        database_url=db_url, state_keys=secrets.token_urlsafe(32), demo_auth=True, task_poll_interval=250
    )
    app = Askback("approvals-tasks", settings=settings, clock=clock, extensions=[ApprovalsTestExtension(board)])
    deployed: list[str] = []

    @app.tool(task="optional")
    async def deploy(service: str, flow: Flow) -> str:
        approved = await flow.approve(DEPLOY)

        async def run() -> str:
            deployed.append(service)
            return service

        await flow.once("deploy", run)
        return f"Deployed {service}, approved by {', '.join(approved.approvers)}."

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        async with serving_asgi(build_app(app), listener) as base:
            url = f"{base}/mcp"
            task_id = (await call(http, url, "deploy", {"service": "billing"}))["result"]["taskId"]
            waiting = await until_status(http, url, task_id, "input_required")
            ((key, request),) = waiting["inputRequests"].items()
            assert request["params"]["mode"] == "url" and request["params"]["url"].endswith("/ap-1")
            board.decide("approve", by="bob")
            update = {"taskId": task_id, "inputResponses": {key: {"action": "accept"}}}
            await rpc(http, url, "tasks/update", update)
            done = await until_status(http, url, task_id, "completed")
    assert done["result"]["content"][0]["text"] == "Deployed billing, approved by bob."
    assert deployed == ["billing"] and board.only().status == "consumed"
    assert [ask.following for ask in board.asks] == [None, "ap-1"]
    assert {ask.flow_id for ask in board.asks} == {board.asks[0].flow_id}
