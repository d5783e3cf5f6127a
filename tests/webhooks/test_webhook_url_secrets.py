"""No credential in a webhook URL reaches a log, a listing, an error or a delivery row: a user name or password is
refused when the endpoint is made, and a query string (where receivers put tokens) is shown as `[redacted]`."""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from pathlib import Path

import pytest
from _hooks import Receiver, account_data, add_event, new_secret

from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.store import Store
from askback.webhooks import Dispatcher, Endpoint, Outbox, RetrySchedule, load_endpoints
from askback.webhooks.endpoints import redacted_url
from infra import run_askback

pytestmark = pytest.mark.anyio

PASSWORD = "hunter2-PASSWORD-canary"
TOKEN = "tok-QUERY-canary-0123456789"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com/in", "https://hooks.example.com/in"),
        ("https://hooks.example.com:8443/in?token=abc", "https://hooks.example.com:8443/in?[redacted]"),
        (
            "https://user:pass@hooks.example.com/in?a=1#frag",
            "https://[redacted]@hooks.example.com/in?[redacted]#[redacted]",
        ),
        ("https://hooks.example.com/in?", "https://hooks.example.com/in?[redacted]"),
        ("http://[::1]:9/in?t=1", "http://[::1]:9/in?[redacted]"),
        ("https://[::1/in?t=secret", "[redacted] (a URL that cannot be parsed)"),
    ],
)
def test_a_url_is_shown_without_userinfo_query_or_fragment(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        f"https://alice:{PASSWORD}@hooks.example.com/in",
        f"https://{PASSWORD}@hooks.example.com/in",
        f"https://:{PASSWORD}@hooks.example.com/in?token={TOKEN}",
    ],
)
@pytest.mark.http
def test_a_url_with_a_user_name_or_password_is_refused_at_load_never_echoing_it(tmp_path: Path, url: str) -> None:
    config = tmp_path / "webhooks.toml"
    config.write_text(f'[[endpoint]]\nurl = "{url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\n')
    with pytest.raises(ConfigurationError, match="user name or password") as refused:
        load_endpoints(config, environ={"HOOK_SECRET": new_secret()})
    assert "hooks.example.com" in str(refused.value)
    assert PASSWORD not in str(refused.value) and TOKEN not in str(refused.value)
    listed = run_askback("webhooks", "list", env={"ASKBACK_WEBHOOKS": str(config), "HOOK_SECRET": new_secret()})
    assert listed.returncode == 2 and "user name or password" in listed.stderr
    assert PASSWORD not in listed.stdout + listed.stderr and TOKEN not in listed.stdout + listed.stderr


def test_a_refused_endpoint_and_its_repr_never_show_its_query(tmp_path: Path) -> None:
    secret = new_secret()
    with pytest.raises(ConfigurationError) as refused:
        Endpoint(url=f"https://10.0.0.5/in?token={TOKEN}", events=["account.*"], secrets=[secret])
    assert "10.0.0.5" in str(refused.value) and TOKEN not in str(refused.value)
    endpoint = Endpoint(url=f"https://hooks.example.com/in?token={TOKEN}", events=["account.*"], secrets=[secret])
    assert TOKEN not in repr(endpoint) and "hooks.example.com" in repr(endpoint)
    config = tmp_path / "webhooks.toml"
    table = f'[[endpoint]]\nurl = "{endpoint.url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\n'
    config.write_text(table * 2)
    with pytest.raises(ConfigurationError, match="two endpoints") as twice:
        load_endpoints(config, environ={"HOOK_SECRET": secret})
    assert TOKEN not in str(twice.value)


@pytest.mark.http
async def test_a_token_in_the_query_is_in_no_log_no_cli_output_and_no_stored_row(
    tmp_path: Path, db_url: str, store: Store, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    secret = new_secret()
    url = f"{receiver.url}?token={TOKEN}"
    config = tmp_path / "webhooks.toml"
    config.write_text(
        f'[[endpoint]]\nurl = "{url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\nallow_private = true\n'
    )
    env = {"ASKBACK_WEBHOOKS": str(config), "HOOK_SECRET": secret, "ASKBACK_DATABASE_URL": db_url}
    [endpoint] = load_endpoints(config, environ=env)
    receiver.answers = [500]
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
    with caplog.at_level(logging.DEBUG):
        await hooks.run_once()
        clock.advance(10)
        await hooks.run_once()
    await hooks.aclose()
    assert len(receiver.received) == 2  # the receiver itself was sent its token
    assert "askback webhook" in caplog.text and "?[redacted]" in caplog.text and TOKEN not in caplog.text

    outputs = [
        run_askback("webhooks", "list", env=env),
        run_askback("webhooks", "list", "--json", env=env),
        run_askback("webhooks", "deliveries", "--attempts", env=env),
        run_askback("webhooks", "deliveries", "--attempts", "--json", env=env),
        run_askback("webhooks", "test", endpoint.key, env=env),
        run_askback("webhooks", "test", url, "--json", env=env),
        run_askback("webhooks", "test", f"{url}-not-configured", env=env),
    ]
    assert [o.returncode for o in outputs] == [0, 0, 0, 0, 0, 0, 2]
    assert "?[redacted]" in outputs[0].stdout and "?[redacted]" in outputs[2].stdout
    for done in outputs:
        assert TOKEN not in done.stdout and TOKEN not in done.stderr, done.args

    with sqlite3.connect(db_url.removeprefix("sqlite:///")) as db:
        dumped = "\n".join(db.iterdump())
    assert "askback_webhook_deliveries" in dumped and TOKEN not in dumped
