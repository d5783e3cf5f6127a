"""`askback tasks cancel` withdraws the approval requests a cancelled task waited on, as the task's principal, through
an `ApprovalService` it opens itself without the sign-in's home issuer. The approvals keep requesters in the home
spelling of the approvers' sign-in, while a task keeps its caller's principal as the bearer check spelled it: a token
verifier that returns the home issuer's `iss` (`build_app(token_verifier=...)`) names alice `<issuer>#alice`, her
request is stored as `alice`, and the command's withdrawal finds no request of hers. The task ends cancelled, and the
request it waited on stays pending for the approvers to approve (`tasks/cancel` over the wire withdraws it)."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp.server.auth.provider import AccessToken
from tests.infra import run_askback, serving_asgi
from tests.server._tasks import call, until

from _approvals import people_sign_in
from askback import Approval, Askback, Flow, load_settings
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.server.http import build_app

pytestmark = [pytest.mark.http, pytest.mark.anyio]

ISSUER = "https://id.example.test"
BASE = "http://127.0.0.1:8000"
DROP = Approval(key="db.drop", title="Drop a database", principals=frozenset({"bob", "carol"}), ttl=600)
TOKEN = "alice-token"


class _Verifier:
    """Accepts alice's token, returning its claims (`iss` among them): the home issuer of the people's sign-in."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != TOKEN:
            return None
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims={"iss": ISSUER})


async def test_cancelling_a_waiting_task_from_the_command_line_withdraws_the_request_of_a_verified_caller(
    tmp_path: Path,
) -> None:
    database = f"sqlite:///{tmp_path / 'askback.db'}"
    settings = load_settings(database_url=database, state_keys=secrets.token_urlsafe(32), task_poll_interval=250)
    clock = FrozenClock(at=1_800_000_000.0)
    sign_in = people_sign_in(ISSUER, BASE, clock)
    setup = ApprovalsSetup(sign_in=sign_in, base_url=BASE)
    app = Askback("cancel-spelling", settings=settings, clock=clock, extensions=[sign_in, setup])

    @app.tool(task="optional")
    async def drop(database: str, flow: Flow) -> str:
        await flow.approve(DROP, summary=f"Drop {database}")
        return f"Dropped {database}"

    def waiting(task: dict[str, Any]) -> bool:
        return str(task.get("statusMessage", "")).startswith("Waiting for approval")

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        async with (
            serving_asgi(build_app(app, token_verifier=_Verifier()), listener) as base,
            httpx.AsyncClient(timeout=20) as http,
        ):
            url = f"{base}/mcp"
            made = await call(http, url, "drop", {"database": "orders"}, token=TOKEN)
            task_id = made["result"]["taskId"]
            await until(http, url, task_id, waiting, token=TOKEN)
            service = await setup.service()
            (request,) = await service.listing(expire=False)
            assert request.requester == "alice"

            told = await anyio.to_thread.run_sync(
                lambda: run_askback("tasks", "cancel", task_id, "--database", database, timeout=60)
            )
            assert told.returncode == 0, told.stderr
            assert told.stdout.startswith(f"{task_id}: cancelled")
            after = await service.get(request.id, expire=False)
    assert after is not None
    assert after.status == "withdrawn"
