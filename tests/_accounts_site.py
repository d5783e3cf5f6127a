"""The hosted account pages served on loopback for a test module: a SQLite store with every schema history, a real
vault, an OAuth connection discovered from oidc-provider and an API-key connection, the development sign-in, a
frozen clock, and uvicorn on the module's listening socket. Chromium helpers for a person using them, the one way
through oidc-provider's development login and consent pages (`sign_in_at_the_provider`, `consent_at_the_provider`),
and the OAuth callback a test holds itself when no askback page receives it (`Callback`)."""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import httpx
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount

from askback.accounts.connections import ApiKeyConnection, Connections, OAuthConnection, discover
from askback.accounts.pages import DevelopmentSignIn, pages_app
from askback.accounts.repository import Account, Accounts
from askback.accounts.service import AccountService
from askback.accounts.status import Status
from askback.accounts.tokens import TokenKeeper
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.store import Store
from infra import OidcProvider, QuietHandler, async_browser_context, serving_asgi

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page

PREFIX = "/accounts"
LINK_TTL = 600
"""How long a link of the site lives until it is opened."""
VISIT_TTL = 1800
"""How long a person may take at the provider once the link is opened (the service's default)."""


@dataclass
class Site:
    base: str
    service: AccountService
    accounts: Accounts
    vault: Vault
    clock: FrozenClock
    verifier: DevelopmentSignIn
    provider: OidcProvider
    database: Path

    def url(self, path: str, **query: str) -> str:
        return f"{self.base}{PREFIX}{path}" + (f"?{urlencode(query)}" if query else "")

    async def link(self, principal: str, connection: str) -> tuple[str, Account]:
        """A fresh link for a fresh account of `principal`: the start URL and the account."""
        label = secrets.token_hex(4)
        url = await self.service.link(principal, connection, label=label, flow_id=f"flow-{label}")
        [account] = [a for a in await self.accounts.of(principal, connection) if a.label == label]
        return url, account

    async def account(self, account: Account) -> tuple[Status, str | None]:
        """The account's stored status and sealed credential now."""
        now = await self.accounts.get(account.id)
        assert now is not None
        return now.status, await self.accounts.sealed_credential(account.id)

    def dev_cookie(self, user: str) -> str:
        return f"{DevelopmentSignIn.COOKIE}={self.verifier.cookie_value(user)}"


@contextlib.asynccontextmanager
async def serve_site(
    listener: socket.socket, provider: OidcProvider, database: Path, *, link_ttl: float, provider_visit_ttl: float
) -> AsyncIterator[Site]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    store = await Store.open(f"sqlite:///{database}", migrate=True, components=all_components())
    oauth = await discovered_oidc(provider)
    connections = Connections([oauth, ApiKeyConnection(name="notes", label="Notes API key")])
    vault = Vault(new_key())
    clock = FrozenClock(at=time.time())
    accounts = Accounts(store.database)
    tokens = TokenKeeper(accounts, vault, connections, clock=clock)
    service = AccountService(
        accounts=accounts,
        vault=vault,
        connections=connections,
        tokens=tokens,
        clock=clock,
        base_url=base,
        prefix=PREFIX,
        link_ttl=link_ttl,
        provider_visit_ttl=provider_visit_ttl,
    )
    verifier = DevelopmentSignIn(secrets.token_bytes(32))
    # Mounted under the prefix, as `build_app(mounts=[Mounted(PREFIX, pages, auth=Open())])` serves them.
    served = Starlette(routes=[Mount(PREFIX, app=pages_app(service, verifier))])
    try:
        async with serving_asgi(served, listener, lifespan="off"):
            yield Site(base, service, accounts, vault, clock, verifier, provider, database)
    finally:
        await tokens.aclose()
        await store.close()


async def new_person(browser: Browser, site: Site, user: str | None = None) -> tuple[BrowserContext, Page]:
    """A browser context of its own (a person's own browser), signed in as `user` when given."""
    context = await async_browser_context(browser)
    if user is not None:
        await context.add_cookies(
            [{"name": DevelopmentSignIn.COOKIE, "value": site.verifier.cookie_value(user), "url": site.base}]
        )
    return context, await context.new_page()


