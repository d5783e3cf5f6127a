"""An HTTP error with no JSON-RPC error in its body did not judge the round: nginx's 502 while the one instance
behind it is down leaves a parked call parked with its answers (`ServerHTTPError`, `.status` 502), and the call
completes once the instance is back, on the tasks path and on MRTR rounds alike."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from askback.errors import ServerHTTPError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from infra import behind_nginx

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@pytest.mark.parametrize("tasks", [True, False], ids=["task", "mrtr"])
async def test_a_proxys_502_leaves_the_call_parked_and_it_completes_once_the_server_is_back(
    tmp_path: Path, tasks: bool
) -> None:
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'server.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
    }
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    settings = load_settings(database_url=database, call_tasks=tasks)
    with behind_nginx("askback.demo:server", env, tmp_path / "nginx", count=1) as (instances, nginx):
        async with await Runtime.open(database, settings=settings, renderers=[WebInbox()]) as runtime:
            runtime.headers = lambda _server: {"Authorization": "Bearer demo-ada"}
            parked = await runtime.call_tool(
                nginx.url, "deploy", {"service": "web", "environment": "production"}, principal="ada"
            )
            assert isinstance(parked, Parked), parked
            (question,) = parked.questions
            await runtime.answer(parked.call_id, question.key, Answer("accept", {"confirm": True}), round_=parked.round)

            instances[0].stop()
            with pytest.raises(ServerHTTPError) as down:
                await runtime.resume(parked.call_id)
            assert down.value.status == 502
            assert "stays parked on its round with its answers" in str(down.value)
            record = await runtime.calls.get(parked.call_id)
            assert (record.status, record.round) == ("parked", parked.round)
            assert question.key in await runtime.calls.answers(parked.call_id, parked.round)

            instances[0].start()
            done = await runtime.resume(parked.call_id)
            assert isinstance(done, Completed), done
            assert done.text == "Deployed web to production."
