"""People signed in through a real OpenID Connect provider carry the groups of their ID token into the approvals'
pages: oidc-provider (interop/oidc/provider.mjs, its `accounts` giving erin the group `sre` and others odd groups
claims), askback's `PeopleSignIn` at `/auth`, the approvals' pages at `/approvals` over a real `ApprovalService` on
SQLite, and each person in their own Chromium context going through the provider's login and consent pages.

A groups claim that is not a list gives no group; past `MAX_GROUPS` names, and names longer than `MAX_GROUP_NAME`,
are dropped (`askback.identity._groups`, docs/auth.md); the unit of that reading is tested with a small issuer of the
test's own in tests/identity/test_signin_groups.py, here it is the real provider's ID token that carries them. An ID
token longer than `MAX_TOKEN_LENGTH` (10,000 groups) signs nobody in; another issuer's sign-in gives no group."""

from __future__ import annotations

import json
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount

from _accounts_site import consent_at_the_provider
from askback.approvals.pages import pages_app
from askback.approvals.service import ApprovalRecord, ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval, ApprovalAsk, approval_digest
from askback.db.migrate import all_components
from askback.extension import ExtensionContext
from askback.identity import PeopleSignIn
from askback.identity._groups import MAX_GROUP_NAME, MAX_GROUPS
from askback.identity._jwt import MAX_TOKEN_LENGTH
from askback.settings import load_settings
from askback.store import Store
from infra import OidcProvider, async_browser_context, async_chromium, oidc_provider, serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

