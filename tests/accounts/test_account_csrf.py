"""Login CSRF and the browser an authorization belongs to, on the hosted account pages.

A page on another site must not be able to sign a person's browser in as someone else (the development sign-in) or
post the key form for them: every POST checks what the browser says about where it comes from (`Origin`,
`Sec-Fetch-Site`) and a per-browser form token. And an authorization started in one browser can be finished only in
that browser: a callback URL brought by another browser is refused, whoever is signed in there, and the account stays
PENDING for the browser that started it.

Real parts: the pages on a loopback socket (uvicorn), oidc-provider as the provider, Debian's Chromium through
Playwright for the person and for the other site's page (served from `localhost`, another site than `127.0.0.1`),
httpx for requests no browser would send.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from html import escape
from http.server import ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from _accounts_site import (
    PREFIX,
    Site,
    consent_and_hold_the_callback,
    form_field,
    form_token,
    main_text,
    new_person,
)
from askback.accounts.pages import BROWSER_COOKIE, CSRF_COOKIE, DevelopmentSignIn, pages_app
from askback.accounts.service import AccountService
from askback.accounts.status import Status
from infra import QuietHandler, serving_http

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

pytestmark = [pytest.mark.anyio, pytest.mark.http]


class OtherSite:
    """Another site (`http://localhost:<port>`): `/form?action=URL&k=v...` is a page with one form that posts the
    hidden fields k=v... to URL, as a page anywhere on the web can."""

    def __init__(self) -> None:
        class Handler(QuietHandler):
            def do_GET(self) -> None:
                fields = parse_qsl(urlsplit(self.path).query)
                action = dict(fields).pop("action")
                hidden = "".join(
                    f'<input type="hidden" name="{escape(k)}" value="{escape(v)}">' for k, v in fields if k != "action"
                )
                body = (
                    f'<!doctype html><title>A page elsewhere</title><form method="post" action="{escape(action)}">'
                    f'{hidden}<button type="submit">Win a prize</button></form>'
                ).encode()
                self.answer(200, body, "text/html; charset=utf-8")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://localhost:{self.server.server_address[1]}"

    def page(self, action: str, **fields: str) -> str:
        return f"{self.origin}/form?" + httpx.QueryParams({"action": action, **fields}).__str__()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[OtherSite]:
    other = OtherSite()
    with serving_http(other.server):
        yield other


# --- login CSRF through the development sign-in ---------------------------------------------------------------------


async def test_a_cross_site_form_post_to_the_dev_sign_in_is_refused_and_signs_nobody_in(
    site: Site, browser: Browser, contexts: list[BrowserContext], elsewhere: OtherSite, http: httpx.AsyncClient
) -> None:
    """The attack of the issue: another site posts `user=mallory&next=/accounts/start?t=<mallory's link>` from the
    victim's browser, which would sign her in as mallory and send her to the provider to consent for mallory."""
    link, account = await site.link("mallory", "oidc")
    context, page = await new_person(browser, site)
    contexts.append(context)
    await page.goto(elsewhere.page(site.url("/dev/sign-in"), user="mallory", next=link.removeprefix(site.base)))

    async with page.expect_response(lambda r: r.url == site.url("/dev/sign-in")) as posted:
        await page.get_by_role("button", name="Win a prize").click()
    response = await posted.value
    sent = await response.request.all_headers()
    assert sent["origin"] == elsewhere.origin and sent["sec-fetch-site"] == "cross-site"  # what Chromium says

    assert response.status == 403
    assert "This form was sent from another site" in await main_text(page)
    assert "nobody was signed in" in await main_text(page)
    assert page.url == site.url("/dev/sign-in")  # not sent on to the start page, nor to the provider
    assert DevelopmentSignIn.COOKIE not in {c["name"] for c in await context.cookies()}
    assert await site.account(account) == (Status.PENDING, None)
    # Mallory's link was not used up by the attempt.
    opened = await http.get(link, headers={"Cookie": site.dev_cookie("mallory")})
    assert opened.status_code == 303 and opened.headers["location"].startswith(site.provider.issuer)


