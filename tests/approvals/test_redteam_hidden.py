"""A hidden argument's value is masked on the approvers' page, and nothing a person, a client or a webhook receiver
sees lets them check a guess of it either. The call's digest is made from the whole call, hidden values included: with
the rest of the call in view, whoever holds it can try the likely values of a short hidden argument (an account number,
an amount) until one matches. So the form carries a keyed token of the request's id and digest instead, and the
events (hence the webhooks) and the audit rows carry no digest."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from _pages_site import ARGUMENTS, BASE, PAY, PREFIX, PUBLIC, Site, open_site
from starlette.applications import Starlette
from starlette.routing import Mount

from askback.approvals.pages import pages_app
from askback.audit import AuditFilter
from askback.core.approving import approval_digest

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with open_site(tmp_path) as opened:
        yield opened


async def test_the_approvers_page_gives_no_way_to_check_a_guess_of_a_hidden_argument(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    assert "DE89370400440532013000" not in page.text
    shown = re.search(r'name="digest" value="([0-9a-f]{64})"', page.text)
    assert shown is not None
    # Everything but the IBAN is on the page: the tool, the other arguments, the answers, the requester, the policy.
    guesses = ["DE00000000000000000000", "DE89370400440532013000", "GB29NWBK60161331926819"]
    matched = [
        iban
        for iban in guesses
        if approval_digest(
            tool="pay_invoice",
            arguments={**ARGUMENTS, "iban": iban},
            answers={"confirm": {"ok": True}},
            requester="alice",
            policy=PAY.policy(),
        )
        == shown.group(1)
    ]
    assert matched == []


async def test_approval_events_and_audit_rows_carry_no_digest_of_the_call(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    call = approval_digest(
        tool="pay_invoice",
        arguments=ARGUMENTS,
        answers={"confirm": {"ok": True}},
        requester="alice",
        policy=PAY.policy(),
    )
    assert record.digest != call  # stored keyed
    page = await site.get("bob", f"/requests/{record.id}")
    form = {"csrf": site.token, "digest": _token(page.text), "decision": "deny", "reason": "no"}
    assert (await site.post("bob", f"/requests/{record.id}", form)).status_code == 200
    events = await site.store.events.events_after(0)
    rows = [row for row in await site.store.audit_log.query(AuditFilter()) if row.event.startswith("approval.")]
    assert [e.type for e in events] == ["approval.requested", "approval.decided"] and len(rows) == 2
    # The audit rows name the exact call by its stored (keyed) digest; the events, which leave the server, carry none.
    assert [r.content["digest"] for r in rows] == [record.digest] * 2
    seen = json.dumps([e.data for e in events]) + json.dumps([r.content for r in rows])
    assert call not in seen and "digest" not in json.dumps([e.data for e in events])


async def test_a_form_shown_before_the_state_keys_rotated_is_still_taken(tmp_path: Path) -> None:
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    async with open_site(tmp_path, keys=[old]) as site:
        record = await site.request("alice", PAY, ARGUMENTS)
        shown = _token((await site.get("bob", f"/requests/{record.id}")).text)
        rotated = pages_app(site.service, site.sign_in, base_url=BASE, prefix=PREFIX, hosts=[PUBLIC], keys=[new, old])
        elsewhere = pages_app(site.service, site.sign_in, base_url=BASE, prefix=PREFIX, hosts=[PUBLIC], keys=[new])
        form = {"csrf": site.token, "digest": shown, "decision": "approve"}
        sent = {}
        for name, app in (("elsewhere", elsewhere), ("rotated", rotated)):
            served = httpx.ASGITransport(app=Starlette(routes=[Mount(PREFIX, app=app)]))
            async with httpx.AsyncClient(transport=served, base_url=BASE, cookies=site.cookies("bob")) as http:
                sent[name] = (await http.post(f"{PREFIX}/requests/{record.id}", data=form)).status_code
        assert sent == {"elsewhere": 409, "rotated": 200}


def _token(text: str) -> str:
    found = re.search(r'name="digest" value="([0-9a-f]{64})"', text)
    assert found is not None
    return found.group(1)
