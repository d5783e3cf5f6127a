"""The runtime's webhook receiver (`askback.runtime.webhooks`): Standard Webhooks signed by the `standardwebhooks`
package from PyPI are believed, and nothing else is; `account.connected` resumes the call parked on connecting that
account, once, however often and to however many processes it is delivered; `askback inbox serve
--webhook-secret-env VAR` serves it at /webhooks/askback. The calls are made to a real askback server (the runtime
fixture server, whose `connect_mail` asks under `connect.mail` and counts every request that runs it)."""

from __future__ import annotations

import base64
import contextlib
import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from sqlalchemy import insert
from standardwebhooks import Webhook

from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.runtime import Completed, Parked, Runtime, WebInbox, resume_on_account_events, webhook_receiver
from askback.runtime._models import WebhookRow
from askback.runtime._unnamed_server import AnyServer, Bound, Undecided, binding
from askback.runtime.webhooks import Refused, Verified, dedupe_key, keys, verify
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import ROOT, inbox_serving, run_askback

pytestmark = pytest.mark.anyio

SERVER = "tests.fixtures.runtime_server:server"
NOW = 1_900_000_000


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


SECRET = new_secret()


def connected(principal: str = "ada", connection: str = "mail", type_: str = "account.connected") -> dict[str, Any]:
    return {
        "type": type_,
        "timestamp": "2030-03-17T17:46:40Z",
        "data": {"principal": principal, "connection": connection, "account_id": "acct_1", "new_status": "ACTIVE"},
    }


