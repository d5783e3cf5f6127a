"""An account event resumes exactly the calls waiting for that account, end to end with every part real.

`askback serve tests.fixtures.labelled_accounts_server:server` (its `read_mail(label)` asks for the caller's `heldmail`
account `label` with `flow.connect`) sends its account events to `askback inbox serve --webhook-secret-env URL=VAR`,
another process on the agent's runtime database, taking the events of that server and of one more. Accounts are
connected in the server's own store, as the hosted pages would; the server's own dispatcher signs and delivers the
event. An event nobody sent for a real change is signed here with askback's signing code, as the sender signs.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.from_thread
import anyio.to_thread
import httpx
import pytest

from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.vault import new_key
from askback.core.questions import connect_key
from askback.db.migrate import all_components
from askback.runtime import Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.store import Store
from askback.testing import free_port, serving
from askback.web.standard_webhooks import secret_keys, signed_headers
from infra import ROOT, inbox_serving, wait_until

pytestmark = pytest.mark.anyio

SERVER = "tests.fixtures.labelled_accounts_server:server"
WHO = "anonymous"  # the fixture server's name for a caller without a token, as `askback inbox serve` resumes
SECRET_ENV = "HELDMAIL_WEBHOOK_SECRETS"
OTHER_ENV = "OTHER_SERVER_WEBHOOK_SECRETS"
OTHER_SERVER = "https://other-tools.example.com/mcp"


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Setting:
    url: str  # the server's /mcp
    receiver: str  # the inbox's /webhooks/askback
    agent_db: str
    server_db: str
    secret: str
    other_secret: str
    counts: Path

    def runs(self, label: str) -> int:
        """How many requests ran `read_mail` for `label` so far."""
        lines = self.counts.read_text().splitlines() if self.counts.exists() else []
        return lines.count(f"read_mail {label}")


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    tmp = tmp_path_factory.mktemp("webhooks-accounts")
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    secret, other_secret = new_secret(), new_secret()
    agent_db, server_db = f"sqlite:///{tmp / 'agent.db'}", f"sqlite:///{tmp / 'server.db'}"
    hooks = ["--webhook-secret-env", f"{url}={SECRET_ENV}", "--webhook-secret-env", f"{OTHER_SERVER}={OTHER_ENV}"]
    env = {SECRET_ENV: secret, OTHER_ENV: other_secret}
    with inbox_serving(agent_db, "--user", WHO, *hooks, env=env) as inbox:
        receiver = f"{inbox}/webhooks/askback"
        endpoints = tmp / "webhooks.toml"
        endpoints.write_text(
            f'[[endpoint]]\nurl = "{receiver}"\nevents = ["account.connected", "account.recovered"]\n'
            f'secret_env = "{SECRET_ENV}"\nallow_private = true\n',  # the receiver is on this machine
            encoding="utf-8",
        )
        server_env = {
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_DATABASE_URL": server_db,
            "ASKBACK_VAULT_KEYS": new_key(),
            "ASKBACK_WEBHOOKS": str(endpoints),
            "LABELLED_TEST_BASE_URL": f"http://127.0.0.1:{port}",
            "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
            SECRET_ENV: secret,
        }
        with serving(SERVER, port=port, workers=1, env=server_env, cwd=str(ROOT)):
            yield Setting(url, receiver, agent_db, server_db, secret, other_secret, tmp / "counts.txt")


@pytest.fixture
async def runtime(setting: Setting) -> AsyncIterator[Runtime]:
    async with await Runtime.open(
        setting.agent_db, renderers=[WebInbox()], settings=load_settings(development=True)
    ) as rt:
        yield rt


async def park(runtime: Runtime, setting: Setting, label: str) -> Parked:
    parked = await runtime.call_tool(setting.url, "read_mail", {"label": label}, principal=WHO)
    assert isinstance(parked, Parked), parked
    [question] = parked.questions
    assert question.key == connect_key("heldmail", label) and question.url is not None
    return parked


async def connect(setting: Setting, label: str) -> None:
    """The account `label` of WHO becomes ACTIVE in the server's store, as the hosted pages' callback makes it."""
    # The server's own schema: everything but the runtime's, which lives in the agent's database.
    server_parts = tuple(c for c in all_components() if c.name in ("server", "accounts", "webhooks"))
    store = await Store.open(setting.server_db, migrate=False, components=server_parts)
    try:
        accounts = Accounts(store.database)
        [account] = [a for a in await accounts.of(WHO, "heldmail") if a.label == label]
        await accounts.change(account.id, Event.CONNECTED, now=time.time(), reason="granted", credential="sealed")
    finally:
        await store.close()


async def until_status(runtime: Runtime, call_id: str, status: str) -> None:
    def reached() -> bool:
        return anyio.from_thread.run(runtime.calls.get, call_id).status == status

    await anyio.to_thread.run_sync(lambda: wait_until(reached, timeout=60, what=f"call {call_id} {status}"))


def signed_event(secret: str, label: str, *, principal: str = WHO) -> tuple[dict[str, str], str]:
    """An `account.connected` for `principal`'s `heldmail` account `label`, signed as the server's sender signs."""
    data: dict[str, Any] = {"account_id": "acc_x", "principal": principal, "connection": "heldmail", "label": label}
    body = json.dumps({"type": "account.connected", "timestamp": "2030-01-01T00:00:00Z", "data": data})
    return signed_headers(secret_keys([secret]), f"msg_{secrets.token_hex(8)}", int(time.time()), body), body


@pytest.mark.http
async def test_connecting_the_default_account_resumes_only_the_call_waiting_for_it_and_not_the_work_one(
    runtime: Runtime, setting: Setting
) -> None:
    default, work = await park(runtime, setting, ""), await park(runtime, setting, "work")

    await connect(setting, "")  # the server's dispatcher delivers `account.connected` with label ""
    await until_status(runtime, default.call_id, "completed")

    record = await runtime.calls.get(default.call_id)
    assert record.result is not None and record.result["content"][0]["text"] == "Read the default account."
    waiting = await runtime.calls.get(work.call_id)
    assert (waiting.status, waiting.round, waiting.waiting) == ("parked", 1, 1)
    assert waiting.questions[0].url == work.questions[0].url  # its link, as it was
    assert setting.runs("work") == 1  # never sent back


@pytest.mark.http
async def test_a_signed_event_for_an_account_not_connected_leaves_the_call_parked_waiting_again_with_a_link(
    runtime: Runtime, setting: Setting
) -> None:
    parked = await park(runtime, setting, "late")
    headers, body = signed_event(setting.secret, "late")

    async with httpx.AsyncClient(timeout=60) as client:
        early = await client.post(setting.receiver, headers=headers, content=body)

    assert early.status_code == 200, early.text
    assert early.json()["calls"] == [{"call_id": parked.call_id, "status": "parked"}]
    record = await runtime.calls.get(parked.call_id)
    assert (record.status, record.waiting, record.error, record.result) == ("parked", 1, None, None)
    [question] = record.questions
    assert question.key == "connect.heldmail.late" and question.url is not None
    assert [p.question.key for p in await runtime.inbox(principal=WHO) if p.question.call_id == parked.call_id] == [
        "connect.heldmail.late"
    ]
    # Nothing was lost: once the account really connects, the server's own event completes the call.
    await connect(setting, "late")
    await until_status(runtime, parked.call_id, "completed")
    done = await runtime.calls.get(parked.call_id)
    assert done.result is not None and done.result["content"][0]["text"] == "Read the late account."


@pytest.mark.http
async def test_an_event_signed_by_another_configured_server_resumes_no_call_to_this_one(
    runtime: Runtime, setting: Setting
) -> None:
    parked = await park(runtime, setting, "elsewhere")
    headers, body = signed_event(setting.other_secret, "elsewhere")

    async with httpx.AsyncClient(timeout=60) as client:
        other = await client.post(setting.receiver, headers=headers, content=body)

    assert other.status_code == 200, other.text
    assert other.json() == {"duplicate": False, "calls": []}
    record = await runtime.calls.get(parked.call_id)
    assert (record.status, record.round, record.waiting) == ("parked", 1, 1)
    assert setting.runs("elsewhere") == 1
