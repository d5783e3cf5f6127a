"""`askback webhooks`, run as a user runs it: endpoints listed without their secrets, deliveries listed (`--json`,
`--status`), a failed delivery redelivered, and a test message the receiver verifies."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
from _hooks import Receiver, account_data, add_event, new_secret
from standardwebhooks.webhooks import Webhook

from askback.clock import FrozenClock
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule
from infra import run_askback

pytestmark = [pytest.mark.anyio, pytest.mark.http]


def settings_env(tmp_path: Path, db_url: str, url: str, secret: str) -> dict[str, str]:
    config = tmp_path / "webhooks.toml"
    config.write_text(
        f'[[endpoint]]\nurl = "{url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\nallow_private = true\n'
    )
    return {"ASKBACK_WEBHOOKS": str(config), "HOOK_SECRET": secret, "ASKBACK_DATABASE_URL": db_url}


async def test_deliveries_are_listed_with_json_and_a_failed_one_is_redelivered(
    tmp_path: Path, db_url: str, store: Store, receiver: Receiver
) -> None:
    secret = new_secret()
    env = settings_env(tmp_path, db_url, receiver.url, secret)
    receiver.answers = [500, 500]
    endpoint = Endpoint(url=receiver.url, events=["account.*"], secrets=[secret], allow_private=True)
    clock = FrozenClock(at=time.time())
    hooks = Dispatcher(
        Outbox(store.database, store.events),
        [endpoint],
        clock=clock,
        rng=random.Random(1),
        schedule=RetrySchedule(delays=(5.0,)),
    )
    await hooks.prepare()
    await add_event(store, "account.connected", time.time(), **account_data())
    await hooks.run_once()
    clock.advance(10)
    await hooks.run_once()
    await hooks.aclose()

    listed = run_askback("webhooks", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == [
        {"key": endpoint.key, "url": receiver.url, "events": ["account.*"], "secret_env": "HOOK_SECRET", "secrets": 1}
    ]
    assert secret not in listed.stdout

    failed = run_askback("webhooks", "deliveries", "--status", "failed", "--json", "--attempts", env=env)
    assert failed.returncode == 0, failed.stderr
    [row] = json.loads(failed.stdout)
    assert (row["status"], row["attempts"], row["type"]) == ("failed", 2, "account.connected")
    assert [a["status"] for a in row["attempt_log"]] == [500, 500]
    assert "body" not in row and secret not in failed.stdout
    assert json.loads(run_askback("webhooks", "deliveries", "--status", "pending", "--json", env=env).stdout) == []

    again = run_askback("webhooks", "redeliver", str(row["id"]), env=env)
    assert again.returncode == 0, again.stderr
    [pending] = await Outbox(store.database, store.events).deliveries(status="pending")
    assert pending.id == row["id"]
    twice = run_askback("webhooks", "redeliver", str(row["id"]), env=env)
    assert twice.returncode == 2 and "pending already" in twice.stderr
    unknown = run_askback("webhooks", "redeliver", "999", env=env)
    assert unknown.returncode == 2 and "no webhook delivery 999" in unknown.stderr
    bad = run_askback("webhooks", "deliveries", "--status", "lost", env=env)
    assert bad.returncode == 2 and "--status" in bad.stderr
    text = run_askback("webhooks", "deliveries", env=env)
    assert f"{row['id']}  pending" in text.stdout


def test_a_test_message_reaches_the_endpoint_signed(tmp_path: Path, db_url: str, receiver: Receiver) -> None:
    secret = new_secret()
    env = settings_env(tmp_path, db_url, receiver.url, secret)
    sent = run_askback("webhooks", "test", receiver.url, "--json", env=env)
    assert sent.returncode == 0, sent.stderr
    assert json.loads(sent.stdout)["status"] == 200
    [got] = receiver.received
    assert Webhook(secret).verify(got.body, got.headers)["type"] == "webhook.test"
    receiver.answers = [404]
    refused = run_askback("webhooks", "test", receiver.url, env=env)
    assert refused.returncode == 1 and "HTTP 404" in refused.stdout
    other = run_askback("webhooks", "test", "https://elsewhere.example/hooks", env=env)
    assert other.returncode == 2 and "no endpoint" in other.stderr


def test_a_missing_secret_is_refused_naming_the_variable_and_never_a_value(tmp_path: Path, db_url: str) -> None:
    env = settings_env(tmp_path, db_url, "https://hooks.example/in", "whsec_bm90LWJhc2U2NA!!")
    short = run_askback("webhooks", "list", env=env)
    assert short.returncode == 2 and "HOOK_SECRET" in short.stderr and "whsec_bm90" not in short.stderr
    env.pop("HOOK_SECRET")
    unset = run_askback("webhooks", "list", env=env)
    assert unset.returncode == 2 and "HOOK_SECRET, which is not set" in unset.stderr