def signed(
    event: dict[str, Any], *, secret: str = SECRET, at: float = NOW, webhook_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    """The headers and body a Standard Webhooks sender sends, signed by the `standardwebhooks` package."""
    body = json.dumps(event)
    webhook_id = webhook_id or f"msg_{secrets.token_hex(8)}"
    signature = Webhook(secret).sign(webhook_id, datetime.fromtimestamp(at, tz=UTC), body)
    headers = {"webhook-id": webhook_id, "webhook-timestamp": str(int(at)), "webhook-signature": signature}
    return headers, body.encode()


# Verification -----------------------------------------------------------------------------------------------------


def test_a_webhook_signed_by_the_standard_webhooks_package_is_verified_as_the_package_verifies_it() -> None:
    headers, body = signed(connected(), at=datetime.now(tz=UTC).timestamp())
    Webhook(SECRET).verify(body, headers)  # the package's own check agrees

    verdict = verify(headers, body, keys=keys([SECRET]), now=int(headers["webhook-timestamp"]))

    assert verdict == Verified(headers["webhook-id"], body)


def _tampered(change: str) -> tuple[dict[str, str], bytes, float]:
    headers, body = signed(connected())
    if change == "body":
        body = body.replace(b'"ada"', b'"eve"')
    elif change == "signature":
        version, _, digest = headers["webhook-signature"].partition(",")
        raw = bytearray(base64.b64decode(digest))
        raw[0] ^= 1
        headers["webhook-signature"] = f"{version},{base64.b64encode(bytes(raw)).decode()}"
    elif change == "wrong secret":
        headers, body = signed(connected(), secret=new_secret())
    elif change == "id":
        headers["webhook-id"] = "msg_other"
    elif change == "timestamp re-stamped":
        headers["webhook-timestamp"] = str(NOW + 1)
    now = {"6 minutes old": NOW + 360, "6 minutes ahead": NOW - 360}.get(change, NOW)
    return headers, body, now


TAMPERED = ["body", "signature", "wrong secret", "id", "timestamp re-stamped", "6 minutes old", "6 minutes ahead"]


@pytest.mark.parametrize("change", TAMPERED)
def test_a_tampered_webhook_a_wrong_secret_or_a_timestamp_six_minutes_away_is_refused(change: str) -> None:
    headers, body, now = _tampered(change)

    verdict = verify(headers, body, keys=keys([SECRET]), now=now)

    assert isinstance(verdict, Refused)
    assert ("too far from now" in verdict.reason) == ("minutes" in change)


@pytest.mark.parametrize("header", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_webhook_without_one_of_its_three_headers_is_refused_naming_it(header: str) -> None:
    headers, body = signed(connected())
    del headers[header]

    assert verify(headers, body, keys=keys([SECRET]), now=NOW) == Refused(f"missing {header} header")


def test_any_configured_secret_verifies_and_any_of_several_signatures_matches_so_a_secret_can_be_rotated() -> None:
    old, new = new_secret(), new_secret()
    ring = keys([new, old])
    for secret in (old, new):
        headers, body = signed(connected(), secret=secret)
        assert isinstance(verify(headers, body, keys=ring, now=NOW), Verified)
    # A sender mid-rotation signs with both; a receiver that knows only the new one still believes it.
    headers, body = signed(connected(), secret=old, webhook_id="msg_r")
    by_new, _ = signed(connected(), secret=new, webhook_id="msg_r")
    headers["webhook-signature"] = f"v2,AAAA {headers['webhook-signature']} {by_new['webhook-signature']}"
    assert isinstance(verify(headers, body, keys=keys([new]), now=NOW), Verified)
    assert isinstance(verify(headers, body, keys=keys([new_secret()]), now=NOW), Refused)


def test_a_secret_that_is_not_whsec_base64_is_refused_without_being_shown() -> None:
    with pytest.raises(ConfigurationError, match="webhook secret 2 is not whsec_") as refused:
        keys([SECRET, "whsec_not base64!"])
    assert "not base64!" not in str(refused.value)
    with pytest.raises(ConfigurationError, match="at least one secret"):
        keys([])


# The receiver, in process -------------------------------------------------------------------------------------------


@dataclass
class Site:
    url: str
    counts: Path
    done: Path

    def runs(self) -> int:
        """How many requests ran `connect_mail` so far (its first round, and each resume that reached it)."""
        return self.counts.read_text().splitlines().count("connect_mail") if self.counts.exists() else 0


def _env(tmp: Path) -> dict[str, str]:
    return {
        "ASKBACK_STATE_KEYS": "runtime-webhooks-test-state-key-0123456789abcdef",
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": "http://127.0.0.1:9/connect",
    }


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    tmp = tmp_path_factory.mktemp("webhooks-site")
    with serving(SERVER, port=free_port(), workers=1, env=_env(tmp), cwd=str(ROOT)) as url:
        yield Site(url, tmp / "counts.txt", tmp / "page-done")


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    rt = await Runtime.open(
        f"sqlite:///{tmp_path / 'agent.db'}",
        renderers=[WebInbox()],
        clock=FrozenClock(NOW),
        settings=load_settings(answer_wait=3600),
    )
    try:
        yield rt
    finally:
        await rt.close()


ELSEWHERE = "https://tools.example.com/mcp"  # a server no call here is made to


def _client(runtime: Runtime, server: str = ELSEWHERE, **options: Any) -> httpx.AsyncClient:
    app = webhook_receiver(runtime, servers={server: [SECRET]}, **options)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


async def _park(runtime: Runtime, url: str, done: Path) -> str:
    """Park `connect_mail` on its question; from then on the account is connected, for whoever retries."""
    await anyio.Path(done).unlink(missing_ok=True)
    parked = await runtime.call_tool(url, "connect_mail", {}, principal="ada")
    await anyio.Path(done).touch()
    assert isinstance(parked, Parked) and parked.questions[0].key == "connect.mail"
    return parked.call_id


@pytest.mark.http
async def test_a_signed_account_connected_webhook_resumes_the_call_waiting_to_connect_that_account(
    runtime: Runtime, site: Site
) -> None:
    call_id = await _park(runtime, site.url, site.done)
    async with _client(runtime, site.url) as client:
        for_bob = await client.post("/", headers=signed(connected("bob"))[0], content=signed(connected("bob"))[1])
        headers, body = signed(connected())
        answered = await client.post("/", headers=headers, content=body)

    assert for_bob.status_code == 200 and for_bob.json()["calls"] == []
    assert answered.status_code == 200, answered.text
    assert answered.json() == {"duplicate": False, "calls": [{"call_id": call_id, "status": "completed"}]}
    record = await runtime.calls.get(call_id)
    assert record.status == "completed" and Completed(call_id, record.result or {}, 2).text == "Mail is connected."


@pytest.mark.http
@pytest.mark.parametrize("change", ["body", "signature", "wrong secret", "6 minutes old", "no headers"])
async def test_a_refused_webhook_is_answered_401_with_a_reason_and_resumes_nothing(
    runtime: Runtime, site: Site, change: str
) -> None:
    call_id = await _park(runtime, site.url, site.done)
    runs = site.runs()
    headers, body, now = _tampered("body") if change == "no headers" else _tampered(change)
    async with _client(runtime, site.url, clock=FrozenClock(now)) as client:
        refused = await client.post("/", headers={} if change == "no headers" else headers, content=body)

    assert refused.status_code == 401 and refused.json()["reason"], refused.text
    assert SECRET not in refused.text
    record = await runtime.calls.get(call_id)
    assert (record.status, record.waiting, site.runs()) == ("parked", 1, runs)


@pytest.mark.http
async def test_a_webhook_delivered_twice_and_twice_at_once_resumes_the_call_once(runtime: Runtime, site: Site) -> None:
    call_id = await _park(runtime, site.url, site.done)
    runs = site.runs()
    headers, body = signed(connected())
    answers: list[httpx.Response] = []
    async with _client(runtime, site.url) as client:

        async def deliver() -> None:
            answers.append(await client.post("/", headers=headers, content=body))

        async with anyio.create_task_group() as tg:
            tg.start_soon(deliver)
            tg.start_soon(deliver)
        await deliver()

    assert sorted(a.json()["duplicate"] for a in answers) == [False, True, True]
    assert all(a.status_code == 200 for a in answers)
    assert (await runtime.calls.get(call_id)).status == "completed"
    assert site.runs() == runs + 1


async def test_a_webhook_id_is_taken_once_on_either_database_and_a_taking_process_that_stopped_is_taken_over(
    any_database: str,
) -> None:
    clock = FrozenClock(NOW)
    async with await Runtime.open(any_database, migrate=True, clock=clock) as rt:
        headers, body = signed(connected("nobody"))
        async with _client(rt, resume_timeout=5) as client:
            first = await client.post("/", headers=headers, content=body)
            again = await client.post("/", headers=headers, content=body)
        assert (first.json()["duplicate"], again.json()["duplicate"]) == (False, True)
        # A process took this id in and stopped before finishing: once its lease has run out, a redelivery acts.
        await rt.store.database.transaction(
            lambda conn: conn.execute(
                insert(WebhookRow),
                {"id": dedupe_key(ELSEWHERE, "msg_stopped"), "type": "account.connected", "received_at": NOW, "claim": "c", "claimed_until": NOW + 10},
            ),
            doing="take in a webhook",
        )  # fmt: skip
        headers, body = signed(connected("nobody"), webhook_id="msg_stopped")
        async with _client(rt, resume_timeout=5, clock=clock) as client:
            held = await client.post("/", headers=headers, content=body)
            clock.advance(11)
            headers, body = signed(connected("nobody"), webhook_id="msg_stopped", at=NOW + 11)
            taken_over = await client.post("/", headers=headers, content=body)
        assert (held.json()["duplicate"], taken_over.json()["duplicate"]) == (True, False)


@pytest.mark.http
async def test_other_event_types_and_unreadable_bodies_resume_nothing(runtime: Runtime, site: Site) -> None:
    call_id = await _park(runtime, site.url, site.done)
    async with _client(runtime, site.url, max_body=4096) as client:
        other = await client.post("/", headers=signed(connected(type_="account.expired"))[0],
                                  content=signed(connected(type_="account.expired"))[1])  # fmt: skip
        headers, body = signed({"type": "account.connected", "data": {"principal": "ada"}})
        unreadable = await client.post("/", headers=headers, content=body)
        large = await client.post("/", headers=headers, content=b"x" * 5000)
        got = await client.get("/")

    assert other.status_code == 204
    assert unreadable.status_code == 400 and "data.connection" in unreadable.json()["reason"]
    assert large.status_code == 413
    assert got.status_code == 405 and got.headers["allow"] == "POST"
    assert (await runtime.calls.get(call_id)).status == "parked"


async def test_the_receivers_own_answers_carry_the_security_headers(runtime: Runtime) -> None:
    async with _client(runtime, max_body=4096) as client:
        answers = [
            await client.get("/"),
            await client.post("/", content=json.dumps(connected()).encode()),
            await client.post("/", headers=signed(connected())[0], content=b"x" * 5000),
        ]

    assert [a.status_code for a in answers] == [405, 401, 413]
    for answer in answers:
        assert answer.headers["content-security-policy"].startswith("default-src 'none'"), answer.headers
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert answer.headers["x-frame-options"] == "DENY"
        assert answer.headers["referrer-policy"] == "no-referrer"


@pytest.mark.http
async def test_a_resume_that_fails_answers_503_logs_one_line_and_the_senders_retry_resumes_the_call(
    runtime: Runtime, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    port = free_port()
    env = _env(tmp_path)
    with serving(SERVER, port=port, workers=1, env=env, cwd=str(ROOT)) as url:
        call_id = await _park(runtime, url, tmp_path / "page-done")
    headers, body = signed(connected())
    async with _client(runtime, url) as client:
        failed = await client.post("/", headers=headers, content=body)  # the server is down
        assert failed.status_code == 503 and "send it again" in failed.json()["reason"]
        (said,) = [r for r in caplog.records if r.name == "askback.runtime.webhooks" and r.levelname == "WARNING"]
        assert said.exc_info is None and "the resume failed: " in said.getMessage()  # no traceback
        # Nothing was answered: the call waits as it did, and the retry looks again.
        assert (await runtime.calls.get(call_id)).waiting == 1
        with serving(SERVER, port=port, workers=1, env=env, cwd=str(ROOT)):
            retried = await client.post("/", headers=headers, content=body)

    assert retried.status_code == 200, retried.text
    assert retried.json()["calls"] == [{"call_id": call_id, "status": "completed"}]


@pytest.mark.http
async def test_the_in_process_subscription_resumes_the_call_on_account_connected_only(
    runtime: Runtime, site: Site
) -> None:
    call_id = await _park(runtime, site.url, site.done)

    @dataclass(frozen=True)
    class Event:
        type: str
        principal: str
        connection: str
        label: str = ""

    async def events() -> AsyncIterator[Event]:
        yield Event("account.refreshed", "ada", "mail")
        assert (await runtime.calls.get(call_id)).status == "parked"
        yield Event("account.connected", "ada", "mail")

    await resume_on_account_events(runtime, events(), server=site.url)

    assert (await runtime.calls.get(call_id)).status == "completed"


# `askback inbox serve --webhook-secret-env VAR` ---------------------------------------------------------------------

SECRET_ENV = "AGENT_WEBHOOK_SECRETS"


@contextlib.contextmanager
def receiving(database: str, secrets_: str, server: str = ELSEWHERE) -> Iterator[str]:
    """`askback inbox serve --webhook-secret-env SERVER=AGENT_WEBHOOK_SECRETS` in its own process, taking the events of
    the server at `server`; yields its receiver."""
    args = ["--user", "ada", "--webhook-secret-env", f"{server}={SECRET_ENV}"]
    with inbox_serving(database, *args, env={SECRET_ENV: secrets_}) as base:
        yield f"{base}/webhooks/askback"


@pytest.mark.http
def test_beside_the_receiver_a_path_with_a_line_break_is_the_inbox_404_with_its_headers(tmp_path: Path) -> None:
    with receiving(f"sqlite:///{tmp_path / 'agent.db'}", SECRET) as receiver:
        answered = httpx.get(receiver.removesuffix("/webhooks/askback") + "/nothing%0Ahere", timeout=10)
    assert answered.status_code == 404 and answered.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in answered.headers["content-security-policy"]
    assert answered.headers["x-content-type-options"] == "nosniff"


@pytest.mark.http
async def test_two_inbox_processes_sharing_one_database_given_the_webhook_at_once_resume_the_call_once(
    runtime: Runtime, site: Site, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    first, second = await _park(runtime, site.url, site.done), await _park(runtime, site.url, site.done)
    runs = site.runs()
    answers: list[httpx.Response] = []
    now = datetime.now(tz=UTC).timestamp()
    # The same grant told under several ids (connected, recovered, ...), each to both processes at once: both race to
    # answer the same questions and send the same rounds.
    told = [signed(connected(type_=t), at=now) for t in ("account.connected", "account.recovered") * 3]
    with (
        receiving(database, f"{new_secret()},{SECRET}", site.url) as one,
        receiving(database, SECRET, site.url) as two,
    ):
        async with httpx.AsyncClient(timeout=60) as client:

            async def deliver(url: str, message: tuple[dict[str, str], bytes]) -> None:
                answers.append(await client.post(url, headers=message[0], content=message[1]))

            async with anyio.create_task_group() as tg:
                for message in told:
                    tg.start_soon(deliver, one, message)
                    tg.start_soon(deliver, two, message)

    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert sorted(a.json()["duplicate"] for a in answers) == [False] * len(told) + [True] * len(told)
    assert [(await runtime.calls.get(c)).status for c in (first, second)] == ["completed", "completed"]
    assert site.runs() == runs + 2


@pytest.mark.http
def test_inbox_serve_with_an_unset_or_malformed_webhook_secret_refuses_to_start_naming_what_to_fix(
    tmp_path: Path,
) -> None:
    served = run_askback(
        "inbox", "serve", "--user", "ada", "--database", f"sqlite:///{tmp_path / 'a.db'}",
        "--webhook-secret-env", f"{ELSEWHERE}=NO_SUCH_WEBHOOK_SECRET",
    )  # fmt: skip
    assert served.returncode == 2, served.stderr
    assert "NO_SUCH_WEBHOOK_SECRET" in served.stderr
    given = "whsec_not base64!"
    served = run_askback(
        "inbox", "serve", "--user", "ada", "--database", f"sqlite:///{tmp_path / 'a.db'}",
        "--webhook-secret-env", f"{ELSEWHERE}=AGENT_WEBHOOK_SECRETS", env={"AGENT_WEBHOOK_SECRETS": f"{SECRET},{given}"},
    )  # fmt: skip
    assert served.returncode == 2, served.stderr
    assert "webhook secret 2 is not whsec_" in served.stderr and given not in served.stderr


# The previous release's forms, which name no server: deprecated, still working --------------------------------------


def _localhost(url: str) -> str:
    """The same server process under another name: to the runtime, calls to it go to another server."""
    return url.replace("://127.0.0.1:", "://localhost:")


def test_events_naming_no_server_bind_to_the_one_server_the_parked_calls_go_to_however_its_url_is_spelled() -> None:
    one, same, other = "https://Tools.example.com/mcp", "https://tools.example.com:443/mcp/", "https://x.example/mcp"

    assert binding([one, same, one]) == Bound(one)
    assert binding([one, same, other]) == AnyServer((one, other))
    assert binding([]) == Undecided()


def _unnamed_client(runtime: Runtime) -> httpx.AsyncClient:
    with pytest.warns(DeprecationWarning, match=r"pass servers=\{MCP URL: \[secrets\]\}"):
        app = webhook_receiver(runtime, secrets=[SECRET])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


@pytest.mark.http
async def test_the_deprecated_secrets_keyword_warns_naming_servers_and_still_resumes_the_parked_call(
    runtime: Runtime, site: Site
) -> None:
    call_id = await _park(runtime, site.url, site.done)
    async with _unnamed_client(runtime) as client:
        headers, body = signed(connected())
        answered = await client.post("/", headers=headers, content=body)

    assert answered.status_code == 200, answered.text
    assert answered.json() == {"duplicate": False, "calls": [{"call_id": call_id, "status": "completed"}]}


@pytest.mark.http
async def test_deprecated_secrets_bind_to_the_one_server_the_parked_calls_go_to_and_resume_no_call_to_another(
    runtime: Runtime, site: Site
) -> None:
    to_it = await _park(runtime, site.url, site.done)
    async with _unnamed_client(runtime) as client:
        for_nobody = signed(connected("nobody"))  # the first event: the parked calls all go to site.url
        assert (await client.post("/", headers=for_nobody[0], content=for_nobody[1])).json()["calls"] == []
        to_another = await _park(runtime, _localhost(site.url), site.done)
        headers, body = signed(connected())
        answered = await client.post("/", headers=headers, content=body)

    assert answered.json()["calls"] == [{"call_id": to_it, "status": "completed"}], answered.text
    record = await runtime.calls.get(to_another)
    assert (record.status, record.waiting) == ("parked", 1)


@pytest.mark.http
async def test_deprecated_secrets_with_calls_parked_on_two_servers_resume_both_as_before_and_warn_once(
    runtime: Runtime, site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    first = await _park(runtime, site.url, site.done)
    second = await _park(runtime, _localhost(site.url), site.done)
    async with _unnamed_client(runtime) as client:
        headers, body = signed(connected())
        answered = await client.post("/", headers=headers, content=body)
        headers, body = signed(connected("nobody"))
        assert (await client.post("/", headers=headers, content=body)).status_code == 200

    assert sorted(c["call_id"] for c in answered.json()["calls"]) == sorted([first, second]), answered.text
    said = [r.getMessage() for r in caplog.records if r.name == "askback.runtime.webhooks" and r.levelname == "WARNING"]
    assert len(said) == 1, said
    assert "can resume calls waiting for the same account on another" in said[0]
    assert "--webhook-secret-env URL=VAR" in said[0] and "/mcp" not in said[0]  # the servers' origins only


def test_secrets_and_servers_given_together_are_refused_naming_servers(tmp_path: Path) -> None:
    async def build() -> None:
        async with await Runtime.open(f"sqlite:///{tmp_path / 'agent.db'}") as rt:
            webhook_receiver(rt, servers={ELSEWHERE: [SECRET]}, secrets=[new_secret()])

    with pytest.raises(ConfigurationError, match="servers= or the deprecated secrets=, not both"):
        anyio.run(build)


@pytest.mark.http
async def test_the_subscription_without_a_server_warns_naming_server_and_still_resumes_the_parked_call(
    runtime: Runtime, site: Site
) -> None:
    call_id = await _park(runtime, site.url, site.done)

    @dataclass(frozen=True)
    class Event:
        type: str
        principal: str
        connection: str
        label: str = ""

    async def events() -> AsyncIterator[Event]:
        yield Event("account.connected", "ada", "mail")

    with pytest.warns(DeprecationWarning, match="pass server= the MCP URL"):
        await resume_on_account_events(runtime, events())

    assert (await runtime.calls.get(call_id)).status == "completed"


@pytest.mark.http
async def test_inbox_serve_takes_a_bare_webhook_secret_env_var_with_a_deprecation_line_and_resumes_the_call(
    runtime: Runtime, site: Site, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    call_id = await _park(runtime, site.url, site.done)
    log = tmp_path / "inbox.log"
    args = ["--user", "ada", "--webhook-secret-env", SECRET_ENV]
    with inbox_serving(database, *args, env={SECRET_ENV: SECRET}, log=log) as base:
        headers, body = signed(connected(), at=datetime.now(tz=UTC).timestamp())
        async with httpx.AsyncClient(timeout=60) as client:
            answered = await client.post(f"{base}/webhooks/askback", headers=headers, content=body)

    assert answered.status_code == 200, answered.text
    assert answered.json()["calls"] == [{"call_id": call_id, "status": "completed"}]
    said = [line for line in log.read_text().splitlines() if "deprecated" in line]
    assert said == [
        f"askback inbox serve: --webhook-secret-env {SECRET_ENV} is deprecated (it goes in the next minor release): "
        f"name the server, --webhook-secret-env URL={SECRET_ENV} (its MCP URL, as calls are made to it), so that an "
        "event resumes only calls to the server that signed it"
    ]
    assert SECRET not in log.read_text()


@pytest.mark.http
def test_inbox_serve_refuses_a_bare_var_beside_named_servers_and_still_refuses_malformed_forms_with_status_2(
    tmp_path: Path,
) -> None:
    refused = {
        (SECRET_ENV, f"{ELSEWHERE}={SECRET_ENV}"): "give every server's secrets as URL=VAR",
        ("NO_SUCH_WEBHOOK_SECRET",): "set NO_SUCH_WEBHOOK_SECRET to the whsec_ secret(s)",
        (f"={SECRET_ENV}",): "as URL=VAR",
        (f"tools.example.com={SECRET_ENV}",): "as URL=VAR",
        (f"{ELSEWHERE}=",): "as URL=VAR",
        ("NOT A VAR",): "as URL=VAR",
    }
    for given, said in refused.items():
        options = [part for one in given for part in ("--webhook-secret-env", one)]
        served = run_askback(
            "inbox", "serve", "--user", "ada", "--database", f"sqlite:///{tmp_path / 'a.db'}", *options,
            env={SECRET_ENV: SECRET},
        )  # fmt: skip
        assert served.returncode == 2, (given, served.stderr)
        assert said in served.stderr and SECRET not in served.stderr, (given, served.stderr)


def _decided(approval_id: str = "apr_one", requester: Any = "ada") -> dict[str, Any]:
    data = {"id": approval_id, "requester": requester, "status": "approved", "digest": "d" * 64}
    return {"type": "approval.decided", "timestamp": "2030-03-17T17:46:40Z", "data": data}


@pytest.mark.http
async def test_approval_decided_resumes_the_call_waiting_on_exactly_that_request_and_no_other(
    runtime: Runtime, site: Site
) -> None:
    url, done = site.url, site.done
    await anyio.Path(done).unlink(missing_ok=True)
    parked = await runtime.call_tool(url, "await_approval", {"request": "apr_one"}, principal="ada")
    assert isinstance(parked, Parked) and parked.questions[0].key == "askback.approval.deploy"
    await anyio.Path(done).touch()
    async with _client(runtime, url) as client:
        others = [
            await client.post("/", headers=h, content=b)
            for h, b in (signed(_decided("apr_two")), signed(_decided(requester="bob")))
        ]
        headers, body = signed(_decided(requester=None))
        nobody = await client.post("/", headers=headers, content=body)
        still = await runtime.calls.get(parked.call_id)
        headers, body = signed(_decided())
        answered = await client.post("/", headers=headers, content=body)

    assert [r.json()["calls"] for r in others] == [[], []]
    assert nobody.status_code == 204  # a request nobody signed in made: ignored
    assert still.status == "parked"
    assert answered.status_code == 200, answered.text
    assert answered.json()["calls"] == [{"call_id": parked.call_id, "status": "completed"}]
    record = await runtime.calls.get(parked.call_id)
    assert record.status == "completed"
    assert Completed(parked.call_id, record.result or {}, 2).text == "Approved: apr_one."