AUTH = "/auth"
PREFIX = "/approvals"
RESTART = Approval(
    key="restart", title="Restart the database", principals=frozenset(), groups=frozenset({"sre"}), required=1
)
# 100 groups, `sre` the last of them: past the first MAX_GROUPS, every name is dropped.
HUNDRED = [f"team-{n}" for n in range(99)] + ["sre"]
# 10,000 groups: an ID token longer than askback takes at all (MAX_TOKEN_LENGTH); short names, since the provider's
# configuration is one argument of its command line.
TEN_THOUSAND = [f"g{n}" for n in range(9_999)] + ["sre"]
LONG = "x" * 8_192  # an 8 KB name: dropped, the names beside it kept (the token stays under MAX_TOKEN_LENGTH)
ACCOUNTS = {
    "erin": {"groups": ["sre"]},
    "bob": {},
    "mallory": {"groups": "sre"},  # a string, not a list: no group at all
    "gus": {"groups": HUNDRED},
    "oscar": {"groups": TEN_THOUSAND},
    "lena": {"groups": [LONG, "sre"]},
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


@pytest.fixture
def provider(listener: socket.socket) -> Iterator[OidcProvider]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    with oidc_provider(redirect_uris=[f"{base}{AUTH}/callback"], accounts=ACCOUNTS) as started:
        yield started


@dataclass
class Site:
    base: str
    service: ApprovalService

    async def request(self, requester: str) -> ApprovalRecord:
        arguments = {"database": "orders"}
        digest = approval_digest(
            tool="restart_database", arguments=arguments, answers={}, requester=requester, policy=RESTART.policy()
        )
        ask = ApprovalAsk(RESTART, "restart_database", arguments, {}, digest, f"flow-{secrets.token_hex(4)}", None)
        return await self.service.request(requester, (), ask)


@pytest.fixture
async def site(listener: socket.socket, provider: OidcProvider, tmp_path: Path) -> AsyncIterator[Site]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    clock = FrozenClock(at=time.time())
    store = await Store.open(url, migrate=True, components=all_components())
    sign_in = PeopleSignIn(
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=SecretStr(provider.client_secret),
        base_url=base,
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
    try:
        await sign_in.start(ExtensionContext(store, load_settings(database_url=url), clock))
        service = ApprovalService(
            store.database,
            clock=clock,
            audit_log=store.audit_log,
            status_url=lambda approval_id: f"{base}{PREFIX}/requests/{approval_id}/status",
            pending_per_requester=20,
        )
        app = Starlette(
            routes=[
                Mount(AUTH, app=sign_in.app),
                Mount(PREFIX, app=pages_app(service, sign_in, base_url=base, prefix=PREFIX, clock=clock)),
            ]
        )
        async with serving_asgi(app, listener, lifespan="off"):
            yield Site(base, service)
    finally:
        await sign_in.close()
        await store.close()


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    async with async_chromium() as started:
        yield started


async def open_as(browser: Browser, site: Site, issuer: str, user: str, path: str) -> tuple[int, str]:
    """`user`, in a fresh browser, opens `path` of the approvals' pages: sent through the provider's sign-in and
    back; the status and text of the page they land on."""
    context = await async_browser_context(browser)
    try:
        page = await context.new_page()
        await page.goto(f"{site.base}{PREFIX}{path}")
        await consent_at_the_provider(page, issuer, user=user)
        await page.wait_for_url(f"{site.base}{PREFIX}{path}")
        response = await page.reload()
        assert response is not None
        return response.status, await page.content()
    finally:
        await context.close()


async def approve_as(browser: Browser, site: Site, issuer: str, user: str, record: ApprovalRecord) -> str:
    """`user` signs in through the provider, opens the request and approves it; the outcome's text."""
    context = await async_browser_context(browser)
    try:
        page = await context.new_page()
        await page.goto(f"{site.base}{PREFIX}/requests/{record.id}")
        await consent_at_the_provider(page, issuer, user=user)
        await page.wait_for_url(f"{site.base}{PREFIX}/requests/{record.id}")
        await page.fill("#reason", "planned maintenance")
        await page.click("button[value=approve]")
        return await page.inner_text("p.outcome")
    finally:
        await context.close()


async def test_bob_with_no_group_cannot_decide_and_erin_in_sre_from_her_id_token_approves(
    site: Site, provider: OidcProvider, browser: Browser
) -> None:
    record = await site.request("bob")
    status, content = await open_as(browser, site, provider.issuer, "bob", f"/requests/{record.id}")
    assert status == 200  # his own request: he sees it, and why he cannot decide it
    assert "You cannot approve your own request" in content
    assert 'value="approve"' not in content
    _, listing = await open_as(browser, site, provider.issuer, "bob", "/")
    assert f"/requests/{record.id}" not in listing

    _, listing = await open_as(browser, site, provider.issuer, "erin", "/")
    assert f"{PREFIX}/requests/{record.id}" in listing
    await approve_as(browser, site, provider.issuer, "erin", record)
    now = await site.service.get(record.id)
    assert now is not None
    assert [(v.approver, v.decision, v.reason) for v in now.votes] == [("erin", "approve", "planned maintenance")]


@pytest.mark.parametrize(
    ("user", "why"),
    [
        ("mallory", "a groups claim that is a string, not a list, gives no group"),
        ("gus", f"past the first {MAX_GROUPS} of 100 groups, sre is dropped"),
    ],
)
async def test_a_groups_claim_askback_does_not_take_gives_no_right_to_decide(
    site: Site, provider: OidcProvider, browser: Browser, user: str, why: str
) -> None:
    record = await site.request("bob")
    status, content = await open_as(browser, site, provider.issuer, user, f"/requests/{record.id}")
    assert status == 404, why
    assert 'value="approve"' not in content, why
    _, listing = await open_as(browser, site, provider.issuer, user, "/")
    assert f"/requests/{record.id}" not in listing, why


async def test_a_ten_kilobyte_group_name_is_dropped_and_the_names_beside_it_are_kept(
    site: Site, provider: OidcProvider, browser: Browser
) -> None:
    assert len(LONG) > MAX_GROUP_NAME
    record = await site.request("bob")
    await approve_as(browser, site, provider.issuer, "lena", record)
    now = await site.service.get(record.id)
    assert now is not None
    assert [v.approver for v in now.votes] == ["lena"]


async def test_an_id_token_past_the_length_askback_takes_signs_nobody_in_and_the_request_stays_out_of_reach(
    site: Site, provider: OidcProvider, browser: Browser
) -> None:
    assert len(json.dumps(TEN_THOUSAND)) > MAX_TOKEN_LENGTH
    record = await site.request("bob")
    context = await async_browser_context(browser)
    try:
        page = await context.new_page()
        await page.goto(f"{site.base}{PREFIX}/requests/{record.id}")
        await consent_at_the_provider(page, provider.issuer, user="oscar")
        await page.wait_for_url(lambda url: url.startswith(f"{site.base}{AUTH}/callback"))
        assert "Nobody was signed in" in await page.inner_text("body")
        assert PeopleSignIn.COOKIE not in [cookie["name"] for cookie in await context.cookies(site.base)]
    finally:
        await context.close()
    now = await site.service.get(record.id)
    assert now is not None
    assert now.votes == ()


async def test_groups_come_only_from_the_configured_issuers_id_token(
    site: Site, provider: OidcProvider, listener: socket.socket, browser: Browser
) -> None:
    """Another issuer that puts bob in `sre`, its code carried to askback's callback with the state askback gave
    (a mix-up): the callback's `iss` (RFC 9207) names the other issuer, so nobody is signed in (and a code is only
    ever redeemed at askback's own issuer, whose ID token alone is read); bob's groups stay none."""
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    record = await site.request("alice")
    with oidc_provider(redirect_uris=[f"{base}{AUTH}/callback"], accounts={"bob": {"groups": ["sre"]}}) as other:
        context = await async_browser_context(browser)
        try:
            page = await context.new_page()

            # The sign-in askback starts (its state cookie kept by this browser), its authorization request sent to
            # `other` instead of askback's issuer.
            started = await context.request.get(
                f"{site.base}{AUTH}/sign-in?next={PREFIX}/requests/{record.id}", max_redirects=0
            )
            assert started.status in (302, 303)
            location = started.headers["location"]
            assert location.startswith(f"{provider.issuer}/")
            await page.goto(other.issuer + location.removeprefix(provider.issuer))
            await consent_at_the_provider(page, other.issuer, user="bob")
            await page.wait_for_url(lambda url: url.startswith(f"{site.base}{AUTH}/callback"))
            assert "came back from another provider" in await page.inner_text("body")
            assert PeopleSignIn.COOKIE not in [cookie["name"] for cookie in await context.cookies(site.base)]
        finally:
            await context.close()
    status, content = await open_as(browser, site, provider.issuer, "bob", f"/requests/{record.id}")
    assert status == 404
    assert 'value="approve"' not in content
