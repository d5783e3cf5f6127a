"""A round the server did not take leaves a parked call parked with its answers, to complete once the server can take
it, on the tasks path and on MRTR rounds alike:

- an HTTP error with no JSON-RPC error in its body: nginx's 502 while the one instance behind it is down
  (`ServerHTTPError`, `.status` 502);
- a JSON-RPC error the server marks retryable: askback's demo server on a PostgreSQL that is stopped answers -32603
  with `data.retryable` (`ServerRefusedError`, `.retryable`).

And a call whose server cannot be reached never keeps the other due calls from going (`resume_due`, `askback inbox
resume --due`).
"""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from askback.errors import CallError, ResumeDueError, ServerHTTPError, ServerRefusedError
from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import behind_nginx, postgres, run_askback

pytestmark = [pytest.mark.anyio, pytest.mark.http]

DEPLOY = {"service": "web", "environment": "production"}


async def parked_and_answered(runtime: Runtime, url: str) -> Parked:
    """A production deploy by ada, parked on its confirmation, answered yes."""
    runtime.headers = lambda _server: {"Authorization": "Bearer demo-ada"}
    parked = await runtime.call_tool(url, "deploy", DEPLOY, principal="ada")
    assert isinstance(parked, Parked), parked
    (question,) = parked.questions
    await runtime.answer(parked.call_id, question.key, Answer("accept", {"confirm": True}), round_=parked.round)
    return parked


async def still_parked(runtime: Runtime, parked: Parked) -> None:
    record = await runtime.calls.get(parked.call_id)
    assert (record.status, record.round) == ("parked", parked.round)
    assert set(await runtime.calls.answers(parked.call_id, parked.round)) == {parked.questions[0].key}


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
            parked = await parked_and_answered(runtime, nginx.url)

            instances[0].stop()
            with pytest.raises(ServerHTTPError) as down:
                await runtime.resume(parked.call_id)
            assert down.value.status == 502
            assert "stays parked on its round with its answers" in str(down.value)
            await still_parked(runtime, parked)

            instances[0].start()
            done = await runtime.resume(parked.call_id)
            assert isinstance(done, Completed), done
            assert done.text == "Deployed web to production."


@pytest.mark.parametrize("tasks", [True, False], ids=["task", "mrtr"])
async def test_a_server_whose_database_is_down_says_retry_and_the_call_completes_once_it_is_back(
    tmp_path: Path, tasks: bool
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    settings = load_settings(database_url=database, call_tasks=tasks)
    with postgres() as pg:
        pg.create_database("askback")
        upgraded = run_askback("db", "upgrade", "--database", pg.url("askback"))
        assert upgraded.returncode == 0, upgraded.stderr
        env = {"ASKBACK_DATABASE_URL": pg.url("askback"), "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
        with serving("askback.demo:server", port=free_port(), workers=1, env=env) as url:
            async with await Runtime.open(database, settings=settings, renderers=[WebInbox()]) as runtime:
                parked = await parked_and_answered(runtime, url)

                pg.stop("fast")
                try:
                    with pytest.raises(ServerRefusedError) as down:
                        await runtime.resume(parked.call_id)
                    assert down.value.retryable and down.value.server_code == -32603, down.value
                    assert "the server says to retry" in str(down.value) and pg.password not in str(down.value)
                    await still_parked(runtime, parked)
                finally:
                    pg.start()

                done = await runtime.resume(parked.call_id)
                assert isinstance(done, Completed), done
                assert done.text == "Deployed web to production."


async def test_resuming_every_due_call_goes_on_past_one_whose_server_is_down(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    settings = load_settings(database_url=database, call_tasks=False)

    def server(name: str) -> dict[str, str]:
        return {"ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / name}", "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}

    with serving("askback.demo:server", port=free_port(), workers=1, env=server("up.db")) as up:
        async with await Runtime.open(database, settings=settings, renderers=[WebInbox()]) as runtime:
            with serving("askback.demo:server", port=free_port(), workers=1, env=server("gone.db")) as gone:
                stranded = await parked_and_answered(runtime, gone)  # the oldest due call: resumed first
            first = await parked_and_answered(runtime, up)

            with pytest.raises(ResumeDueError) as due:
                await runtime.resume_due()
            (went,) = due.value.outcomes
            assert isinstance(went, Completed) and went.call_id == first.call_id, went
            assert went.text == "Deployed web to production."
            assert list(due.value.errors) == [stranded.call_id]
            assert type(due.value.errors[stranded.call_id]) is CallError
            assert f"1 of 2 due calls could not be resumed (1 went on): call {stranded.call_id}: " in str(due.value)
            await still_parked(runtime, stranded)

            second = await parked_and_answered(runtime, up)
            resumed = run_askback(
                "inbox", "resume", "--due", "--database", database, "--token", "demo-ada", "--token-server", up
            )
            assert resumed.returncode == 5, resumed.stderr
            assert "Deployed web to production." in resumed.stdout, (resumed.stdout, resumed.stderr)
            (line,) = resumed.stderr.strip().splitlines()
            assert line.startswith("error: 1 of 2 due calls could not be resumed (1 went on): ")
            assert f"call {stranded.call_id}: could not reach the MCP server at {gone}" in line
            assert (await runtime.calls.get(second.call_id)).status == "completed"
            await still_parked(runtime, stranded)
