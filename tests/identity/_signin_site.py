"""A site whose people sign in with OpenID Connect at oidc-provider (`askback.identity.PeopleSignIn`), for a test
module: the sign-in at `/auth` and the hosted account pages at `/accounts` (their store, vault and connection as in
`_accounts_site`) served by uvicorn on the module's listening socket, with a frozen clock; a sign-in started on a
store of its own (`sign_in_started`); and the steps a person takes through the provider's pages in Chromium; another site to
post forms from (`OtherSite`)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from html import escape
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, urlencode, urlsplit

import anyio
import uvicorn
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount

from _accounts_site import consent, discovered_oidc, sign_in_at_the_provider
from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.pages import pages_app
from askback.accounts.repository import Account, Accounts
from askback.accounts.service import AccountService
from askback.accounts.status import Status
from askback.accounts.tokens import TokenKeeper
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.extension import ExtensionContext
from askback.identity import PeopleSignIn
from askback.settings import load_settings
from askback.store import Store
from infra import OidcProvider, QuietHandler

if TYPE_CHECKING:
    from playwright.async_api import Page

ACCOUNTS = "/accounts"
AUTH = "/auth"


def redirect_uris(base: str) -> list[str]:
    """What the provider must accept for a site at `base`: the people's sign-in and the accounts' callback."""
    return [f"{base}{AUTH}/callback", f"{base}{ACCOUNTS}/callback"]


def people_sign_in(
    provider: OidcProvider, base: str, clock: FrozenClock, *, secret: str | None = None, **more: object
) -> PeopleSignIn:
    return PeopleSignIn(
        issuer=provider.issuer,
        client_id=provider.client_id,
        client_secret=SecretStr(provider.client_secret),
        base_url=base,
        session_secret=secret or secrets.token_bytes(32),
        clock=clock,
        **more,  # type: ignore[arg-type]
    )


@contextlib.asynccontextmanager
async def sign_in_started(sign_in: PeopleSignIn, database: Path, **settings: object) -> AsyncIterator[Store]:
    """`sign_in` started (as an app starts its extensions) on a store at `database`, with `settings`
    (`session_ttl=...`); the store, for a test to look at its rows."""
    url = f"sqlite:///{database}"
    store = await Store.open(url, migrate=True, components=all_components())
    try:
        await sign_in.start(ExtensionContext(store, load_settings(database_url=url, **settings), FrozenClock()))
        yield store
    finally:
        await sign_in.close()
        await store.close()


@dataclass
class SignInSite:
    base: str
    sign_in: PeopleSignIn
    service: AccountService
    accounts: Accounts
    clock: FrozenClock
    provider: OidcProvider
    database: Path
    secret: str  # the session secret, for a second instance of the site

    def url(self, path: str, **query: str) -> str:
        return f"{self.base}{path}" + (f"?{urlencode(query)}" if query else "")

    async def link(self, principal: str, connection: str) -> tuple[str, Account]:
        """A fresh link for a fresh account of `principal`: the start URL and the account."""
        label = secrets.token_hex(4)
        url = await self.service.link(principal, connection, label=label, flow_id=f"flow-{label}")
        [account] = [a for a in await self.accounts.of(principal, connection) if a.label == label]
        return url, account

    async def status(self, account: Account) -> Status:
        now = await self.accounts.get(account.id)
        assert now is not None
        return now.status


@contextlib.asynccontextmanager
async def serve_sign_in_site(
    listener: socket.socket,
    provider: OidcProvider,
    database: Path,
    *,
    sign_in_of: Callable[[str, FrozenClock], PeopleSignIn] | None = None,
) -> AsyncIterator[SignInSite]:
    """The site on `listener`; its people sign in at `provider` (`people_sign_in`), or as `sign_in_of(base, clock)`
    makes them."""
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    store = await Store.open(f"sqlite:///{database}", migrate=True, components=all_components())
    connections = Connections([await discovered_oidc(provider), ApiKeyConnection(name="notes", label="Notes key")])
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
        prefix=ACCOUNTS,
    )
    secret = secrets.token_urlsafe(32)
    sign_in = (
        sign_in_of(base, clock) if sign_in_of is not None else people_sign_in(provider, base, clock, secret=secret)
    )
    await sign_in.start(ExtensionContext(store, load_settings(database_url=f"sqlite:///{database}"), clock))
    served = Starlette(routes=[Mount(AUTH, app=sign_in.app), Mount(ACCOUNTS, app=pages_app(service, sign_in))])
    server = uvicorn.Server(uvicorn.Config(served, lifespan="off", log_level="warning", timeout_graceful_shutdown=5))
    try:
        # The socket already listens: a request made before uvicorn takes it waits in the kernel's queue.
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(server.serve, [listener])
            yield SignInSite(base, sign_in, service, accounts, clock, provider, database, secret)
            server.should_exit = True
    finally:
        await sign_in.close()
        await tokens.aclose()
        await store.close()


async def sign_in_as(page: Page, issuer: str, user: str) -> None:
    """At the provider's pages (where `page` was sent): sign in as `user` and consent to askback's sign-in."""
    await sign_in_at_the_provider(page, issuer, user=user)
    await consent(page)


class OtherSite:
    """Another site (`http://localhost:<port>`, not `127.0.0.1`): `/form?action=URL` is a page with one form that
    posts to URL, as a page anywhere on the web can."""

    def __init__(self) -> None:
        class Handler(QuietHandler):
            def do_GET(self) -> None:
                action = dict(parse_qsl(urlsplit(self.path).query))["action"]
                body = (
                    f'<!doctype html><title>Elsewhere</title><form method="post" action="{escape(action)}">'
                    '<button type="submit">Win a prize</button></form>'
                ).encode()
                self.answer(200, body, "text/html; charset=utf-8")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://localhost:{self.server.server_address[1]}"

    def page(self, action: str) -> str:
        return f"{self.origin}/form?{urlencode({'action': action})}"


@contextlib.contextmanager
def signed_in_inbox(provider: OidcProvider, database: str, port: int, log_path: Path, **env: str) -> Iterator[str]:
    """`askback inbox serve --auth-issuer ...` of `provider` on `port` over `database` (people sign in there), with no
    ASKBACK_* settings but the sign-in's and `env`'s; its output in `log_path`; stopped when the block ends."""
    command = [
        *("inbox", "serve", "--database", database, "--port", str(port), "--no-resume"),
        *("--auth-issuer", provider.issuer, "--auth-client-id", provider.client_id),
    ]
    settings = {
        **{k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")},
        "ASKBACK_SIGNIN_CLIENT_SECRET": provider.client_secret,
        "ASKBACK_SESSION_SECRET": secrets.token_urlsafe(32),
        **env,
    }
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "askback", *command],
            env=settings,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
