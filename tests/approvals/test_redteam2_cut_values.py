"""A requester pads a harmless beginning with spaces (which collapse in HTML) and puts what matters far after it:
the approvers' page shows every value whole, its spaces kept, so the approver approves only what they could see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from _pages_site import PAY, Site, open_site

pytestmark = [pytest.mark.anyio]

QUERY = "SELECT count(*) FROM invoices;" + " " * 600 + "DROP TABLE invoices;"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with open_site(tmp_path) as opened:
        yield opened


async def test_a_call_whose_arguments_the_page_cannot_show_whole_cannot_be_approved_unseen(site: Site) -> None:
    record = await site.request("alice", PAY, {"amount": 1, "iban": "DE00", "payee": QUERY})
    page = await site.get("bob", f"/requests/{record.id}")
    assert page.status_code == 200
    offered = 'value="approve"' in page.text
    # Either the whole value is on the page, or the page does not offer to approve what it does not show.
    assert "DROP TABLE invoices;" in page.text or not offered
