"""What a flood of requests can make askback ask of its issuer, and read from it: a bounded number of introspection
calls however concurrent the made-up tokens, a bounded number of token-endpoint calls however many made-up sign-in
callbacks while that endpoint fails, and no more than a cap of any answer's body. Against real servers of the tests'
own on loopback, counting what they are asked and what they send."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import pytest
from _loopback_issuer import LoopbackIssuer, bound_socket, serving_in_thread
from pydantic import SecretStr
from starlette.types import Receive, Scope, Send

from askback.clock import FrozenClock
from askback.errors import InvalidTokenError, IssuerUnavailableError
from askback.identity import PeopleSignIn
from askback.identity._introspection import FAILURE_INTERVAL, MAX_FAILURES, Introspector
from askback.identity._keys import KeyCache
from askback.identity._signin import DISCOVERY_INTERVAL

pytestmark = [pytest.mark.http, pytest.mark.anyio]

SITE = "http://127.0.0.1:8765"
AUDIENCE = "https://askback.test/mcp"


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def introspector(http: httpx.AsyncClient, issuer: LoopbackIssuer, clock: FrozenClock) -> Introspector:
    return Introspector(
        http,
        f"{issuer.issuer}/introspect",
        client_id=issuer.client_id,
        client_secret=issuer.client_secret,
        issuer=issuer.issuer,
        audience=AUDIENCE,
        clock=clock,
    )


async def test_sixty_concurrent_made_up_opaque_tokens_cost_at_most_max_failures_introspection_calls(
    http: httpx.AsyncClient, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    asker = introspector(http, issuer, clock)
    outcomes = await asyncio.gather(
        *(asker.introspect(secrets.token_urlsafe(32)) for _ in range(60)), return_exceptions=True
    )
    assert issuer.introspections <= MAX_FAILURES
    assert all(isinstance(o, (InvalidTokenError, IssuerUnavailableError)) for o in outcomes), outcomes
    assert sum(isinstance(o, IssuerUnavailableError) for o in outcomes) >= 60 - MAX_FAILURES


async def test_an_accepted_opaque_token_gives_back_its_try_so_good_tokens_never_exhaust_the_hold_back(
    http: httpx.AsyncClient, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    asker = introspector(http, issuer, clock)
    good = [secrets.token_urlsafe(32) for _ in range(3 * MAX_FAILURES)]
    for token in good:
        issuer.introspection[token] = {"active": True, **issuer.claims(clock.now(), aud=AUDIENCE, sub="carol")}
    answers = await asyncio.gather(*(asker.introspect(token) for token in good[:MAX_FAILURES]))
    answers += [await asker.introspect(token) for token in good[MAX_FAILURES:]]
    assert [a["sub"] for a in answers] == ["carol"] * len(good)
    # Made-up ones still have their whole allowance, then wait; the accepted ones are answered from the cache.
    for _ in range(MAX_FAILURES):
        with pytest.raises(InvalidTokenError):
            await asker.introspect(secrets.token_urlsafe(32))
    with pytest.raises(IssuerUnavailableError) as held:
        await asker.introspect(secrets.token_urlsafe(32))
    assert 1 <= held.value.retry_after <= FAILURE_INTERVAL
    assert (await asker.introspect(good[0]))["sub"] == "carol"


@pytest.fixture
async def sign_in(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[PeopleSignIn]:
    people = PeopleSignIn(
        issuer=issuer.issuer,
        client_id="askback-pages",
        client_secret=SecretStr("pages-secret"),
        base_url=SITE,
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
    try:
        yield people
    finally:
        await people.close()


async def test_twenty_made_up_callbacks_while_the_token_endpoint_fails_call_it_once_and_log_one_line(
    sign_in: PeopleSignIn, issuer: LoopbackIssuer, clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=sign_in.app), base_url=SITE) as pages:
        started = await pages.get("/sign-in", params={"next": "/inbox"})
        assert started.status_code == 303, started.text
        state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
        cookie = "; ".join(f"{name}={value}" for name, value in started.cookies.items())
        issuer.token_failing = 503
        caplog.set_level(logging.WARNING, logger="askback.identity")
        for _ in range(20):
            back = await pages.get(
                "/callback", params={"state": state, "code": secrets.token_urlsafe(16)}, headers={"Cookie": cookie}
            )
            assert back.status_code == 503, back.text
            assert 1 <= int(back.headers["retry-after"]) <= DISCOVERY_INTERVAL
        assert issuer.token_requests == 1
        assert len([r for r in caplog.records if r.name == "askback.identity"]) == 1

        # After the interval the endpoint is asked again: once it answers, a made-up code is refused by it.
        issuer.token_failing = None
        clock.advance(DISCOVERY_INTERVAL)
        back = await pages.get("/callback", params={"state": state, "code": "made-up"}, headers={"Cookie": cookie})
        assert back.status_code == 400, back.text
        assert issuer.token_requests == 2


async def _huge(scope: Scope, receive: Receive, send: Send) -> None:
    """Every request answered 200 with a JSON document of 16 MiB (an empty key set, padded with spaces)."""
    assert scope["type"] == "http"
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"keys": [', "more_body": True})
    for _ in range(256):
        await send({"type": "http.response.body", "body": b" " * 65_536, "more_body": True})
    await send({"type": "http.response.body", "body": b"]}", "more_body": False})


@pytest.fixture
def huge() -> Iterator[str]:
    sock = bound_socket()
    try:
        with serving_in_thread(_huge, sock):
            yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


async def test_a_jwks_or_introspection_answer_of_16_mib_is_refused_once_the_cap_is_read(
    huge: str, http: httpx.AsyncClient, clock: FrozenClock
) -> None:
    url = huge
    with anyio.fail_after(20):
        with pytest.raises(IssuerUnavailableError, match=r"larger than \d+ bytes"):
            await KeyCache(http, f"{url}/jwks", clock=clock).key_for("k1")
        asker = Introspector(
            http, f"{url}/introspect", client_id="c", client_secret="s", issuer=url, audience=AUDIENCE, clock=clock
        )
        with pytest.raises(IssuerUnavailableError, match=r"more than \d+ bytes"):
            await asker.introspect(secrets.token_urlsafe(32))
