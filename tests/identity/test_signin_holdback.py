"""People's sign-in while its issuer fails: visits are answered 503 with Retry-After, and the issuer is asked again
at most once per interval, however many people visit. The sign-in's routes are driven in process; its issuer is a
real one of the tests' own on loopback, counting what it is asked."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import httpx
import pytest
from _loopback_issuer import LoopbackIssuer
from pydantic import SecretStr

from askback.clock import FrozenClock
from askback.identity import PeopleSignIn
from askback.identity._signin import DISCOVERY_INTERVAL

pytestmark = [pytest.mark.http, pytest.mark.anyio]

SITE = "http://127.0.0.1:8765"


@pytest.fixture
async def pages(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[httpx.AsyncClient]:
    sign_in = PeopleSignIn(
        issuer=issuer.issuer,
        client_id="askback-pages",
        client_secret=SecretStr("pages-secret"),
        base_url=SITE,
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
    transport = httpx.ASGITransport(app=sign_in.app)
    try:
        async with httpx.AsyncClient(transport=transport, base_url=SITE) as client:
            yield client
    finally:
        await sign_in.close()


async def test_twenty_visits_while_the_issuer_fails_ask_it_once_and_each_is_told_when_to_come_back(
    pages: httpx.AsyncClient, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    issuer.failing = 500
    for _ in range(20):
        visit = await pages.get("/sign-in", params={"next": "/inbox"})
        assert visit.status_code == 503, visit.text
        assert 1 <= int(visit.headers["retry-after"]) <= DISCOVERY_INTERVAL
    # One discovery: its two metadata URLs, each answered 500.
    assert issuer.requests == 2

    # Once the issuer answers again, the first visit after the interval finds it and sends the person there.
    issuer.failing = None
    clock.advance(DISCOVERY_INTERVAL)
    visit = await pages.get("/sign-in", params={"next": "/inbox"})
    assert visit.status_code == 303, visit.text
    assert visit.headers["location"].startswith(f"{issuer.issuer}/auth?")
