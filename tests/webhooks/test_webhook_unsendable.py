"""A webhook URL whose host httpx cannot encode is refused when the endpoint is made, naming it; and one that gets
past that (made by hand) only fails its own attempts: the dispatcher, run by the app as in production, keeps
delivering to the endpoint beside it, and `askback webhooks test` answers with its documented statuses, never a
crash. Real receivers on loopback, a store on a real SQLite file, the `askback` command as a user runs it."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import anyio
import pytest
from _hooks import account_data, add_event, new_secret
from _peers import at_once, serving, settled

from askback import Askback, load_settings
from askback.errors import ConfigurationError
from askback.webhooks import Endpoint, Outbox, Webhooks, load_endpoints, send_test
from infra import run_askback

pytestmark = pytest.mark.anyio

DEADLINE = 20.0  # seconds any single wait of a test may take before it fails
UNSENDABLE = ("https://xn--bcher.example/hooks", "https://１２７.0.0.1/", "https://😀.example/in", "https://xn--/")


def endpoints_file(tmp_path: Path, *urls: str) -> Path:
    config = tmp_path / "webhooks.toml"
    tables = (
        f'[[endpoint]]\nurl = "{url}"\nevents = ["account.*"]\nsecret_env = "HOOK_SECRET"\nallow_private = true\n'
        for url in urls
    )
    config.write_text("\n".join(tables), encoding="utf-8")
    return config


def unchecked(url: str) -> Endpoint:
    """An endpoint whose URL skipped the checks made when an endpoint is made: what a URL the checks let through,
    but httpx cannot send to, looks like to the dispatcher."""
    endpoint = Endpoint(url="https://hooks.example.com/in", events=["account.*"], secrets=[new_secret()])
    object.__setattr__(endpoint, "url", url)
    return endpoint


@pytest.mark.parametrize("url", UNSENDABLE)
def test_a_url_whose_host_httpx_cannot_encode_is_refused_at_load_naming_the_endpoint(tmp_path: Path, url: str) -> None:
    environ = {"HOOK_SECRET": new_secret()}
    with pytest.raises(ConfigurationError) as refused:
        load_endpoints(endpoints_file(tmp_path, "http://127.0.0.1:8080/good", url), environ=environ)
    message = str(refused.value)
    assert url.split("/")[2] in message and "internationalised domain name" in message and "xn--" in message
    # An internationalised name that encodes is accepted, in Unicode and in its `xn--` form.
    accepted = endpoints_file(tmp_path, "https://bücher.example/hooks", "https://xn--bcher-kva.example/in")
    assert len(load_endpoints(accepted, environ=environ)) == 2


@pytest.mark.http
async def test_an_unsendable_endpoint_fails_its_attempts_while_the_one_beside_it_is_delivered(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    bad = unchecked("https://xn--bcher.example/hooks?token=SEKRET")
    async with serving(at_once) as good:
        endpoint = Endpoint(url=good.url, events=["account.*"], secrets=[new_secret()], allow_private=True)
        webhooks = Webhooks([bad, endpoint], idle=0.05)
        app = Askback("hooks", settings=load_settings(database_url=db_url), extensions=[webhooks])
        with settled() as attempts, caplog.at_level(logging.INFO, logger="askback.webhooks"):
            async with app.running():
                store = await app.store()
                store.events.poll_interval = 0.02
                with anyio.fail_after(DEADLINE):
                    await add_event(store, "account.connected", time.time(), **account_data())
                    await attempts.until(2)  # the good endpoint's attempt, and the unsendable one's
                    # The loop still runs: the next event reaches the good endpoint too.
                    await add_event(store, "account.revoked", time.time(), **account_data(new_status="revoked"))
                    await good.until(lambda: len(good.requests) == 2)
                assert webhooks._task is not None and not webhooks._task.done()
                outbox = Outbox(store.database, store.events)
                failed = [d for d in await outbox.deliveries() if d.endpoint == bad.key]
                logged_attempts = [a for d in failed for a in await outbox.attempts(d.id)]
    assert failed and {(d.status, d.last_error) for d in failed} == {("pending", "InvalidCodepoint")}
    assert {(a.status, a.error) for a in logged_attempts} == {(None, "InvalidCodepoint")}
    logged = caplog.text
    assert "https://xn--bcher.example/hooks?[redacted]" in logged and "SEKRET" not in logged
    assert "dispatcher stopped" not in logged


@pytest.mark.http
async def test_the_test_message_to_an_unsendable_endpoint_is_a_failure_not_a_crash() -> None:
    with anyio.fail_after(DEADLINE):
        sent = await send_test(unchecked("https://xn--bcher.example/hooks"))
    assert (sent.status, sent.error, sent.delivered) == (None, "InvalidCodepoint", False)


@pytest.mark.http
def test_askback_webhooks_test_refuses_a_file_with_an_unsendable_url_with_status_2_not_a_crash(
    tmp_path: Path,
) -> None:
    config = endpoints_file(tmp_path, "http://127.0.0.1:9/good", "https://xn--bcher.example/hooks")
    sent = run_askback(
        "webhooks",
        "test",
        "http://127.0.0.1:9/good",
        env={"ASKBACK_WEBHOOKS": str(config), "HOOK_SECRET": new_secret()},
    )
    assert sent.returncode == 2, sent.stderr
    assert "xn--bcher.example" in sent.stderr and "internationalised domain name" in sent.stderr
    assert "crashed" not in sent.stderr and "Traceback" not in sent.stderr