@pytest.mark.parametrize(
    "case",
    [
        "no token at all",
        "a token that is not the cookie's",
        "another browser's token and cookie pair split",
        "a cross-site Origin with a good token",
        "an Origin of another port with a good token",
        "Sec-Fetch-Site cross-site with a good token",
        "Sec-Fetch-Site same-site with a good token",
    ],
)
async def test_a_sign_in_post_without_this_browsers_token_or_from_elsewhere_is_refused(
    site: Site, http: httpx.AsyncClient, case: str
) -> None:
    form = {"user": "mallory", "next": f"{PREFIX}/cancel"}
    headers: dict[str, str] = {}
    if case != "no token at all":
        form["csrf"] = await form_token(http)
    if case == "a token that is not the cookie's":
        form["csrf"] = secrets.token_urlsafe(32)
    elif case == "another browser's token and cookie pair split":
        async with httpx.AsyncClient(base_url=site.base, timeout=10) as other:
            form["csrf"] = await form_token(other)
    elif case == "a cross-site Origin with a good token":
        headers["Origin"] = "https://evil.example"
    elif case == "an Origin of another port with a good token":
        headers["Origin"] = f"http://127.0.0.1:{urlsplit(site.base).port + 1}"  # type: ignore[operator]
    elif case == "Sec-Fetch-Site cross-site with a good token":
        headers["Sec-Fetch-Site"] = "cross-site"
    elif case == "Sec-Fetch-Site same-site with a good token":
        headers["Sec-Fetch-Site"] = "same-site"

    refused = await http.post(f"{PREFIX}/dev/sign-in", data=form, headers=headers)

    assert refused.status_code == 403
    assert "Nothing was changed and nobody was signed in" in " ".join(refused.text.split())
    assert DevelopmentSignIn.COOKIE not in refused.cookies
    assert "location" not in refused.headers


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param({}, id="no Origin, no Sec-Fetch-Site (not a browser)"),
        pytest.param({"Origin": "here", "Sec-Fetch-Site": "same-origin"}, id="this origin"),
        pytest.param({"Origin": "null", "Sec-Fetch-Site": "same-origin"}, id="Origin null under no-referrer"),
        pytest.param({"Sec-Fetch-Site": "none"}, id="typed by the person"),
    ],
)
async def test_a_same_origin_sign_in_post_with_the_token_signs_in(
    site: Site, http: httpx.AsyncClient, headers: dict[str, str]
) -> None:
    csrf = await form_token(http)
    sent = {k: site.base if v == "here" else v for k, v in headers.items()}
    signed_in = await http.post(f"{PREFIX}/dev/sign-in", data={"user": "alice", "csrf": csrf}, headers=sent)
    assert signed_in.status_code == 200, signed_in.text
    assert site.verifier.user_of(signed_in.cookies[DevelopmentSignIn.COOKIE]) == "alice"


# --- the key form ---------------------------------------------------------------------------------------------------


async def test_a_key_form_posted_from_elsewhere_or_without_the_token_stores_nothing_and_the_form_still_works(
    site: Site, http: httpx.AsyncClient
) -> None:
    link, account = await site.link("alice", "notes")
    http.cookies.set(DevelopmentSignIn.COOKIE, site.verifier.cookie_value("alice"))
    shown = await http.get(link)
    assert shown.status_code == 200
    state, csrf = form_field(shown.text, "state"), form_field(shown.text, "csrf")
    key = "nk-" + secrets.token_hex(12)

    from_elsewhere = await http.post(
        f"{PREFIX}/key", data={"state": state, "key": key, "csrf": csrf}, headers={"Origin": "https://evil.example"}
    )
    assert from_elsewhere.status_code == 403 and "sent from another site" in from_elsewhere.text
    no_token = await http.post(f"{PREFIX}/key", data={"state": state, "key": key})
    assert no_token.status_code == 403 and "could not be checked" in no_token.text
    assert await site.account(account) == (Status.PENDING, None)

    sent = await http.post(
        f"{PREFIX}/key", data={"state": state, "key": key, "csrf": csrf}, headers={"Origin": site.base}
    )
    assert sent.status_code == 200 and "Connected" in sent.text
    status, sealed = await site.account(account)
    assert status is Status.ACTIVE and sealed is not None and site.vault.open(account.id, sealed) == {"api_key": key}


