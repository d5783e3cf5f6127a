"""The approvals' hosted pages (`askback.approvals.pages.pages_app`), in process over a real `ApprovalService` on a
real SQLite file, with the accounts' development sign-in: who sees which request, what a request page shows and
masks, approving and denying with a reason, and what the pages refuse (another site's form, a form without this
browser's token, a changed request, a decision after the quorum, an unknown host, odd characters, a large body).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from _pages_site import ARGUMENTS, BASE, PAY, PREFIX, Site, open_site
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount

from askback import Askback
from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.pages import CSRF_COOKIE, PAGE_HEADERS, pages_app
from askback.approvals.service import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.core.approving import Approval, ApprovalAsk, approval_digest
from askback.core.caller import Caller
from askback.extension import ExtensionContext
from askback.identity import PeopleSignIn
from askback.settings import load_settings

pytestmark = [pytest.mark.anyio]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    async with open_site(tmp_path) as opened:
        yield opened


def token_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([A-Za-z0-9_-]{43})"', page.text)
    assert found is not None, page.text
    return found.group(1)


def digest_of(page: httpx.Response) -> str:
    found = re.search(r'name="digest" value="([0-9a-f]{64})"', page.text)
    assert found is not None, page.text
    return found.group(1)


def main_text(page: httpx.Response) -> str:
    return " ".join(re.sub(r"<[^>]+>", " ", page.text.split("<main>", 1)[1]).split())


async def decide(site: Site, user: str, approval_id: str, decision: str, reason: str = "") -> httpx.Response:
    """`user` opens the request and sends the form as the page gave it."""
    page = await site.get(user, f"/requests/{approval_id}")
    assert page.status_code == 200, page.text
    form = {"csrf": token_of(page), "digest": digest_of(page), "decision": decision, "reason": reason}
    return await site.post(user, f"/requests/{approval_id}", form)


async def test_the_list_shows_only_the_requests_this_person_may_decide(site: Site) -> None:
    paying = await site.request("alice", PAY, ARGUMENTS)
    other = Approval(key="ship", title="Ship the order", principals=frozenset({"erin"}))
    shipping = await site.request("alice", other, {"order": 7})
    sees = {"bob": {paying.id}, "carol": {paying.id}, "erin": {shipping.id}, "alice": set(), "zed": set()}
    for user, ids in sees.items():
        page = await site.get(user, "/")
        assert page.status_code == 200
        assert set(re.findall(rf'href="{PREFIX}/requests/([^"]+)"', page.text)) == ids, user


async def test_a_request_page_shows_the_call_and_masks_its_hidden_arguments(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS, summary="Pay 120 EUR to ACME")
    page = await site.get("bob", f"/requests/{record.id}")
    text = main_text(page)
    assert page.status_code == 200
    assert "DE89370400440532013000" not in page.text
    assert re.search(r"iban hidden", text)
    assert "amount 120" in text and "Pay 120 EUR to ACME" in text and "pay_invoice" in text
    assert "&lt;b&gt;ACME&lt;/b&gt;" in page.text and "<b>ACME" not in page.text
    assert "Requested by alice" in text and "Approved so far by 0 of the 2 people needed" in text
    assert digest_of(page) != record.digest  # the form carries a keyed token, not the call's digest


async def test_two_approvals_with_reasons_complete_the_quorum_and_the_call_goes_on(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    first = await decide(site, "bob", record.id, "approve", "the invoice matches the order")
    assert first.status_code == 200 and "1 more approval is needed" in main_text(first)
    second = await decide(site, "carol", record.id, "approve", "checked")  # carol is in finance
    assert second.status_code == 200 and "the call goes on" in main_text(second)
    now = await site.service.get(record.id)
    assert now is not None and now.status == "approved"
    assert {(v.approver, v.decision, v.reason, v.method) for v in now.votes} == {
        ("bob", "approve", "the invoice matches the order", "development"),
        ("carol", "approve", "checked", "development"),
    }


async def test_a_denial_with_a_reason_decides_the_request(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    denied = await decide(site, "dave", record.id, "deny", "not this month")
    assert denied.status_code == 200 and "Denied" in main_text(denied)
    now = await site.service.get(record.id)
    assert now is not None and now.status == "denied"
    status = await site.get("alice", f"/requests/{record.id}/status")
    assert "dave denied" in main_text(status) and "not this month" in main_text(status)


async def test_the_requester_cannot_approve_their_own_request(site: Site) -> None:
    mine = Approval(key="pay", title="Pay an invoice", principals=frozenset({"alice", "bob"}))
    record = await site.request("alice", mine, ARGUMENTS)
    page = await site.get("alice", f"/requests/{record.id}")
    assert "You cannot approve your own request" in main_text(page)
    assert 'name="decision"' not in page.text
    form = await site.get("bob", f"/requests/{record.id}")  # a form's token and digest, sent by alice
    sent = await site.post(
        "alice", f"/requests/{record.id}", {"csrf": token_of(form), "digest": record.digest, "decision": "approve"}
    )
    assert sent.status_code == 409
    now = await site.service.get(record.id)
    assert now is not None and now.votes == () and now.status == "pending"


async def test_someone_outside_the_policy_gets_the_page_an_unknown_id_gets(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    theirs = await site.get("zed", f"/requests/{record.id}")
    unknown = await site.get("zed", "/requests/no-such-request")
    assert theirs.status_code == unknown.status_code == 404
    assert theirs.text == unknown.text
    posted = await site.post(
        "zed", f"/requests/{record.id}", {"csrf": site.token, "digest": record.digest, "decision": "approve"}
    )
    assert posted.status_code == 404


async def test_a_form_without_this_browsers_token_or_from_another_site_is_refused(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    form = {"csrf": token_of(page), "digest": record.digest, "decision": "approve"}
    without = await site.post("bob", f"/requests/{record.id}", {**form, "csrf": ""})
    other_token = await site.post("bob", f"/requests/{record.id}", {**form, "csrf": secrets.token_urlsafe(32)})
    elsewhere = await site.post("bob", f"/requests/{record.id}", form, headers={"Origin": "http://evil.example"})
    cross = await site.post("bob", f"/requests/{record.id}", form, headers={"Sec-Fetch-Site": "cross-site"})
    assert [r.status_code for r in (without, other_token, elsewhere, cross)] == [403, 403, 403, 403]
    now = await site.service.get(record.id)
    assert now is not None and now.votes == ()


async def test_a_form_from_any_host_the_pages_answer_is_taken_and_from_another_host_refused(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    form = {"csrf": token_of(page), "digest": digest_of(page), "decision": "approve"}
    public = "http://approvals.example.com:8000"  # PUBLIC's host, over the scheme and port this site is served on
    other = await site.post("bob", f"/requests/{record.id}", form, headers={"Origin": "http://other.example:8000"})
    taken = await site.post("bob", f"/requests/{record.id}", form, headers={"Origin": public})
    assert [other.status_code, taken.status_code] == [403, 200]
    now = await site.service.get(record.id)
    assert now is not None and [v.approver for v in now.votes] == ["bob"]


async def test_a_decision_on_a_changed_request_is_refused(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    changed = "0" * 64
    sent = await site.post(
        "bob", f"/requests/{record.id}", {"csrf": token_of(page), "digest": changed, "decision": "approve"}
    )
    assert sent.status_code == 409 and "This request changed" in main_text(sent)
    now = await site.service.get(record.id)
    assert now is not None and now.votes == ()


async def test_the_calls_own_digest_or_another_requests_token_is_a_form_the_page_did_not_show(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    other = await site.request("alice", PAY, {**ARGUMENTS, "amount": 121})
    page = await site.get("bob", f"/requests/{record.id}")
    elsewhere = digest_of(await site.get("bob", f"/requests/{other.id}"))
    sent = [
        await site.post(
            "bob", f"/requests/{record.id}", {"csrf": token_of(page), "digest": shown, "decision": "approve"}
        )
        for shown in (record.digest, elsewhere)
    ]
    assert [r.status_code for r in sent] == [409, 409]
    assert all("This request changed" in main_text(r) for r in sent)
    now = await site.service.get(record.id)
    assert now is not None and now.votes == ()


async def test_a_decision_sent_after_the_quorum_is_already_decided(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    late = await site.get("dave", f"/requests/{record.id}")  # opened while it was still open
    await decide(site, "bob", record.id, "approve")
    await decide(site, "carol", record.id, "approve")
    sent = await site.post(
        "dave", f"/requests/{record.id}", {"csrf": token_of(late), "digest": digest_of(late), "decision": "deny"}
    )
    assert sent.status_code == 409 and "Already decided" in main_text(sent)
    again = await site.post(
        "bob", f"/requests/{record.id}", {"csrf": token_of(late), "digest": record.digest, "decision": "approve"}
    )
    assert again.status_code == 409 and "Already decided" in main_text(again)
    now = await site.service.get(record.id)
    assert now is not None and now.status == "approved" and len(now.votes) == 2
    page = await site.get("dave", f"/requests/{record.id}")
    assert "no longer open" in main_text(page) and 'name="decision"' not in page.text


async def test_the_status_page_is_the_requesters_only(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    await decide(site, "bob", record.id, "approve", "fine by me")
    mine = await site.get("alice", f"/requests/{record.id}/status")
    text = main_text(mine)
    assert mine.status_code == 200 and "still waiting for approval" in text
    assert "bob approved" in text and "fine by me" in text and "anyone in the group finance" in text
    assert 'name="decision"' not in mine.text
    for user in ("bob", "zed"):
        assert (await site.get(user, f"/requests/{record.id}/status")).status_code == 404
    assert (await site.get("alice", "/requests/nothing/status")).status_code == 404


async def test_nobody_signed_in_is_sent_to_sign_in_and_back_to_the_page(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get(None, f"/requests/{record.id}")
    assert page.status_code == 303
    assert page.headers["location"] == f"{PREFIX}/dev/sign-in?next=%2Fapprovals%2Frequests%2F{record.id}"


async def test_every_response_carries_the_security_headers(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    responses = [
        await site.get("bob", "/"),
        await site.get("bob", f"/requests/{record.id}"),
        await site.get(None, "/"),
        await site.get("zed", f"/requests/{record.id}"),
        await site.get("bob", "/nowhere"),
        await site.http.delete(f"{PREFIX}/"),
        await site.post("bob", f"/requests/{record.id}", {"decision": "approve"}),
        await site.post("bob", f"/requests/{record.id}", {"pad": "x" * (1024 * 1024)}),
    ]
    assert [r.status_code for r in responses] == [200, 200, 303, 404, 404, 405, 403, 413]
    for response in responses:
        for name, value in PAGE_HEADERS.items():
            assert response.headers.get(name) == value, (response.status_code, name)


async def test_a_request_for_an_unknown_host_is_refused(site: Site) -> None:
    refused = await site.get("bob", "/", headers={"Host": "rebind.example"})
    assert refused.status_code == 421
    assert refused.headers["X-Frame-Options"] == "DENY" and refused.headers["Cache-Control"] == "no-store"
    served = await site.get("bob", "/", headers={"Host": "approvals.example.com"})
    assert served.status_code == 200


async def test_odd_characters_and_a_large_body_are_refused_and_nothing_is_decided(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    form = {"csrf": token_of(page), "digest": digest_of(page), "decision": "approve"}
    for reason in ("nul\x00here", "bidi \u202e txt", "two\nlines", "x" * 501):
        sent = await site.post("bob", f"/requests/{record.id}", {**form, "reason": reason})
        assert sent.status_code == 400, reason
        assert "Nothing was decided" in main_text(sent) or "at most" in main_text(sent)
    assert (await site.post("bob", f"/requests/{record.id}", {**form, "decision": "maybe"})).status_code == 400
    assert (await site.get("bob", "/requests/a%00b")).status_code == 404
    assert (await site.get("bob", "/requests/a%E2%80%AEb")).status_code == 404
    huge = await site.post("bob", f"/requests/{record.id}", {**form, "reason": "x" * (1024 * 1024)})
    assert huge.status_code == 413
    now = await site.service.get(record.id)
    assert now is not None and now.votes == ()


async def test_a_plain_sign_in_takes_the_approvers_groups_from_the_directory_of_groups_and_their_members(
    site: Site,
) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)

    async def header_sign_in(request: Request) -> str | None:
        return request.headers.get("x-user")

    app = pages_app(
        site.service, header_sign_in, base_url=BASE, prefix=PREFIX, directory={"finance": ["frank"]}, clock=site.clock
    )
    served = httpx.ASGITransport(app=Starlette(routes=[Mount(PREFIX, app=app)]))
    async with httpx.AsyncClient(transport=served, base_url=BASE) as http:
        frank = await http.get(f"{PREFIX}/requests/{record.id}", headers={"x-user": "frank"})
        gina = await http.get(f"{PREFIX}/requests/{record.id}", headers={"x-user": "gina"})
        nobody = await http.get(f"{PREFIX}/")
    assert frank.status_code == 200 and 'name="decision"' in frank.text
    assert gina.status_code == 404
    assert nobody.status_code == 401 and "Sign in" in nobody.text
    assert await site.service.decidable_by(Approver("frank", frozenset({"finance"}), "sign-in"))


async def test_an_expired_request_leaves_the_list_and_its_page_says_it_is_no_longer_open(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    page = await site.get("bob", f"/requests/{record.id}")
    site.clock.advance(PAY.ttl)
    assert f"/requests/{record.id}" not in (await site.get("bob", "/")).text
    now = await site.get("bob", f"/requests/{record.id}")
    assert "no longer open: it is expired" in main_text(now) and 'name="decision"' not in now.text
    sent = await site.post(
        "bob", f"/requests/{record.id}", {"csrf": token_of(page), "digest": digest_of(page), "decision": "approve"}
    )
    assert sent.status_code == 409 and "No longer open" in main_text(sent)
    status = await site.get("alice", f"/requests/{record.id}/status")
    assert "Your request is expired" in main_text(status)


async def test_outside_text_is_shown_escaped_bounded_and_with_odd_characters_made_visible(site: Site) -> None:
    arguments = {"note": "<script>alert(1)</script>", "long": "y" * 5000, "rtl": "abc\u202edef"}
    record = await site.request("alice", PAY, arguments, summary="Pay <i>120</i> EUR")
    page = await site.get("bob", f"/requests/{record.id}")
    assert "<script>" not in page.text and "&lt;script&gt;" in page.text
    assert "\u202e" not in page.text and "\\u202e" in page.text and "&lt;i&gt;120" in page.text
    # A value is shown whole (a call is at most 64 KiB): an approver approves what the page showed.
    assert "y" * 5000 in page.text


async def test_people_signed_in_with_openid_connect_decide_with_the_groups_their_session_keeps(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    issuer = "https://login.example.com"
    sign_in = PeopleSignIn(
        issuer=issuer,
        client_id="askback",
        client_secret=SecretStr("not used here"),
        base_url=BASE,
        session_secret=secrets.token_bytes(32),
        clock=site.clock,
    )
    await sign_in.start(ExtensionContext(site.store, load_settings(), site.clock))
    app = pages_app(site.service, sign_in, base_url=BASE, prefix=PREFIX, clock=site.clock)
    hana = await sign_in.session_cookie("hana", frozenset({"finance"}))
    ivan = await sign_in.session_cookie("ivan", frozenset({"sales"}))
    served = httpx.ASGITransport(app=Starlette(routes=[Mount(PREFIX, app=app)]))
    async with httpx.AsyncClient(transport=served, base_url=BASE) as http:
        nobody = await http.get(f"{PREFIX}/requests/{record.id}")
        http.cookies = httpx.Cookies({PeopleSignIn.COOKIE: ivan, CSRF_COOKIE: site.token})
        outside = await http.get(f"{PREFIX}/requests/{record.id}")
        http.cookies = httpx.Cookies({PeopleSignIn.COOKIE: hana, CSRF_COOKIE: site.token})
        page = await http.get(f"{PREFIX}/requests/{record.id}")
        form = {"csrf": token_of(page), "digest": digest_of(page), "decision": "approve", "reason": "ok"}
        sent = await http.post(f"{PREFIX}/requests/{record.id}", data=form)
    assert nobody.status_code == 303
    assert nobody.headers["location"] == f"/auth/sign-in?next=%2Fapprovals%2Frequests%2F{record.id}"
    assert outside.status_code == 404
    assert sent.status_code == 200 and "1 more approval is needed" in main_text(sent)
    now = await site.service.get(record.id)
    assert now is not None and [(v.approver, v.method) for v in now.votes] == [("hana", f"oidc {issuer}")]


async def test_the_directory_adds_its_groups_to_those_the_sign_in_gives(site: Site) -> None:
    record = await site.request("alice", PAY, ARGUMENTS)
    app = pages_app(
        site.service, site.sign_in, base_url=BASE, prefix=PREFIX, directory={"finance": ["erin"]}, clock=site.clock
    )
    served = httpx.ASGITransport(app=Starlette(routes=[Mount(PREFIX, app=app)]))
    async with httpx.AsyncClient(transport=served, base_url=BASE) as http:
        seen = {}
        for user in ("erin", "carol", "zed"):  # erin by the directory, carol by the sign-in's own groups
            http.cookies = httpx.Cookies(site.cookies(user))
            seen[user] = (await http.get(f"{PREFIX}/requests/{record.id}")).status_code
    assert seen == {"erin": 200, "carol": 200, "zed": 404}


async def test_the_pages_the_approvals_setup_mounts_serve_its_requests_with_its_directory(
    make_settings: Callable[..., Any],
) -> None:
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    setup = ApprovalsSetup(sign_in=sign_in, base_url=BASE, directory={"finance": ["erin"]})
    app = Askback("payments", settings=make_settings(), extensions=[setup])
    [mounted] = setup.mounts
    served = httpx.ASGITransport(app=Starlette(routes=[Mount(mounted.path, app=mounted.app)]))
    digest = approval_digest(
        tool="pay_invoice", arguments=ARGUMENTS, answers={}, requester="alice", policy=PAY.policy()
    )
    async with app.running(), httpx.AsyncClient(transport=served, base_url=BASE) as http:
        assert setup.ports.approvals is not None
        state = await setup.ports.approvals(Caller("alice")).request(
            ApprovalAsk(PAY, "pay_invoice", ARGUMENTS, {}, digest, "flow-1")
        )
        token = secrets.token_urlsafe(32)
        http.cookies = httpx.Cookies({DevelopmentSignIn.COOKIE: sign_in.cookie_value("erin"), CSRF_COOKIE: token})
        listed = await http.get(f"{PREFIX}/")
        shown = digest_of(await http.get(f"{PREFIX}/requests/{state.id}"))
        sent = await http.post(
            f"{PREFIX}/requests/{state.id}", data={"csrf": token, "digest": shown, "decision": "approve"}
        )
        http.cookies = httpx.Cookies({DevelopmentSignIn.COOKIE: sign_in.cookie_value("alice")})
        status = await http.get(urlsplit(state.status_url).path)
    assert f"/requests/{state.id}" in listed.text
    assert sent.status_code == 200 and "1 more approval is needed" in main_text(sent)
    assert status.status_code == 200 and "erin approved" in main_text(status)


def test_the_development_sign_in_refuses_groups_given_as_one_string() -> None:
    with pytest.raises(ValueError, match="collection of group names"):
        DevelopmentSignIn(secrets.token_bytes(32), groups={"carol": "finance"})


async def test_the_pages_the_setup_mounts_read_the_apps_clock_and_answer_its_allowed_hosts(
    make_settings: Callable[..., Any],
) -> None:
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    clock = FrozenClock(at=1_900_000_000.0)  # years ahead of the machine's own time
    setup = ApprovalsSetup(sign_in=sign_in, base_url=BASE)
    settings = make_settings(allowed_hosts="tools.internal")
    app = Askback("payments", settings=settings, clock=clock, extensions=[setup])
    [mounted] = setup.mounts
    served = httpx.ASGITransport(app=Starlette(routes=[Mount(mounted.path, app=mounted.app)]))
    digest = approval_digest(
        tool="pay_invoice", arguments=ARGUMENTS, answers={}, requester="alice", policy=PAY.policy()
    )
    async with app.running(), httpx.AsyncClient(transport=served, base_url="http://tools.internal") as http:
        assert setup.ports.approvals is not None
        state = await setup.ports.approvals(Caller("alice")).request(
            ApprovalAsk(PAY, "pay_invoice", ARGUMENTS, {}, digest, "flow-1")
        )
        http.cookies = httpx.Cookies({DevelopmentSignIn.COOKIE: sign_in.cookie_value("bob")})
        open_now = await http.get(f"{PREFIX}/requests/{state.id}")
        clock.advance(PAY.ttl + 1)
        later = await http.get(f"{PREFIX}/requests/{state.id}")
        elsewhere = await http.get(f"{PREFIX}/", headers={"Host": "attacker.example"})
    assert open_now.status_code == 200 and 'name="digest"' in open_now.text
    assert later.status_code == 200 and 'name="digest"' not in later.text and "expired" in main_text(later).lower()
    assert elsewhere.status_code == 421
