"""Webhook deliveries on real parts: a receiver on loopback, a store on a real SQLite file, the shared event log, and
the `standardwebhooks` package from PyPI as the receiver's verifier. Time is a `FrozenClock` and jitter a seeded
`random.Random`: a retry falls due when the test moves the clock."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import anyio
import anyio.to_thread
import pytest
from _hooks import Receiver, account_data, add_event, new_secret
from sqlalchemy import text
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from askback import Askback, load_settings
from askback.audit import AuditEvent
from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule, Webhooks

pytestmark = pytest.mark.anyio

SCHEDULE = RetrySchedule(delays=(5.0, 30.0), jitter=0.2)


def now_clock() -> FrozenClock:
    # Near the real time: a receiver refuses a `webhook-timestamp` more than 5 minutes away from its own clock.
    return FrozenClock(at=time.time())


def dispatcher(store: Store, endpoints: list[Endpoint], clock: FrozenClock) -> Dispatcher:
    return Dispatcher(
        Outbox(store.database, store.events), endpoints, clock=clock, rng=random.Random(7), schedule=SCHEDULE, idle=0.05
    )


@pytest.mark.http
async def test_a_delivery_verifies_with_the_standardwebhooks_package_and_carries_the_event(
    store: Store, receiver: Receiver
) -> None:
    secret = new_secret()
    clock = now_clock()
    hooks = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.*"], secrets=[secret], allow_private=True)], clock
    )
    await hooks.prepare()
    await add_event(store, "account.connected", clock.now(), **account_data())
    assert await hooks.run_once() == 2  # queued, then attempted
    [got] = receiver.received
    payload = Webhook(secret).verify(got.body, got.headers)
    assert payload["type"] == "account.connected"
    assert payload["data"] == account_data()
    assert payload["timestamp"].endswith("Z")
    assert got.headers["webhook-id"].startswith("msg_")
    assert got.headers["webhook-timestamp"] == str(int(clock.now()))
    with pytest.raises(WebhookVerificationError):
        Webhook(new_secret()).verify(got.body, got.headers)
    [delivery] = await Outbox(store.database, store.events).deliveries()
    assert (delivery.status, delivery.attempts, delivery.last_status) == ("delivered", 1, 200)
    await hooks.aclose()


@pytest.mark.http
async def test_while_secrets_rotate_each_one_signs_and_either_verifies(store: Store, receiver: Receiver) -> None:
    old, new = new_secret(), new_secret()
    clock = now_clock()
    hooks = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.connected"], secrets=[old, new], allow_private=True)], clock
    )
    await hooks.prepare()
    await add_event(store, "account.connected", clock.now(), **account_data())
    await hooks.run_once()
    [got] = receiver.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert Webhook(secret).verify(got.body, got.headers)["type"] == "account.connected"
    await hooks.aclose()


@pytest.mark.http
async def test_a_receiver_that_fails_twice_gets_the_event_on_the_third_attempt_with_the_same_webhook_id(
    store: Store, receiver: Receiver
) -> None:
    receiver.answers = [500, 500]
    clock = now_clock()
    outbox = Outbox(store.database, store.events)
    hooks = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.*"], secrets=[new_secret()], allow_private=True)], clock
    )
    await hooks.prepare()
    await add_event(store, "account.recovered", clock.now(), **account_data())
    await hooks.run_once()
    [pending] = await outbox.deliveries()
    assert (pending.status, pending.attempts, pending.last_error) == ("pending", 1, "HTTP 500")
    # Not due before the first delay (5 s, jitter at most 20 %): another pass sends nothing.
    clock.advance(3.9)
    await hooks.run_once()
    assert len(receiver.received) == 1
    clock.advance(2.2)
    await hooks.run_once()
    assert len(receiver.received) == 2
    clock.advance(36.1)
    await hooks.run_once()
    assert len(receiver.received) == 3
    assert len(set(receiver.ids())) == 1
    [delivered] = await outbox.deliveries()
    assert (delivered.status, delivered.attempts) == ("delivered", 3)
    log = await outbox.attempts(delivered.id)
    assert [(a.attempt, a.status) for a in log] == [(1, 500), (2, 500), (3, 200)]
    assert all(a.duration >= 0 and a.error is None for a in log)
    await hooks.aclose()


@pytest.mark.http
async def test_after_the_bounded_schedule_a_delivery_is_failed_and_redeliver_makes_it_pending_again(
    store: Store, receiver: Receiver
) -> None:
    receiver.answers = [503, 503, 503]
    clock = now_clock()
    outbox = Outbox(store.database, store.events)
    hooks = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.*"], secrets=[new_secret()], allow_private=True)], clock
    )
    await hooks.prepare()
    await add_event(store, "account.error", clock.now(), **account_data(new_status="error"))
    for _ in range(SCHEDULE.attempts):
        await hooks.run_once()
        clock.advance(40)
    [failed] = await outbox.deliveries(status="failed")
    assert failed.attempts == SCHEDULE.attempts == 3
    await hooks.run_once()
    assert len(receiver.received) == 3  # given up: never tried again by itself
    assert await outbox.redeliver(failed.id, now=clock.now()) == "redelivering"
    assert await outbox.redeliver(failed.id, now=clock.now()) == "pending"
    assert await outbox.redeliver(999, now=clock.now()) == "unknown"
    await hooks.run_once()
    [delivered] = await outbox.deliveries()
    assert delivered.status == "delivered"
    assert len(set(receiver.ids())) == 1 and len(receiver.ids()) == 4
    assert len(await outbox.attempts(delivered.id)) == 4
    await hooks.aclose()


async def test_an_unreachable_receiver_is_an_attempt_logged_with_its_kind_of_failure(store: Store) -> None:
    clock = now_clock()
    outbox = Outbox(store.database, store.events)
    hooks = dispatcher(
        store,
        [Endpoint(url="http://127.0.0.1:9/hooks", events=["account.*"], secrets=[new_secret()], allow_private=True)],
        clock,
    )
    await hooks.prepare()
    await add_event(store, "account.revoked", clock.now(), **account_data(new_status="revoked"))
    await hooks.run_once()
    [pending] = await outbox.deliveries()
    assert (pending.status, pending.last_status, pending.last_error) == ("pending", None, "connect")
    await hooks.aclose()


@pytest.mark.http
async def test_each_endpoint_gets_only_the_events_it_names_and_audit_events_only_when_it_opts_in(
    store: Store, receiver: Receiver
) -> None:
    clock = now_clock()
    everything = Endpoint(url=receiver.url + "/all", events=["account.*"], secrets=[new_secret()], allow_private=True)
    connected = Endpoint(
        url=receiver.url + "/connected", events=["account.connected"], secrets=[new_secret()], allow_private=True
    )
    audit = Endpoint(
        url=receiver.url + "/siem",
        events=["audit.rejected", "account.revoked"],
        secrets=[new_secret()],
        allow_private=True,
    )
    hooks = dispatcher(store, [everything, connected, audit], clock)
    await hooks.prepare()
    await add_event(store, "account.connected", clock.now(), **account_data())
    await add_event(store, "account.revoked", clock.now(), **account_data(new_status="revoked"))
    await store.audit_log.add_many(
        [
            AuditEvent(event="asked", at=clock.now(), tool="mail", flow_id="f1", principal="alice"),
            AuditEvent(event="rejected", at=clock.now(), tool="mail", flow_id="f1", detail="too late"),
        ]
    )
    await hooks.run_once()
    sent: dict[str, list[str]] = {}
    for delivery in await Outbox(store.database, store.events).deliveries():
        sent.setdefault(delivery.url.rsplit("/", 1)[1], []).append(delivery.type)
    assert sorted(sent["all"]) == ["account.connected", "account.revoked"]
    assert sent["connected"] == ["account.connected"]
    assert sorted(sent["siem"]) == ["account.revoked", "audit.rejected"]
    bodies = [json.loads(r.body) for r in receiver.received if r.body and b"audit." in r.body]
    assert [b["data"]["detail"] for b in bodies] == ["too late"]
    assert len(receiver.received) == 5
    await hooks.aclose()


@pytest.mark.http
async def test_an_endpoint_is_sent_what_happens_after_it_was_first_configured(store: Store, receiver: Receiver) -> None:
    clock = now_clock()
    await add_event(store, "account.connected", clock.now(), **account_data(principal="before"))
    hooks = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.*"], secrets=[new_secret()], allow_private=True)], clock
    )
    await hooks.prepare()
    await add_event(store, "account.connected", clock.now(), **account_data(principal="after"))
    await hooks.run_once()
    # Another instance starting later does not move the endpoint's cursor back or forth, nor queue again.
    again = dispatcher(
        store, [Endpoint(url=receiver.url, events=["account.*"], secrets=[new_secret()], allow_private=True)], clock
    )
    await again.prepare()
    assert await again.run_once() == 0
    assert [json.loads(r.body)["data"]["principal"] for r in receiver.received] == ["after"]
    await hooks.aclose()
    await again.aclose()


@pytest.mark.http
async def test_the_canary_credential_is_in_no_body_and_no_attempt_row(store: Store, receiver: Receiver) -> None:
    canary = "ya29.CANARY-" + "c" * 24
    secret = new_secret()
    receiver.answers = [500]
    clock = now_clock()
    hooks = dispatcher(
        store,
        [Endpoint(url=receiver.url, events=["account.*", "audit.*"], secrets=[secret], allow_private=True)],
        clock,
    )
    await hooks.prepare()
    await add_event(store, "account.refreshed", clock.now(), **account_data())
    await store.audit_log.add_many(
        [AuditEvent(event="answered", at=clock.now(), tool="mail", content={"token": canary}, outcome=canary)]
    )
    await hooks.run_once()
    clock.advance(10)
    await hooks.run_once()
    async with store.database.engine.connect() as conn:
        dumped = [
            repr(row)
            for table in ("askback_webhook_deliveries", "askback_webhook_attempts", "askback_webhook_cursors")
            for row in (await conn.execute(text(f"SELECT * FROM {table}"))).all()
        ]
    assert dumped and not any(canary in row or secret in row for row in dumped)
    assert receiver.received and not any(canary.encode() in r.body for r in receiver.received)
    await hooks.aclose()


@pytest.mark.http
async def test_an_app_with_the_extension_delivers_in_the_background_and_stops_cleanly(
    db_url: str, receiver: Receiver, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = new_secret()
    config = tmp_path / "webhooks.toml"
    config.write_text(
        f'[[endpoint]]\nurl = "{receiver.url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\n'
        "allow_private = true\n"
    )
    monkeypatch.setenv("HOOK_SECRET", secret)
    monkeypatch.setenv("ASKBACK_WEBHOOKS", str(config))
    webhooks = Webhooks.from_settings()
    webhooks.idle = 0.05
    app = Askback("hooks", settings=load_settings(database_url=db_url), extensions=[webhooks])
    async with app.running():
        store = await app.store()
        store.events.poll_interval = 0.02
        await add_event(store, "account.connected", time.time(), **account_data())
        assert await anyio.to_thread.run_sync(receiver.arrived.wait, 10)
        assert webhooks._task is not None and not webhooks._task.done()
    assert webhooks._task is None and webhooks.dispatcher is None
    [got] = receiver.received
    assert Webhook(secret).verify(got.body, got.headers)["type"] == "account.connected"


def test_webhooks_need_the_file_named_by_askback_webhooks() -> None:
    with pytest.raises(ConfigurationError, match="ASKBACK_WEBHOOKS"):
        Webhooks.from_settings(environ={})


@pytest.mark.http
async def test_an_endpoint_naming_only_approval_events_is_sent_them_and_no_account_event(
    store: Store, receiver: Receiver
) -> None:
    secret = new_secret()
    clock = now_clock()
    endpoint = Endpoint(url=receiver.url, events=["approval.*"], secrets=[secret], allow_private=True)
    hooks = dispatcher(store, [endpoint], clock)
    await hooks.prepare()
    decided = {"id": "apr_1", "digest": "d" * 64, "requester": "ada", "status": "approved", "approvers": ["bob"]}
    await add_event(store, "account.connected", clock.now(), **account_data())
    await add_event(store, "approval.decided", clock.now(), **decided)
    await hooks.run_once()
    [got] = receiver.received
    payload = Webhook(secret).verify(got.body, got.headers)
    assert (payload["type"], payload["data"]) == ("approval.decided", decided)
    await hooks.aclose()
