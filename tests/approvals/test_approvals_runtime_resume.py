"""The server's own `approval.decided` webhook resumes a call parked on an approval, end to end, with every part real
and nothing signed here: `askback serve` (two workers, a SQLite file) with the approvals and the webhooks its
`ASKBACK_WEBHOOKS` file names; `askback inbox serve --webhook-secret-env URL=VAR`, another process on the agent's own
runtime database; the agent's call to `drop_database` parks on the approval's status link; bob approves on the hosted
pages; the server's dispatcher signs and sends the event, the inbox's receiver sends the round back to look, and the
call completes with nobody answering the link. The delivery carries no argument of the call.

The call is made without a token, as the demo authentication's `anonymous`: `askback inbox serve` resumes rounds
without a token, so the requester in the event is the runtime call's principal only for that user."""

from __future__ import annotations

import contextlib
import secrets
import sqlite3
from pathlib import Path

import anyio.from_thread
import anyio.to_thread
import pytest
from tests.approvals.test_approvals_e2e import SECRET, Served, decide
from tests.runtime.test_runtime_webhooks import SECRET_ENV, new_secret, receiving

from askback.runtime import Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import ROOT, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.http]

WHO = "anonymous"


def webhooks_file(tmp_path: Path, receiver: str) -> Path:
    path = tmp_path / "webhooks.toml"
    path.write_text(
        f'[[endpoint]]\nurl = "{receiver}"\nevents = ["approval.decided"]\nsecret_env = "{SECRET_ENV}"\n'
        "allow_private = true\n",
        encoding="utf-8",
    )
    return path


def delivery_bodies(database: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [row[0] for row in conn.execute("SELECT body FROM askback_webhook_deliveries")]


async def test_the_servers_approval_decided_webhook_resumes_the_call_parked_on_the_approval(tmp_path: Path) -> None:
    secret = new_secret()
    agent_db = f"sqlite:///{tmp_path / 'agent.db'}"
    server_db = tmp_path / "server.db"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with receiving(agent_db, secret, f"{base}/mcp") as receiver:
        env = {
            "ASKBACK_DATABASE_URL": f"sqlite:///{server_db}",
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
            "ASKBACK_DEMO_AUTH": "true",
            "ASKBACK_WEBHOOKS": str(webhooks_file(tmp_path, receiver)),
            SECRET_ENV: secret,
            "APPROVALS_TEST_SIGNIN_SECRET": SECRET,
            "APPROVALS_TEST_BASE_URL": base,
            "APPROVALS_TEST_EFFECTS": str(tmp_path / "effects.txt"),
        }
        with serving("tests.fixtures.approvals_server:app", port=port, workers=2, env=env, cwd=str(ROOT)) as url:
            served = Served(url, base, tmp_path / "effects.txt")
            async with await Runtime.open(
                agent_db, renderers=[WebInbox()], settings=load_settings(development=True)
            ) as runtime:
                arguments = {"name": "analytics", "reason": "the quarterly purge"}
                parked = await runtime.call_tool(url, "drop_database", arguments, principal=WHO)
                assert isinstance(parked, Parked), parked
                [question] = parked.questions
                assert question.key == "askback.approval.drop" and question.url is not None

                approved = await decide(served, "bob", question.url, "approve", "scheduled")
                assert approved.status_code == 200, approved.text

                def completed() -> bool:
                    record = anyio.from_thread.run(runtime.calls.get, parked.call_id)
                    return record.status == "completed"

                await anyio.to_thread.run_sync(
                    lambda: wait_until(completed, timeout=60, what="the call resumed by the server's webhook")
                )
                record = await runtime.calls.get(parked.call_id)
                assert (
                    Completed(record.id, record.result or {}, record.round).text
                    == "Dropped analytics, approved by bob."
                )
                assert await runtime.calls.answers(parked.call_id, 1) == {}  # nobody answered the link
    assert (tmp_path / "effects.txt").read_text().split() == ["analytics"]
    bodies = delivery_bodies(server_db)
    assert bodies and all("the quarterly purge" not in body and "analytics" not in body for body in bodies)
