"""The set-up the connected-accounts tests share: one Chromium per module, a person's browser contexts closed after
each test, oidc-provider sending people back to the hosted pages' callback on the module's listening socket, and a
callback of the test's own for a provider used without askback's pages. A module needing another provider (a
callback of its own, a token lifetime) defines its own `provider`, which pytest prefers to this one."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

import pytest

from _accounts_site import PREFIX, Callback, serving
from infra import OidcProvider, async_chromium, oidc_provider

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
    with serving(served.server):
        yield served
