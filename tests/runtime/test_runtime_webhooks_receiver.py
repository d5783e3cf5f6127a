"""The receiver's claims and resumes hold with two servers, expired calls and a call that cannot go on.

Two `askback serve tests.fixtures.labelled_accounts_server:server` processes, each with its own database and its own
webhook secret, deliver their account events to one `askback inbox serve` taking both servers' events. Their ids
count from 1 in each server's database, to an endpoint keyed by the same receiver URL: the two servers' first events
carry the same `webhook-id`. Calls whose deadlines move with an injected clock, or whose server refuses them, are
parked by a runtime in this process on a database of its own, and resumed through its own receiver.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import anyio.from_thread
import anyio.to_thread
import httpx
import pytest
import sqlalchemy

from askback.accounts.repository import Accounts
from askback.accounts.status import Event
from askback.accounts.vault import new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.runtime import AccountActive, Completed, Parked, Runtime, WebInbox
from askback.runtime.webhooks import webhook_receiver
from askback.settings import load_settings
from askback.store import Store
from askback.testing import free_port, serving
from askback.web.standard_webhooks import secret_keys, signed_headers
from infra import ROOT, inbox_serving, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SERVER = "tests.fixtures.labelled_accounts_server:server"
WHO = "anonymous"  # the fixture server's name for a caller without a token, as `askback inbox serve` resumes
ANSWER_WAIT = 600.0


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


@dataclass
class Tools:
    """One labelled-accounts server: its MCP URL, its database and the secret its endpoint signs with."""

    url: str
    db: str
    secret: str


@dataclass
class Setting:
    one: Tools
    two: Tools
    receiver: str  # the inbox's /webhooks/askback
    agent_db: str
    tmp: Path
    refused: set[str] = field(default_factory=set)  # MCP URLs the in-process runtime sends a token nobody accepts


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    tmp = tmp_path_factory.mktemp("webhooks-receiver")
    ports = {"ONE": free_port(), "TWO": free_port()}
    tools = {
        name: Tools(f"http://127.0.0.1:{port}/mcp", f"sqlite:///{tmp / f'server-{name}.db'}", new_secret())
        for name, port in ports.items()
    }
    agent_db = f"sqlite:///{tmp / 'agent.db'}"
    hooks = [arg for name, t in tools.items() for arg in ("--webhook-secret-env", f"{t.url}=SECRETS_{name}")]
    env = {f"SECRETS_{name}": t.secret for name, t in tools.items()}
    with inbox_serving(agent_db, "--user", WHO, *hooks, env=env) as inbox:
        receiver = f"{inbox}/webhooks/askback"
        with (
            serving_tools(tools["ONE"], "ONE", ports["ONE"], receiver, tmp),
            serving_tools(tools["TWO"], "TWO", ports["TWO"], receiver, tmp),
        ):
            yield Setting(tools["ONE"], tools["TWO"], receiver, agent_db, tmp)


def serving_tools(tools: Tools, name: str, port: int, receiver: str, tmp: Path) -> AbstractContextManager[str]:
    endpoints = tmp / f"webhooks-{name}.toml"
    endpoints.write_text(
        f'[[endpoint]]\nurl = "{receiver}"\nevents = ["account.connected", "account.recovered"]\n'
        f'secret_env = "SECRETS_{name}"\nallow_private = true\n',  # the receiver is on this machine
        encoding="utf-8",
    )
    env = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": tools.db,
        "ASKBACK_VAULT_KEYS": new_key(),
        "ASKBACK_WEBHOOKS": str(endpoints),
        "LABELLED_TEST_BASE_URL": f"http://127.0.0.1:{port}",
        "RUNTIME_TEST_COUNTS": str(tmp / f"counts-{name}.txt"),
        f"SECRETS_{name}": tools.secret,
    }
    return serving(SERVER, port=port, workers=1, env=env, cwd=str(ROOT))


@pytest.fixture
async def agent(setting: Setting) -> AsyncIterator[Runtime]:
    """The runtime `askback inbox serve` resumes from."""
    async with await Runtime.open(
        setting.agent_db, renderers=[WebInbox()], settings=load_settings(development=True)
    ) as rt:
        yield rt


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(time.time())


@pytest.fixture
async def own(setting: Setting, clock: FrozenClock, tmp_path: Path) -> AsyncIterator[Runtime]:
    """A runtime of this process on a database of its own, on `clock`, sending a token nobody accepts to the URLs
    of `setting.refused`."""

    def headers(server: str) -> dict[str, str]:
        return {"Authorization": "Bearer not-a-token-anyone-issued"} if server in setting.refused else {}

    settings = load_settings(development=True, answer_wait=ANSWER_WAIT)
    async with await Runtime.open(
        f"sqlite:///{tmp_path / 'own.db'}", renderers=[WebInbox()], settings=settings, clock=clock, headers=headers
    ) as rt:
        yield rt


async def park(runtime: Runtime, url: str, label: str) -> Parked:
    parked = await runtime.call_tool(url, "read_mail", {"label": label}, principal=WHO)
    assert isinstance(parked, Parked), parked
    return parked


async def connect(tools: Tools, label: str) -> None:
    """The account `label` of WHO becomes ACTIVE in the server's store, as the hosted pages' callback makes it."""
    server_parts = tuple(c for c in all_components() if c.name in ("server", "accounts", "webhooks"))
    store = await Store.open(tools.db, migrate=False, components=server_parts)
    try:
        accounts = Accounts(store.database)
        [account] = [a for a in await accounts.of(WHO, "heldmail") if a.label == label]
        await accounts.change(account.id, Event.CONNECTED, now=time.time(), reason="granted", credential="sealed")
    finally:
        await store.close()


async def until_completed(runtime: Runtime, call_id: str) -> None:
    def reached() -> bool:
        return anyio.from_thread.run(runtime.calls.get, call_id).status == "completed"

    await anyio.to_thread.run_sync(lambda: wait_until(reached, timeout=60, what=f"call {call_id} completed"))


def signed_event(secret: str, label: str, *, webhook_id: str, at: float) -> tuple[dict[str, str], str]:
    data = {"account_id": "acc_x", "principal": WHO, "connection": "heldmail", "label": label}
    body = json.dumps({"type": "account.connected", "timestamp": "2030-01-01T00:00:00Z", "data": data})
    return signed_headers(secret_keys([secret]), webhook_id, int(at), body), body


def text(result: dict[str, object] | None) -> str:
    assert result is not None
    return str(result["content"][0]["text"])  # type: ignore[index]


# Two servers, one receiver ----------------------------------------------------------------------------------------


async def test_both_servers_first_events_resume_their_own_calls_though_they_carry_the_same_webhook_id(
    agent: Runtime, setting: Setting
) -> None:
    on_one, on_two = await park(agent, setting.one.url, ""), await park(agent, setting.two.url, "")

    await connect(setting.one, "")  # server one's dispatcher delivers its first event, msg_1_<receiver's key>
    await until_completed(agent, on_one.call_id)
    await connect(setting.two, "")  # server two's first event: the same webhook-id, signed by another server
    await until_completed(agent, on_two.call_id)

    assert text((await agent.calls.get(on_two.call_id)).result) == "Read the default account."


async def test_a_webhook_id_one_server_used_first_is_still_taken_from_another_and_repeats_only_for_the_same_one(
    agent: Runtime, setting: Setting
) -> None:
    parked = await park(agent, setting.one.url, "pre")
    now = time.time()

    async with httpx.AsyncClient(timeout=60) as client:

        async def deliver(tools: Tools) -> httpx.Response:
            headers, body = signed_event(tools.secret, "pre", webhook_id="msg_shared", at=now)
            return await client.post(setting.receiver, headers=headers, content=body)

        by_two = await deliver(setting.two)  # server two claims the id first (it has no call waiting)
        by_one = await deliver(setting.one)
        by_one_again = await deliver(setting.one)

    assert by_two.json() == {"duplicate": False, "calls": []}
    assert by_one.status_code == 200 and by_one.json()["duplicate"] is False
    assert by_one.json()["calls"] == [{"call_id": parked.call_id, "status": "parked"}]  # looked: not connected yet
    assert by_one_again.json() == {"duplicate": True, "calls": []}


# Deadlines --------------------------------------------------------------------------------------------------------


async def test_an_event_for_a_call_past_its_deadline_ends_it_as_resume_does_and_never_parks_it_again(
    own: Runtime, setting: Setting, clock: FrozenClock
) -> None:
    expired, control = await park(own, setting.one.url, "gone"), await park(own, setting.one.url, "gone-too")
    clock.advance(ANSWER_WAIT + 1)

    [by_event] = await own.account_active(AccountActive(WHO, "heldmail", "gone", setting.one.url))
    by_resume = await own.resume(control.call_id)

    assert isinstance(by_resume, Completed) and "dismissed" in text(by_resume.result)
    assert isinstance(by_event, Completed), by_event  # not parked again with a fresh deadline
    assert by_event.call_id == expired.call_id
    assert text(by_event.result) == text(by_resume.result).replace("gone-too", "gone")


async def test_a_look_that_finds_the_account_not_connected_keeps_the_calls_deadline_and_after_it_the_event_ends_it(
    own: Runtime, setting: Setting, clock: FrozenClock
) -> None:
    parked = await park(own, setting.one.url, "slow")
    event = AccountActive(WHO, "heldmail", "slow", setting.one.url)
    clock.advance(ANSWER_WAIT - 10)

    [looked] = await own.account_active(event)  # not connected: the server asks again
    assert isinstance(looked, Parked) and looked.round == 2
    assert looked.deadline == parked.deadline  # no more time than the call had

    clock.advance(10)
    [after] = await own.account_active(event)

    assert isinstance(after, Completed) and "dismissed" in text(after.result)


# One call that cannot go on ---------------------------------------------------------------------------------------


def own_receiver(runtime: Runtime, tools: Tools) -> httpx.AsyncClient:
    app = webhook_receiver(runtime, servers={tools.url: [tools.secret]}, resume_timeout=60)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1", timeout=60)


async def test_a_call_whose_server_refuses_it_does_not_keep_the_event_from_resuming_the_others_and_alone_it_answers_503(
    own: Runtime, setting: Setting, clock: FrozenClock
) -> None:
    refused = setting.one.url + "/"  # the same server, as the runtime spells it otherwise
    older, newer = await park(own, setting.one.url, "iso"), await park(own, refused, "iso")
    alone = await park(own, refused, "alone")
    await connect(setting.one, "iso")
    await connect(setting.one, "alone")
    setting.refused.add(refused)  # from now on its rounds are answered 401
    try:
        async with own_receiver(own, setting.one) as client:

            async def deliver(label: str) -> httpx.Response:
                headers, body = signed_event(setting.one.secret, label, webhook_id=f"msg_{label}", at=clock.now())
                return await client.post("/", headers=headers, content=body)

            answered, again = await deliver("iso"), await deliver("iso")
            failed = await deliver("alone")
            setting.refused.discard(refused)
            retried = await deliver("alone")
    finally:
        setting.refused.discard(refused)

    assert answered.status_code == 200, answered.text
    assert answered.json()["calls"] == [
        {"call_id": older.call_id, "status": "completed"},
        {"call_id": newer.call_id, "status": "not_resumed"},
    ]
    assert again.json() == {"duplicate": True, "calls": []}
    assert text((await own.calls.get(older.call_id)).result) == "Read the iso account."
    waiting = await own.calls.get(newer.call_id)
    assert (waiting.status, waiting.round) == ("parked", 1)  # as it was, for its own retry
    # Every call the event concerns failed: nothing was taken, and the sender's retry is their next chance.
    assert failed.status_code == 503, failed.text
    assert retried.status_code == 200 and retried.json()["calls"] == [{"call_id": alone.call_id, "status": "completed"}]


async def test_a_call_whose_server_refuses_its_round_for_good_is_reported_failed_not_waiting(
    own: Runtime, setting: Setting, clock: FrozenClock
) -> None:
    good, broken = await park(own, setting.one.url, "brk"), await park(own, setting.one.url, "brk")

    def spoil(conn: sqlalchemy.Connection) -> None:
        # a requestState the server never sealed: its round is refused -32602
        query = sqlalchemy.text("SELECT pending FROM askback_runtime_calls WHERE id = :id")
        row = conn.execute(query, {"id": broken.call_id})
        asked = json.loads(row.scalar_one())
        asked["requestState"] = "not-a-state-this-server-sealed"
        params = {"id": broken.call_id, "p": json.dumps(asked)}
        conn.execute(sqlalchemy.text("UPDATE askback_runtime_calls SET pending = :p WHERE id = :id"), params)

    await own.store.database.transaction(spoil, doing="spoil a parked call's state")
    await connect(setting.one, "brk")
    async with own_receiver(own, setting.one) as client:
        headers, body = signed_event(setting.one.secret, "brk", webhook_id="msg_brk", at=clock.now())
        answered = await client.post("/", headers=headers, content=body)

    assert answered.status_code == 200, answered.text
    assert sorted(answered.json()["calls"], key=lambda c: c["status"]) == [
        {"call_id": good.call_id, "status": "completed"},
        {"call_id": broken.call_id, "status": "failed"},
    ]
    assert (await own.calls.get(broken.call_id)).status == "failed"
