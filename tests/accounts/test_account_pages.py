"""The hosted account pages, driven in a real browser: who may open a link, what a used, expired or forged one gets,
the whole OAuth round trip against a real authorization server, the API-key form, and the headers every page
carries.

Real parts throughout: the pages served by uvicorn on a loopback socket, a SQLite file opened with every schema
history, a real vault, the connection discovered from oidc-provider (`infra.oidc_provider`), and Debian's Chromium
through Playwright. The clock is frozen, so a link expires when the test says so. One server, one provider and one
browser serve the whole module; each test makes its own links, so no test depends on another.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx
import pytest

from _accounts_site import (
    LINK_TTL,
    PREFIX,
    Site,
    consent_at_the_provider,
    form_token,
    main_text,
    new_person,
)
from askback.accounts.pages import MAX_FORM_BYTES, DevelopmentSignIn
from askback.accounts.status import Status

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Response

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@dataclass
class Visit:
    """A browser context (a person), optionally signed in, with every response of ours it received."""

    context: BrowserContext
    page: Page
    ours: list[Response]


async def person(browser: Browser, site: Site, user: str | None = None) -> Visit:
    context, page = await new_person(browser, site, user)
    ours: list[Response] = []
    page.on("response", lambda r: ours.append(r) if r.url.startswith(site.base) else None)
    return Visit(context, page, ours)


@pytest.fixture
async def visits(browser: Browser, site: Site) -> AsyncIterator[list[Visit]]:
    """The people a test makes (`open_as`), closed at its end."""
    made: list[Visit] = []
    yield made
    for visit in made:
        await visit.context.close()


OpenAs = Callable[[str | None], Awaitable[Visit]]


@pytest.fixture
def open_as(browser: Browser, site: Site, visits: list[Visit]) -> OpenAs:
    async def make(user: str | None) -> Visit:
        visit = await person(browser, site, user)
        visits.append(visit)
        return visit

    return make


async def heading(page: Page) -> str:
    return (await page.locator("h1").inner_text()).strip()


def assert_page_headers(headers: Mapping[str, str]) -> None:
    lower = {k.lower(): v for k, v in headers.items()}
    assert lower["cache-control"] == "no-store"
    assert lower["referrer-policy"] == "no-referrer"
    assert lower["x-frame-options"] == "DENY"
    directives = (part.strip().partition(" ") for part in lower["content-security-policy"].split(";"))
    csp = {name: value for name, _, value in directives if name}
    assert csp["default-src"] == "'none'"
    assert csp["form-action"] == "'self'"
    assert csp["frame-ancestors"] == "'none'"
    assert re.fullmatch(r"'sha256-[A-Za-z0-9+/]{43}='", csp["style-src"]), csp["style-src"]
    assert "script-src" not in csp  # default-src 'none' covers scripts: none may run


# --- who may use a link ---------------------------------------------------------------------------------------------


async def test_another_signed_in_user_is_refused_with_403_nothing_changes_and_the_rightful_user_can_still_use_it(
    site: Site, open_as: OpenAs
) -> None:
    link, account = await site.link("alice", "oidc")

    mallory = await open_as("mallory")
    refused = await mallory.page.goto(link)
    assert refused is not None and refused.status == 403
    assert await heading(mallory.page) == "Not connected"
    assert "This link was made for another person. Nothing was changed." in await main_text(mallory.page)
    assert await site.account(account) == (Status.PENDING, None)

    alice = await open_as("alice")
    await alice.page.goto(link)
    await alice.page.wait_for_url(lambda u: u.startswith(site.provider.issuer))
    assert await heading(alice.page) == "Sign-in"


async def test_a_used_link_is_refused(site: Site, open_as: OpenAs) -> None:
    link, account = await site.link("alice", "oidc")
    alice = await open_as("alice")
    await alice.page.goto(link)
    await alice.page.wait_for_url(lambda u: u.startswith(site.provider.issuer))

    again = await alice.page.goto(link)
    assert again is not None and again.status == 400
    assert "This link has already been used. Nothing was changed." in await main_text(alice.page)
    assert await site.account(account) == (Status.PENDING, None)


async def test_an_expired_link_is_refused(site: Site, open_as: OpenAs) -> None:
    link, account = await site.link("alice", "oidc")
    site.clock.advance(LINK_TTL)

    alice = await open_as("alice")
    refused = await alice.page.goto(link)
    assert refused is not None and refused.status == 400
    assert "This link has expired. Nothing was changed." in await main_text(alice.page)
    assert await site.account(account) == (Status.PENDING, None)


async def test_a_forged_state_on_the_callback_is_refused_and_the_vault_is_unchanged(
    site: Site, open_as: OpenAs
) -> None:
    link, account = await site.link("alice", "oidc")
    alice = await open_as("alice")
    await alice.page.goto(link)  # the link is used and a real state is waiting for the provider's answer
    await alice.page.wait_for_url(lambda u: u.startswith(site.provider.issuer))

    forged = await alice.page.goto(site.url("/callback", state=secrets.token_urlsafe(32), code="stolen-code"))
    assert forged is not None and forged.status == 400
    assert await heading(alice.page) == "Not connected"
    assert "This sign-in was not started here" in await main_text(alice.page)
    assert "stolen-code" not in await alice.page.content()
    assert await site.account(account) == (Status.PENDING, None)


async def test_nobody_signed_in_is_asked_to_sign_in_with_the_dev_sign_in_link_and_the_link_stays_usable(
    site: Site, open_as: OpenAs
) -> None:
    link, account = await site.link("alice", "oidc")
    someone = await open_as(None)
    refused = await someone.page.goto(link)
    assert refused is not None and refused.status == 400
    assert "Sign in first: this link can only be used by the person it was made for." in await main_text(someone.page)
    assert link.split("t=", 1)[1] not in await someone.page.content()  # the link's token is never written in a page

    await someone.page.get_by_role("link", name="Sign in (development sign-in)").click()
    await someone.page.get_by_label("User name").fill("alice")
    await someone.page.get_by_role("button", name="Sign in").click()

    # The refusal used nothing up: signed in now, the person is back on the link, which goes on to the provider.
    await someone.page.wait_for_url(lambda u: u.startswith(site.provider.issuer))
    assert await site.account(account) == (Status.PENDING, None)


# --- connecting -----------------------------------------------------------------------------------------------------


async def test_signing_in_opening_the_link_and_consenting_connects_the_account_with_a_real_token(
    site: Site, open_as: OpenAs
) -> None:
    link, account = await site.link("alice", "oidc")
    alice = await open_as(None)
    await alice.page.goto(site.url("/dev/sign-in"))
    await alice.page.get_by_label("User name").fill("alice")
    await alice.page.get_by_role("button", name="Sign in").click()
    assert "You are signed in as alice." in await main_text(alice.page)

    await alice.page.goto(link)
    await consent_at_the_provider(alice.page, site.provider.issuer)
    await alice.page.wait_for_url(lambda u: u.startswith(site.url("/callback")))

    assert await alice.page.title() == "Connected: return to your assistant"
    assert await heading(alice.page) == "Connected"
    assert "return to your assistant" in await main_text(alice.page)
    status, sealed = await site.account(account)
    assert status is Status.ACTIVE and sealed is not None
    tokens = site.vault.open(account.id, sealed)
    assert tokens["refresh_token"]
    async with httpx.AsyncClient(timeout=10) as client:
        introspected = await client.post(
            f"{site.provider.issuer}/token/introspection",
            data={"token": tokens["access_token"]},
            auth=(site.provider.client_id, site.provider.client_secret),
        )
    assert introspected.json()["active"] is True
    assert introspected.json()["client_id"] == site.provider.client_id
    html = await alice.page.content()
    code = dict(p.split("=", 1) for p in alice.page.url.split("?", 1)[1].split("&"))["code"]
    for secret in (code, tokens["access_token"], tokens["refresh_token"]):
        assert secret not in html


async def test_an_api_key_entered_in_the_form_connects_the_account_and_is_kept_only_sealed(
    site: Site, open_as: OpenAs
) -> None:
    link, account = await site.link("alice", "notes")
    alice = await open_as("alice")
    await alice.page.goto(link)
    assert await alice.page.title() == "Enter your Notes API key"
    field = alice.page.get_by_label("Notes API key")
    assert await field.get_attribute("type") == "password"
    assert await field.get_attribute("name") == "key"
    assert await field.get_attribute("autocomplete") == "off"

    key = "nk-live-" + secrets.token_hex(20)
    await field.fill(key)
    await alice.page.get_by_role("button", name="Connect").click()

    assert await heading(alice.page) == "Connected"
    status, sealed = await site.account(account)
    assert status is Status.ACTIVE and sealed is not None
    assert site.vault.open(account.id, sealed) == {"api_key": key}
    assert key not in await alice.page.content()
    for file in site.database.parent.glob(site.database.name + "*"):  # the database, and its journal or WAL
        assert key.encode() not in file.read_bytes(), file.name


async def test_cancelling_the_key_form_stores_nothing_and_says_so(site: Site, open_as: OpenAs) -> None:
    link, account = await site.link("alice", "notes")
    alice = await open_as("alice")
    await alice.page.goto(link)
    await alice.page.get_by_label("Notes API key").fill("typed-but-cancelled")
    await alice.page.get_by_role("link", name="Cancel: nothing is stored").click()

    assert await heading(alice.page) == "Cancelled"
    assert "Nothing was stored" in await main_text(alice.page)
    assert await site.account(account) == (Status.PENDING, None)


# --- every page -----------------------------------------------------------------------------------------------------


async def test_every_page_is_no_store_no_referrer_under_a_strict_csp_unframeable_and_without_script(
    site: Site, open_as: OpenAs
) -> None:
    alice = await open_as("alice")
    page = alice.page
    csp_violations: list[str] = []
    page.on("console", lambda m: csp_violations.append(m.text) if "Content Security Policy" in m.text else None)
    documents: list[str] = []

    async def read() -> None:
        assert page.url.startswith(site.base)
        documents.append(await page.content())

    oauth_link, _ = await site.link("alice", "oidc")
    await page.goto(oauth_link)  # 303 to the provider
    await page.wait_for_url(lambda u: u.startswith(site.provider.issuer))
    key_link, _ = await site.link("alice", "notes")
    await page.goto(key_link)  # the key form
    await read()
    await page.get_by_label("Notes API key").fill("nk-" + secrets.token_hex(8))
    await page.get_by_role("button", name="Connect").click()  # connected
    await read()
    for path in (key_link, site.url("/callback", state="forged", code="x"), site.url("/cancel")):
        await page.goto(path)  # used; forged; cancelled
        await read()
    await page.goto(site.url("/dev/sign-in", next=f"{PREFIX}/cancel"))
    await read()
    await page.get_by_label("User name").fill("alice")
    await page.get_by_role("button", name="Sign in").click()  # 303 back to the cancel page
    await page.wait_for_url(site.url("/cancel"))
    await page.goto(site.url("/nowhere"))
    await read()

    statuses = sorted({r.status for r in alice.ours})
    assert statuses == [200, 303, 400, 404], statuses
    for response in alice.ours:
        assert_page_headers(await response.all_headers())
    assert len(documents) == 7
    for html in documents:
        assert '<html lang="en">' in html and "<title>" in html and "<main>" in html and "<h1>" in html
        assert "<script" not in html.lower()
    assert csp_violations == []  # the inline style's hash matches: the policy blocks nothing of ours


async def test_a_form_larger_than_the_cap_is_refused_with_413_and_the_same_headers(
    site: Site, http: httpx.AsyncClient
) -> None:
    body = urlencode({"state": "s", "key": "k" * MAX_FORM_BYTES})
    refused = await http.post(
        f"{PREFIX}/key", content=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert refused.status_code == 413
    assert "Too much was sent" in refused.text
    assert_page_headers(refused.headers)

    async def streamed() -> AsyncIterator[bytes]:  # no Content-Length: counted as it arrives
        for _ in range(4):
            yield b"k" * (MAX_FORM_BYTES // 2)

    chunked = await http.post(
        f"{PREFIX}/key", content=streamed(), headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert chunked.status_code == 413
    assert_page_headers(chunked.headers)


async def test_a_wrong_method_gets_the_405_page_with_the_same_headers(site: Site, http: httpx.AsyncClient) -> None:
    refused = await http.get(f"{PREFIX}/key")
    assert refused.status_code == 405 and refused.headers["allow"] == "POST"
    assert_page_headers(refused.headers)


# --- the development sign-in ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "cookie",
    [
        pytest.param("alice", id="unsigned"),
        pytest.param("alice.", id="empty signature"),
        pytest.param(None, id="tampered: another name under a real signature"),
        pytest.param("signed-elsewhere", id="signed with another secret"),
    ],
)
async def test_an_unsigned_or_tampered_cookie_is_nobody(
    site: Site, http: httpx.AsyncClient, cookie: str | None
) -> None:
    if cookie is None:
        cookie = "alice." + site.verifier.cookie_value("mallory").rpartition(".")[2]
    elif cookie == "signed-elsewhere":
        cookie = DevelopmentSignIn(secrets.token_bytes(32)).cookie_value("alice")
    link, account = await site.link("alice", "oidc")

    refused = await http.get(link, headers={"Cookie": f"{DevelopmentSignIn.COOKIE}={cookie}"})
    assert refused.status_code == 400
    assert "Sign in first" in refused.text
    assert await site.account(account) == (Status.PENDING, None)


@pytest.mark.parametrize(
    ("next_path", "location"),
    [
        pytest.param(f"{PREFIX}/cancel?x=1", f"{PREFIX}/cancel?x=1", id="a path here"),
        pytest.param("//evil.example/x", None, id="a scheme-relative URL"),
        pytest.param("/\\evil.example/x", None, id="a backslash a browser reads as //"),
        pytest.param("https://evil.example/x", None, id="an absolute URL"),
        pytest.param("javascript:alert(1)", None, id="a script URL"),
        pytest.param("/\tevil", None, id="a control character"),
    ],
)
async def test_the_development_sign_in_redirects_only_to_a_path_on_this_site(
    site: Site, http: httpx.AsyncClient, next_path: str, location: str | None
) -> None:
    csrf = await form_token(http)
    signed_in = await http.post(f"{PREFIX}/dev/sign-in", data={"user": "alice", "next": next_path, "csrf": csrf})
    if location is None:
        assert signed_in.status_code == 200 and "location" not in signed_in.headers
        assert "You are signed in as alice." in signed_in.text
    else:
        assert signed_in.status_code == 303 and signed_in.headers["location"] == location
    assert site.verifier.user_of(signed_in.cookies[DevelopmentSignIn.COOKIE]) == "alice"
    assert "httponly" in signed_in.headers["set-cookie"].lower()
    assert_page_headers(signed_in.headers)


async def test_a_user_name_that_is_not_one_is_refused_and_signs_nobody_in(http: httpx.AsyncClient) -> None:
    csrf = await form_token(http)
    refused = await http.post(f"{PREFIX}/dev/sign-in", data={"user": "<b>al ice</b>", "csrf": csrf})
    assert refused.status_code == 400
    assert "set-cookie" not in refused.headers
    assert "<b>al ice</b>" not in refused.text
