"""The server's own webhooks resume a parked call, end to end, with every part real and nothing signed here.

`askback serve askback.demo:server` (two workers, a SQLite file) delivers `account.connected` and `account.recovered`
to the endpoint its `ASKBACK_WEBHOOKS` file names: `askback inbox serve --webhook-secret-env VAR`, another process on
the agent's own runtime database. The agent's call to `summarize_inbox` parks on `connect.demo-mail`; the person
completes Demo Mail's consent in Chromium; the server's dispatcher signs and sends the event, the inbox's receiver
resumes the call, and the call completes with nobody answering the question. The delivery log shows the attempt,
and the account's access token is in no delivery.

The call is made as the demo server's `anonymous`: `askback inbox serve` resumes rounds without a token, so the
server's principal for the account (the one in the event) is the runtime call's principal only for that user.

`askback demo` shows the same: carol's call goes through the demo's own runtime, whose receiver the demo server's
webhook reaches, and it resumes by itself when her grant lands.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import anyio.from_thread
import anyio.to_thread
import pytest
from tests.runtime.test_runtime_webhooks import SECRET_ENV, new_secret, receiving
from tests.runtime.test_runtime_webhooks_flow import WHO, connect_in_the_browser

from askback.demo.run import serving_demo
from askback.runtime import Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port
from infra import run_askback, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.http]


def webhooks_file(tmp_path: Path, receiver: str) -> Path:
    """The server's `ASKBACK_WEBHOOKS` file: one endpoint, the inbox's receiver, sent the resuming events."""
    path = tmp_path / "webhooks.toml"
    path.write_text(
        f'[[endpoint]]\nurl = "{receiver}"\nevents = ["account.connected", "account.recovered"]\n'
        f'secret_env = "{SECRET_ENV}"\nallow_private = true\n',
        encoding="utf-8",
    )
    return path


def delivery_bodies(database: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [row[0] for row in conn.execute("SELECT body FROM askback_webhook_deliveries")]


async def test_the_servers_own_account_connected_webhook_resumes_a_call_parked_in_another_process(
    tmp_path: Path,
) -> None:
    secret = new_secret()
    agent_db = f"sqlite:///{tmp_path / 'agent.db'}"
    demo_db = tmp_path / "demo.db"
    port = free_port()
    with receiving(agent_db, secret, f"http://127.0.0.1:{port}/mcp") as receiver:
        env = {"ASKBACK_WEBHOOKS": str(webhooks_file(tmp_path, receiver)), SECRET_ENV: secret}
        with serving_demo(workers=2, port=port, database=f"sqlite:///{demo_db}", env=env) as servers:
            async with await Runtime.open(
                agent_db, renderers=[WebInbox()], settings=load_settings(development=True)
            ) as runtime:
                parked = await runtime.call_tool(servers.url, "summarize_inbox", {}, principal=WHO)
                assert isinstance(parked, Parked), parked
                [question] = parked.questions
                assert question.key == "connect.demo-mail" and question.url is not None

                await connect_in_the_browser(question.url, port)

                def completed() -> bool:
                    record = anyio.from_thread.run(runtime.calls.get, parked.call_id)
                    return record.status == "completed"

                await anyio.to_thread.run_sync(
                    lambda: wait_until(completed, timeout=60, what="the call resumed by the server's webhook")
                )
                record = await runtime.calls.get(parked.call_id)
                assert Completed(record.id, record.result or {}, record.round).text.startswith("3 messages for dana")
                # Nobody answered the question, the receiver neither: the event sent the round back to look.
                assert await runtime.calls.answers(parked.call_id, 1) == {}
            access_tokens = list(servers.mail.memory.by_access)

    listed = run_askback("webhooks", "deliveries", "--json", "--attempts", "--database", f"sqlite:///{demo_db}")
    assert listed.returncode == 0, listed.stderr
    [delivery] = json.loads(listed.stdout)
    assert delivery["type"] == "account.connected" and delivery["status"] == "delivered"
    assert delivery["url"] == receiver
    assert [a["status"] for a in delivery["attempt_log"]][-1] == 200
    # The canary: the access token Demo Mail issued is in no delivery body, nor in the delivery log.
    [token] = access_tokens
    bodies = delivery_bodies(demo_db)
    assert bodies and json.loads(bodies[0])["data"]["principal"] == WHO
    assert all(token not in body for body in bodies) and token not in listed.stdout


def test_the_demo_shows_carols_call_resumed_by_the_servers_webhook_when_her_grant_lands(tmp_path: Path) -> None:
    demo = run_askback("demo", "--workers", "2", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    waiting = out.index("nobody answers the question: the runtime waits for the server's webhook")
    landed = out.index("the grant landed: account.connected; the call resumed by itself")
    summary = out.index('3 messages for carol, 2 unread; the latest is "web-frontend is live in production"')
    assert waiting < landed < summary, out

    listed = run_askback(
        "webhooks", "deliveries", "--json", "--attempts", "--database", "sqlite:///askback-demo.db", cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    # carol's grant, which resumed her call, then erin's from the META walk, which resumes nothing; then the decision
    # on bob's request to drop a database, which resumes nothing either (his call is not parked in the runtime).
    carols, erins, decided = sorted(json.loads(listed.stdout), key=lambda d: d["id"])
    assert (carols["type"], carols["status"], erins["type"]) == ("account.connected", "delivered", "account.connected")
    assert carols["url"].endswith("/webhooks/askback") and carols["attempt_log"][-1]["status"] == 200
    assert (decided["type"], decided["status"]) == ("approval.decided", "delivered")
    bodies = [json.loads(b) for b in delivery_bodies(tmp_path / "askback-demo.db")]
    connected = [b["data"]["principal"] for b in bodies if b["type"] == "account.connected"]
    assert sorted(connected) == ["carol", "erin"]
