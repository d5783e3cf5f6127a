"""The set-up the connected-accounts tests share: one Chromium per module, a person's browser contexts closed after
each test, oidc-provider sending people back to the hosted pages' callback on the module's listening socket, and a
callback of the test's own for a provider used without askback's pages, and the hosted pages themselves (`site`,
`serve_site` with links living `LINK_TTL` and provider visits `VISIT_TTL`) with a client of them (`http`). A module
needing another provider (a callback of its own, a token lifetime) or another server defines its own `provider`,
`site` or `http`, which pytest prefers to these."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

from _accounts_site import LINK_TTL, PREFIX, VISIT_TTL, Callback, Site, serve_site
from infra import OidcProvider, async_chromium, oidc_provider, serving_http

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope, so the server, store and browser a module starts live for the module, on one event loop.
    return "asyncio"


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_chromium() as launched:
        yield launched


@pytest.fixture
async def contexts(browser: Browser) -> AsyncIterator[list[BrowserContext]]:
    """The browser contexts a test opened (each a person's own browser), closed when it ends."""
    made: list[BrowserContext] = []
    yield made
    for context in made:
        await context.close()


@pytest.fixture(scope="module")
def provider(listener: socket.socket) -> Iterator[OidcProvider]:
    port = listener.getsockname()[1]
    with oidc_provider(redirect_uris=[f"http://127.0.0.1:{port}{PREFIX}/callback"]) as started:
        yield started


@pytest.fixture
def callback() -> Iterator[Callback]:
    served = Callback()
    with serving_http(served.server):
        yield served


@pytest.fixture(scope="module")
async def site(
    request: pytest.FixtureRequest,
    listener: socket.socket,
    provider: OidcProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Site]:
    """The hosted account pages for the module, on its listening socket, with a database of its own."""
    folder: Path = tmp_path_factory.mktemp(request.module.__name__.rpartition(".")[2])
    async with serve_site(
        listener, provider, folder / "askback.db", link_ttl=LINK_TTL, provider_visit_ttl=VISIT_TTL
    ) as served:
        yield served


@pytest.fixture
async def http(site: Site) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the hosted pages that follows no redirect (a browser's requests, one by one)."""
    async with httpx.AsyncClient(base_url=site.base, timeout=10, follow_redirects=False) as client:
        yield client
