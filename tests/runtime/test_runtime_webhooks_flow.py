"""The runtime resumes when the grant lands, across processes, in a real Chromium: the agent's call to the demo
server's `summarize_inbox` parks on its `connect.demo-mail` question; the person opens the link, signs in and allows
Demo Mail in the browser; the server's `account.connected` (a Standard Webhook, signed here with the `standardwebhooks`
package as the server's sender signs it) reaches `askback inbox serve --webhook-secret-env VAR`, its own process; and
the call completes with the inbox summary, with nobody answering the question.

The demo server is reached without a token, as its user `anonymous` (demo authentication): `askback inbox serve`
resumes rounds without authorization headers, so the call is made as the user a tokenless resume is."""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from standardwebhooks import Webhook
from tests.runtime.test_runtime_webhooks import new_secret, receiving

from askback.demo.run import demo_servers
from askback.runtime import Completed, Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port
from infra import async_browser_context, async_chromium

pytestmark = [pytest.mark.anyio, pytest.mark.http]

WHO = "anonymous"  # the demo server's name for a caller without a token


async def connect_in_the_browser(link: str, port: int) -> None:
    """What the person does: open the link, sign in at the server's pages, allow Demo Mail to share their mailbox."""
    async with async_chromium() as browser:
        page = await (await async_browser_context(browser)).new_page()
        await page.goto(link)
        await page.get_by_role("link", name="Sign in (development sign-in)").click()
        await page.get_by_label("User name").fill(WHO)
        await page.get_by_role("button", name="Sign in").click()
        # Signed in, back on the link by itself, and on to the provider.
        await page.get_by_role("heading", name="Sign in to Demo Mail").wait_for()
        await page.get_by_label("User name").fill("dana")
        await page.get_by_role("button", name="Allow").click()
        await page.wait_for_url(f"http://127.0.0.1:{port}/accounts/callback?*")
        assert await page.locator("h1").inner_text() == "Connected"


async def test_a_call_parked_on_connecting_an_account_completes_when_the_account_connected_webhook_arrives(
    tmp_path: Path,
) -> None:
    secret = new_secret()
    agent_db = f"sqlite:///{tmp_path / 'agent.db'}"
    port = free_port()
    with demo_servers(workers=2, port=port, database=f"sqlite:///{tmp_path / 'demo.db'}") as url:
        async with await Runtime.open(
            agent_db, renderers=[WebInbox()], settings=load_settings(development=True)
        ) as runtime:
            parked = await runtime.call_tool(url, "summarize_inbox", {}, principal=WHO)
            assert isinstance(parked, Parked), parked
            [question] = parked.questions
            assert question.key == "connect.demo-mail" and question.url is not None

            with receiving(agent_db, secret, url) as receiver:
                await connect_in_the_browser(question.url, port)
                assert (await runtime.calls.get(parked.call_id)).status == "parked"  # nobody has answered it

                body = json.dumps({
                    "type": "account.connected",
                    "timestamp": datetime.now(tz=UTC).isoformat(),
                    "data": {"principal": WHO, "connection": "demo-mail", "new_status": "ACTIVE"},
                })  # fmt: skip
                webhook_id = f"msg_{secrets.token_hex(8)}"
                sent_at = datetime.now(tz=UTC).replace(microsecond=0)
                headers = {
                    "webhook-id": webhook_id,
                    "webhook-timestamp": str(int(sent_at.timestamp())),
                    "webhook-signature": Webhook(secret).sign(webhook_id, sent_at, body),
                }
                async with httpx.AsyncClient(timeout=60) as client:
                    delivered = await client.post(receiver, headers=headers, content=body)

            assert delivered.status_code == 200, delivered.text
            assert delivered.json()["calls"] == [{"call_id": parked.call_id, "status": "completed"}]
            record = await runtime.calls.get(parked.call_id)
            assert record.status == "completed"
            assert Completed(record.id, record.result or {}, record.round).text.startswith("3 messages for dana")
            # Nobody answered the question, the webhook neither: the round went back to look, the link unanswered.
            assert await runtime.calls.answers(parked.call_id, 1) == {}
