"""The development sign-in brings a person back to the link they opened before signing in, and never anywhere else.

A link opened by nobody signed in gets the "sign in first" page, which writes no token down: the link is kept in the
sign-in's own cookie (`DevelopmentSignIn.RETURN_COOKIE`, signed, HttpOnly, sent to the sign-in page only), and once
signed in the person lands on it. Real parts: the hosted pages under uvicorn on loopback, a real SQLite store,
oidc-provider, and Debian's Chromium through Playwright; the forged cookies go through httpx, as a browser's request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import TYPE_CHECKING

import httpx
import pytest

from _accounts_site import PREFIX, Site, form_token, main_text, new_person
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.status import Status

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

RETURN = "askback_dev_return"  # the cookie docs/accounts.md names
SIGN_IN = f"{PREFIX}{DevelopmentSignIn.PATH}"

HOSTILE = [
    pytest.param("//evil.example/x", id="a scheme-relative URL"),
    pytest.param("/\\evil.example/x", id="a backslash a browser reads as //"),
    pytest.param("/\\/evil.example/x", id="a backslash after the slash"),
    pytest.param("https://evil.example/x", id="an absolute URL"),
    pytest.param("javascript:alert(1)", id="a script URL"),
    pytest.param("evil.example/x", id="no leading slash"),
    pytest.param("/\tevil", id="a tab"),
    pytest.param("/x\r\nSet-Cookie: a=b", id="a line break"),
    pytest.param("/x\x00y", id="a NUL"),
    pytest.param("/x\x7f", id="DEL"),
    pytest.param("", id="nothing"),
]


def signed_as_the_sign_in_signs(secret: bytes, path: str) -> str:
    """A return cookie for `path` signed under `secret`, as `DevelopmentSignIn` signs one: what a person holding the
    secret could forge for a path the sign-in itself would never keep."""
    encoded = base64.urlsafe_b64encode(path.encode()).decode().rstrip("=")
    mac = hmac.new(secret, f"{RETURN}\x00{path}".encode(), hashlib.sha256).digest()
    return f"{encoded}.{base64.urlsafe_b64encode(mac).decode().rstrip('=')}"


# --- in Chromium ----------------------------------------------------------------------------------------------------


@pytest.mark.http
@pytest.mark.anyio
async def test_a_link_opened_before_signing_in_is_where_the_person_lands_once_signed_in(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "notes")
    token = link.split("t=", 1)[1]
    context, page = await new_person(browser, site)
    contexts.append(context)

    refused = await page.goto(link)
    assert refused is not None and refused.status == 400
    assert "once you are signed in, you come back to this link" in await main_text(page)
    assert token not in await page.content()  # the link's token is never written in a page

    await page.get_by_role("link", name="Sign in (development sign-in)").click()
    assert "Once you are signed in, you go back to the link you opened." in await main_text(page)
    assert token not in await page.content()
    kept = [c for c in await context.cookies() if c["name"] == RETURN]
    assert len(kept) == 1 and kept[0]["httpOnly"] and kept[0]["sameSite"] == "Strict" and kept[0]["path"] == SIGN_IN
    await page.get_by_label("User name").fill("alice")
    await page.get_by_role("button", name="Sign in").click()

    await page.wait_for_url(link)  # back on the link, which goes on: the key form
    assert await page.title() == "Enter your Notes API key"
    assert [c for c in await context.cookies() if c["name"] == RETURN] == []  # the way back is used once
    assert await site.account(account) == (Status.PENDING, None)


@pytest.mark.http
@pytest.mark.anyio
async def test_an_oauth_link_opened_before_signing_in_goes_on_to_the_provider_once_signed_in(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, _ = await site.link("alice", "oidc")
    context, page = await new_person(browser, site)
    contexts.append(context)

    await page.goto(link)
    await page.get_by_role("link", name="Sign in (development sign-in)").click()
    await page.get_by_label("User name").fill("alice")
    await page.get_by_role("button", name="Sign in").click()

    await page.wait_for_url(lambda u: u.startswith(site.provider.issuer))


# --- what is refused ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", HOSTILE)
def test_the_sign_in_keeps_no_way_back_to_a_path_off_this_site(path: str) -> None:
    assert DevelopmentSignIn(secrets.token_bytes(32)).return_value(path) is None


@pytest.mark.parametrize("path", HOSTILE)
def test_a_return_cookie_for_a_path_off_this_site_is_refused_even_signed_under_the_secret(path: str) -> None:
    secret = secrets.token_bytes(32)
    sign_in = DevelopmentSignIn(secret)
    assert sign_in.return_path(signed_as_the_sign_in_signs(secret, "/accounts/start?t=x")) == "/accounts/start?t=x"
    assert sign_in.return_path(signed_as_the_sign_in_signs(secret, path)) is None


def test_a_return_cookie_unsigned_altered_signed_elsewhere_or_not_one_is_nobodys_way_back() -> None:
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    kept = sign_in.return_value("/accounts/start?t=abc")
    assert kept is not None and sign_in.return_path(kept) == "/accounts/start?t=abc"
    encoded, _, signature = kept.partition(".")
    other = base64.urlsafe_b64encode(b"/accounts/start?t=mallory").decode().rstrip("=")
    for cookie in (
        encoded,
        f"{encoded}.",
        f"{other}.{signature}",
        DevelopmentSignIn(secrets.token_bytes(32)).return_value("/accounts/start?t=abc"),
        "not base64!.x",
        "\udcff.x",
        "A" * 10_000 + ".x",
        None,
        "",
    ):
        assert sign_in.return_path(cookie) is None, cookie


async def _post_with_return(http: httpx.AsyncClient, site: Site, cookie: str) -> httpx.Response:
    csrf = await form_token(http)
    http.cookies.set(RETURN, cookie, domain="127.0.0.1", path=SIGN_IN)
    return await http.post(SIGN_IN, data={"user": "alice", "csrf": csrf})


@pytest.mark.http
@pytest.mark.anyio
@pytest.mark.parametrize("forged", ["unsigned", "signed elsewhere", "altered"])
async def test_a_forged_return_cookie_signs_in_and_sends_nobody_anywhere(
    site: Site, http: httpx.AsyncClient, forged: str
) -> None:
    link, _ = await site.link("alice", "notes")
    path = link.removeprefix(site.base)
    encoded = base64.urlsafe_b64encode(path.encode()).decode().rstrip("=")
    cookie = {
        "unsigned": f"{encoded}.x",
        "signed elsewhere": DevelopmentSignIn(secrets.token_bytes(32)).return_value(path) or "",
        "altered": f"{base64.urlsafe_b64encode(b'//evil.example/x').decode().rstrip('=')}."
        + (site.verifier.return_value(path) or "").rpartition(".")[2],
    }[forged]

    signed_in = await _post_with_return(http, site, cookie)
    http.cookies.set(RETURN, cookie, domain="127.0.0.1", path=SIGN_IN)
    way_back = await http.get(f"{SIGN_IN}/back")

    assert signed_in.status_code == 200 and "location" not in signed_in.headers
    assert "You are signed in as alice." in signed_in.text and "/back" not in signed_in.text
    assert site.verifier.user_of(signed_in.cookies[DevelopmentSignIn.COOKIE]) == "alice"
    assert way_back.status_code == 303 and way_back.headers["location"] == SIGN_IN


@pytest.mark.http
@pytest.mark.anyio
async def test_a_next_given_to_the_sign_in_goes_before_the_kept_link(site: Site, http: httpx.AsyncClient) -> None:
    link, _ = await site.link("alice", "notes")
    kept = site.verifier.return_value(link.removeprefix(site.base))
    assert kept is not None
    csrf = await form_token(http)
    http.cookies.set(RETURN, kept, domain="127.0.0.1", path=SIGN_IN)

    signed_in = await http.post(SIGN_IN, data={"user": "alice", "csrf": csrf, "next": f"{PREFIX}/cancel"})

    assert signed_in.status_code == 303 and signed_in.headers["location"] == f"{PREFIX}/cancel"
    assert f"{RETURN}=" in signed_in.headers.get("set-cookie", "")  # cleared: the way back is used once
