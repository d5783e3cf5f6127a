"""The META loop with the official Python SDK client, its link completed by a person in a real Chromium.

The server is the META exposure of `test_meta`'s catalogue (the same `serve`), with connected accounts at Demo Mail
(the development OAuth provider, on loopback in this process). The client declares no elicitation at all:
`execute_tool` answers `not_connected`, `connect_account` gives the link, the person opens it in Chromium, signs in
at the server's pages (the development sign-in) and allows Demo Mail, `check_readiness` says `ready`, and
`execute_tool` answers the tool's own result.
"""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.test_meta import CONNECTION, base_of, meta, serve

from askback.demo.mail import callback_url
from askback.demo.provider import serving_provider
from askback.testing import text
from infra import async_browser_context, async_chromium

pytestmark = [pytest.mark.anyio, pytest.mark.http]

USER = "hana"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Playwright's async API runs on asyncio


@pytest.fixture
def sock() -> Iterator[socket.socket]:
    listening = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    with listening:
        yield listening


async def connect_in_chromium(link: str, base: str) -> None:
    """What the person does with the link the agent shows: sign in at the server's pages, allow Demo Mail."""
    async with async_chromium() as browser:
        page = await (await async_browser_context(browser)).new_page()
        await page.goto(link)
        await page.get_by_role("link", name="Sign in (development sign-in)").click()
        await page.get_by_label("User name").fill(USER)
        await page.get_by_role("button", name="Sign in").click()
        # Signed in, back on the link by itself, and on to the provider.
        await page.get_by_role("heading", name="Sign in to Demo Mail").wait_for()
        await page.get_by_label("User name").fill(USER)
        await page.get_by_role("button", name="Allow").click()
        await page.wait_for_url(f"{base}/accounts/callback?*")
        assert await page.locator("h1").inner_text() == "Connected"


async def test_a_client_without_elicitation_completes_the_meta_loop_once_the_person_connects_in_chromium(
    sock: socket.socket, tmp_path: Path
) -> None:
    secret = secrets.token_urlsafe(32)
    with serving_provider(client_secret=secret, redirect_uris=[callback_url(base_of(sock))]) as provider:
        async with serve("meta", sock, provider, secret, tmp_path) as served:
            ran = await meta(served, "execute_tool", {"name": "summarize_inbox"}, USER)
            assert ran.structured_content == {"status": "not_connected", "connection": CONNECTION}

            link = (await meta(served, "connect_account", {"connection": CONNECTION}, USER)).structured_content
            assert link is not None and link["host"] == "127.0.0.1"
            await connect_in_chromium(link["url"], base_of(sock))

            ready = await meta(served, "check_readiness", {"name": "summarize_inbox"}, USER)
            assert ready.structured_content == {
                "ready": True,
                "connections": [{"connection": CONNECTION, "readiness": "ready"}],
            }
            done = await meta(served, "execute_tool", {"name": "summarize_inbox"}, USER)
    assert done.structured_content is not None
    summary = done.structured_content["result"]
    assert summary.startswith(f"3 messages for {USER}, 2 unread;") and text(done) == summary