# --- the authorization belongs to the browser that started it -------------------------------------------------------


async def test_a_callback_brought_by_another_browser_is_refused_and_the_one_that_started_it_connects(
    site: Site, browser: Browser, contexts: list[BrowserContext], http: httpx.AsyncClient
) -> None:
    link, account = await site.link("alice", "oidc")
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    callback = await consent_and_hold_the_callback(page, site, link)

    # Another browser, signed in as alice all the same: refused, and nothing is taken from the one that started it.
    other_context, other = await new_person(browser, site, "alice")
    contexts.append(other_context)
    replayed = await other.goto(callback)
    assert replayed is not None and replayed.status == 403
    assert "This sign-in was not started in this browser" in await main_text(other)
    assert "Nothing was changed" in await main_text(other)
    # A client that sends no cookie of the pages but the sign-in's: refused the same way.
    bare = await http.get(callback, headers={"Cookie": site.dev_cookie("alice")})
    assert bare.status_code == 403 and "not started in this browser" in bare.text
    # A browser that holds a binding value of its own (it started another sign-in) finds nothing either.
    own_link, _ = await site.link("alice", "oidc")
    started = await other.goto(own_link)
    assert started is not None and other.url.startswith(site.provider.issuer)
    again = await other.goto(callback)
    assert again is not None and again.status == 400
    assert "This sign-in was not started here, in this browser" in await main_text(other)
    assert await site.account(account) == (Status.PENDING, None)

    done = await page.goto(callback)
    assert done is not None and done.status == 200
    assert await page.title() == "Connected: return to your assistant"
    status, sealed = await site.account(account)
    assert status is Status.ACTIVE and sealed is not None


async def test_the_binding_and_form_cookies_are_http_only_path_scoped_and_lax_and_strict(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, _ = await site.link("alice", "notes")
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    await page.goto(link)
    cookies = {c["name"]: c for c in await context.cookies(site.url("/"))}
    binding, form = cookies[BROWSER_COOKIE], cookies[CSRF_COOKIE]
    assert binding["httpOnly"] and binding["sameSite"] == "Lax" and binding["path"] == PREFIX
    assert binding["expires"] > 0  # goes away by itself, unlike a session cookie kept by a restored browser
    assert not binding["secure"]  # plain http on loopback; over https it is Secure (below)
    assert form["httpOnly"] and form["sameSite"] == "Strict" and form["path"] == PREFIX


async def test_over_https_the_binding_cookie_is_secure(site: Site) -> None:
    service = AccountService(
        accounts=site.accounts,
        vault=site.vault,
        connections=site.service.connections,
        tokens=site.service.tokens,
        clock=site.clock,
        base_url="https://accounts.example",
        prefix=PREFIX,
    )
    label = secrets.token_hex(4)
    link = await service.link("alice", "notes", label=label, flow_id=None)
    pages = pages_app(service, site.verifier)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=pages), base_url="https://accounts.example"
    ) as client:
        shown = await client.get(
            link.removeprefix(f"https://accounts.example{PREFIX}"), headers={"Cookie": site.dev_cookie("alice")}
        )
    assert shown.status_code == 200
    set_cookies = [v.lower() for k, v in shown.headers.multi_items() if k == "set-cookie"]
    [binding] = [c for c in set_cookies if c.startswith(BROWSER_COOKIE)]
    assert "; secure" in binding and "samesite=lax" in binding and "httponly" in binding
    assert f"path={PREFIX}" in binding and f"max-age={1800 + 24 * 3600}" in binding  # a day past the visit
