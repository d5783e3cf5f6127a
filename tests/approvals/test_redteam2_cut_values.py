"""An argument's value longer than the page shows (500 characters) is cut with '…', and nothing else shows the rest
(the terminal commands never print argument values): the approver is asked to approve a call whose end they cannot
see. A requester pads a harmless beginning with spaces (which also collapse in HTML) and puts what matters after
the cut."""

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


@pytest.mark.xfail(
    strict=True, reason="an argument value past 500 characters is cut on the approvers' page, yet can be approved"
)
async def test_a_call_whose_arguments_the_page_cannot_show_whole_cannot_be_approved_unseen(site: Site) -> None:
    record = await site.request("alice", PAY, {"amount": 1, "iban": "DE00", "payee": QUERY})
    page = await site.get("bob", f"/requests/{record.id}")
    assert page.status_code == 200
    offered = 'value="approve"' in page.text
    # Either the whole value is on the page, or the page does not offer to approve what it does not show.
    assert "DROP TABLE invoices;" in page.text or not offered
