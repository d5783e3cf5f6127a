"""DNS rebinding against `askback inbox serve`: a page on rebind.example whose name resolves to 127.0.0.1 reaches the
inbox from the person's own browser, sending `Host: rebind.example:PORT` and a matching `Origin`. The inbox and its
webhook receiver answer only the loopback names and the hosts configured (`ASKBACK_ALLOWED_HOSTS`, `--allowed-host`,
`ASKBACK_PUBLIC_URL`), with 421 otherwise. Real processes on loopback, a real askback server asking, real Chromium.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from askback.runtime import Parked, ParkedQuestion, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from askback.web.standard_webhooks import signed_headers
from infra import FIXTURES, _chromium_executable, inbox_serving

pytestmark = [pytest.mark.anyio, pytest.mark.http]

REBIND = "rebind.example"
SECRET_KEY = secrets.token_bytes(24)
SECRET = "whsec_" + base64.b64encode(SECRET_KEY).decode()


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("hosts-server")
    env = {"ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'server.db'}", "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
    with serving("runtime_inbox_server:server", port=free_port(), workers=1, env=env, cwd=str(FIXTURES)) as url:
        yield url


async def parked_for_alice(database: str, server_url: str) -> ParkedQuestion:
    settings = load_settings(database_url=database)
    runtime = await Runtime.open(database, renderers=[WebInbox()], settings=settings)
    try:
        outcome = await runtime.call_tool(server_url, "approve", {"item": "the invoice"}, principal="alice")
        assert isinstance(outcome, Parked), outcome
        return outcome.questions[0]
    finally:
        await runtime.close()


async def answers_of(database: str, q: ParkedQuestion) -> dict[str, object]:
    runtime = await Runtime.open(database, settings=load_settings(database_url=database))
    try:
        return dict(await runtime.calls.answers(q.call_id, q.round))
    finally:
        await runtime.close()


class _Token(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.value = ""
        self.feed(html)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "input" and named.get("name") == "csrf":
            self.value = named.get("value") or ""


async def post_answer(base: str, host: str, q: ParkedQuestion) -> httpx.Response:
    """What the page at `host` does: open the question's form (its cookie and token come along) and post `accept`,
    with the `Origin` and `Host` of its own site."""
    port = urlsplit(base).port
    headers = {"Host": f"{host}:{port}", "Origin": f"http://{host}:{port}", "Sec-Fetch-Site": "same-origin"}
    path = f"/q/{q.call_id}/{q.round}/{q.key}"
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=10) as page:
        form = await page.get(path)
        token = _Token(form.text).value if form.status_code == 200 else secrets.token_urlsafe(32)
        page.cookies.clear()
        return await page.post(
            path,
            data={"csrf": token, "action": "accept", "f.ok": "true"},
            headers={"Cookie": f"askback_inbox_csrf={token}"},
            follow_redirects=False,
        )


async def test_a_user_inbox_refuses_a_rebinding_host_on_its_list_and_on_an_answer_and_serves_loopback(
    tmp_path: Path, server_url: str
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    q = await parked_for_alice(database, server_url)
    with inbox_serving(database, "--user", "alice", "--no-resume") as base:
        port = urlsplit(base).port
        rebound = {"Host": f"{REBIND}:{port}", "Origin": f"http://{REBIND}:{port}"}
        async with httpx.AsyncClient(timeout=10) as http:
            listing = await http.get(f"{base}/", headers=rebound)
            served = await http.get(f"{base}/", headers={"Host": f"127.0.0.1:{port}"})
        refused = await post_answer(base, REBIND, q)
        assert (listing.status_code, refused.status_code) == (421, 421)
        assert "the invoice" not in listing.text
        assert listing.headers["x-frame-options"] == "DENY" and listing.headers["cache-control"] == "no-store"
        assert await answers_of(database, q) == {}

        assert served.status_code == 200 and "the invoice" in served.text
        answered = await post_answer(base, "127.0.0.1", q)
        assert answered.status_code == 303, answered.text
    assert list(await answers_of(database, q)) == [q.key]


async def test_a_host_added_by_the_setting_is_served_by_the_inbox(tmp_path: Path, server_url: str) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    q = await parked_for_alice(database, server_url)
    env = {"ASKBACK_ALLOWED_HOSTS": "inbox.example.com"}
    with inbox_serving(
        database, "--user", "alice", "--no-resume", "--allowed-host", "inbox.example.net", env=env
    ) as base:
        async with httpx.AsyncClient(timeout=10) as http:
            for host in ("inbox.example.com", "inbox.example.net"):
                page = await http.get(f"{base}/", headers={"Host": host})
                assert page.status_code == 200 and "the invoice" in page.text, host
            assert (await http.get(f"{base}/", headers={"Host": REBIND})).status_code == 421
        assert (await post_answer(base, "inbox.example.com", q)).status_code == 303


def _signed_ping() -> tuple[str, dict[str, str]]:
    body = json.dumps({"type": "ping", "timestamp": "2026-01-01T00:00:00Z", "data": {}})
    return body, signed_headers([SECRET_KEY], f"msg_{secrets.token_hex(8)}", int(time.time()), body)


def test_the_webhook_receiver_refuses_a_rebinding_host_and_takes_its_own(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    args = ("--user", "alice", "--webhook-secret-env", "https://tools.example.com/mcp=HOOK_SECRET")
    with inbox_serving(database, *args, env={"HOOK_SECRET": SECRET}) as base:
        port = urlsplit(base).port
        body, headers = _signed_ping()
        refused = httpx.post(
            f"{base}/webhooks/askback", content=body, headers={**headers, "Host": f"{REBIND}:{port}"}, timeout=10
        )
        body, headers = _signed_ping()
        taken = httpx.post(f"{base}/webhooks/askback", content=body, headers=headers, timeout=10)
    assert (refused.status_code, taken.status_code) == (421, 204)
    assert refused.json()["error"] == "misdirected_request"


def test_chromium_sent_to_the_inbox_by_a_rebinding_name_gets_the_refusal(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with inbox_serving(database, "--user", "alice") as base, sync_playwright() as playwright:
        port = urlsplit(base).port
        rules = f"--host-resolver-rules=MAP {REBIND} 127.0.0.1, MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"
        browser = playwright.chromium.launch(
            executable_path=_chromium_executable(),
            headless=True,
            args=["--no-sandbox", "--disable-dev-shm-usage", rules],
        )
        try:
            page = browser.new_page()
            page.set_default_timeout(10_000)
            rebound = page.goto(f"http://{REBIND}:{port}/")
            assert rebound is not None and rebound.status == 421
            assert "does not answer this host name" in page.content()
            own = page.goto(f"{base}/")
            assert own is not None and own.status == 200
        finally:
            browser.close()
