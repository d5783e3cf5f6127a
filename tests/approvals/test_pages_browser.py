"""An approver in a real Chromium: signs in (the development sign-in), opens the list, opens a request, approves it
with a reason and reads the outcome. The pages are served by uvicorn on a loopback socket, over a real
`ApprovalService` on a SQLite file."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pages_site import ARGUMENTS, PAY, PREFIX, open_site

from infra import async_browser_context, async_chromium, serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


async def test_an_approver_signs_in_opens_a_request_approves_it_with_a_reason_and_sees_the_outcome(
    tmp_path: Path, listening: socket.socket
) -> None:
    base = f"http://127.0.0.1:{listening.getsockname()[1]}"
    async with open_site(tmp_path, base=base) as site, serving_asgi(site.app, listening, lifespan="off"):
        record = await site.request("alice", PAY, ARGUMENTS, summary="Pay 120 EUR to ACME")
        async with async_chromium() as browser:
            context = await async_browser_context(browser)
            page = await context.new_page()
            await page.goto(f"{base}{PREFIX}/")
            assert page.url.startswith(f"{base}{PREFIX}/dev/sign-in")
            await page.fill("#user", "bob")
            await page.click("button[type=submit]")
            await page.wait_for_url(f"{base}{PREFIX}/")
            await page.click(f"a[href='{PREFIX}/requests/{record.id}']")
            await page.wait_for_url(f"{base}{PREFIX}/requests/{record.id}")
            assert "hidden" in await page.inner_text("dl.arguments")
            assert "DE89370400440532013000" not in await page.content()
            await page.fill("#reason", "matches purchase order 7")
            await page.click("button[value=approve]")
            outcome = await page.inner_text("p.outcome")
            assert "1 more approval is needed" in outcome
            await context.close()
        now = await site.service.get(record.id)
        assert now is not None
        assert [(v.approver, v.decision, v.reason) for v in now.votes] == [
            ("bob", "approve", "matches purchase order 7")
        ]