async def main_text(page: Page) -> str:
    return " ".join((await page.locator("main").inner_text()).split())


async def discovered_oidc(provider: OidcProvider) -> OAuthConnection:
    """The OAuth connection `oidc` to oidc-provider, its endpoints discovered from its metadata, asking for a refresh
    token (oidc-provider keeps offline_access only when consent is prompted for)."""
    return await discover(
        OAuthConnection(
            name="oidc",
            client_id=provider.client_id,
            client_secret=SecretStr(provider.client_secret),
            issuer=provider.issuer,
            scopes=("openid", "offline_access"),
            authorize_params={"prompt": "consent"},
        )
    )


async def sign_in_at_the_provider(page: Page, issuer: str, *, user: str = "alice") -> None:
    """oidc-provider's development login as a person goes through it: once `page` is at the provider (`issuer`),
    sign in as `user` (any password does) and wait for the consent page."""
    await page.wait_for_url(lambda u: u.startswith(issuer))
    assert await page.locator("h1").inner_text() == "Sign-in"
    await page.fill("input[name=login]", user)
    await page.fill("input[name=password]", "anything")
    await page.click("button[type=submit]")
    await page.locator("h1", has_text="Authorize").wait_for()


async def consent(page: Page) -> None:
    """Consent on oidc-provider's consent page: the provider then sends the browser to the client's redirect URI."""
    await page.get_by_role("button", name="Continue").click()


async def consent_at_the_provider(page: Page, issuer: str, *, user: str = "alice") -> None:
    """Sign in at oidc-provider as `user` (`sign_in_at_the_provider`) and consent."""
    await sign_in_at_the_provider(page, issuer, user=user)
    await consent(page)


async def consent_and_hold_the_callback(page: Page, site: Site, link: str) -> str:
    """Open `link`, sign in and consent at the provider, and stop the browser just before it loads the callback:
    the callback URL the provider sent it to (with `state` and `code`), not yet used.

    (Playwright cannot intercept a request the browser makes by following a redirect, and the provider sends the
    person back with one: so the consent's own POST is sent from the route and its redirects followed there, with
    the context's cookies, up to the callback.)"""
    from playwright.async_api import Route

    held: list[str] = []
    callback = site.url("/callback")

    async def hold(route: Route) -> None:
        response = await route.fetch(max_redirects=0)
        location: str | None = None
        for _ in range(5):
            location = response.headers.get("location")
            if location is None or location.startswith(callback):
                break
            response = await page.context.request.get(location, max_redirects=0)
        if location is None:
            await route.fulfill(response=response)
            return
        held.append(location)
        await route.fulfill(status=200, content_type="text/html", body="<title>Held</title><h1>Held</h1>")

    await page.goto(link)
    await sign_in_at_the_provider(page, site.provider.issuer)

    def at_the_provider(url: str) -> bool:
        return url.startswith(site.provider.issuer)

    await page.route(at_the_provider, hold)
    await consent(page)
    await page.locator("h1", has_text="Held").wait_for()
    await page.unroute(at_the_provider, hold)
    assert len(held) == 1
    return held[0]


def form_field(html: str, name: str) -> str:
    found = re.search(rf'name="{re.escape(name)}" value="([^"]+)"', html)
    assert found is not None, f"no {name} field"
    return found.group(1)


async def form_token(http: httpx.AsyncClient, path: str = f"{PREFIX}/dev/sign-in") -> str:
    """A page's form token, as a browser gets it (its cookie is now in the client's jar)."""
    return form_field((await http.get(path)).text, "csrf")


class Callback:
    """A redirect URI outside askback: a loopback HTTP server that records the callback URLs it is sent to (not the
    browser's favicon requests) and tells the person they are done, so the browser lands somewhere."""

    def __init__(self) -> None:
        received: list[str] = []
        self.received = received

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/callback"):
                    received.append(f"http://127.0.0.1:{self.server.server_address[1]}{self.path}")
                body = b"<!doctype html><title>Connected</title><p>You can close this window."
                self.answer(200, body, "text/html; charset=utf-8")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}/callback"
