"""Tokens the resource server refuses whatever else they get right: ID tokens presented as access tokens (with the
relaxed `typ` setting too), principals that are not safe to show, and floods of made-up opaque tokens, which cost the
issuer a bounded number of introspection calls. Against a real issuer of the tests' own on loopback."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _loopback_issuer import CLIENT_ID, LoopbackIssuer, resource_server
from joserfc import jws

from askback.clock import FrozenClock
from askback.errors import InvalidTokenError, IssuerUnavailableError
from askback.identity import ResourceServer
from askback.identity._introspection import FAILURE_INTERVAL, MAX_FAILURES

pytestmark = [pytest.mark.http, pytest.mark.anyio]


HOSTILE_PRINCIPALS = {
    "ESC (OSC 52)": "alice\x1b]52;c;ZWNobyBwd25lZA==\x07",
    "a newline": "alice\nadmin",
    "U+202E": "alice\u202egpj.exe",
    "a zero-width space": "al\u200bice",
    "10 KB": "a" * 10_240,
}


@pytest.fixture
async def resource(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[ResourceServer]:
    server = resource_server(issuer, clock)
    try:
        yield server
    finally:
        await server.close()


def id_token_claims(issuer: LoopbackIssuer, now: float, **marks: Any) -> dict[str, Any]:
    """The claims of a signed-in person's ID token for the client `CLIENT_ID`, with `marks`."""
    return issuer.claims(now, aud=CLIENT_ID, client_id=None, scope=None, **marks)


@pytest.mark.parametrize(
    "marks",
    [
        {"nonce": "n-0S6_WzA2Mj"},
        {"at_hash": "77QmUPtjPfzWtF2AnpK9RQ"},
        {"c_hash": "LDktKdoQak3Pk0cnXxCltA"},
        {"auth_time": 1_799_999_000, "azp": CLIENT_ID},
        {"typ": "ID", "azp": CLIENT_ID},
    ],
    ids=["nonce", "at_hash", "c_hash", "auth_time with aud equal to azp", "typ claim ID"],
)
@pytest.mark.parametrize(
    ("typ", "relaxed"),
    [(None, False), (None, True), ("JWT", True)],
    ids=["typ absent", "typ absent, relaxed setting", "typ JWT, relaxed setting"],
)
async def test_an_id_token_is_refused_as_an_access_token_without_typ_and_with_typ_jwt_under_the_relaxed_setting(
    issuer: LoopbackIssuer, clock: FrozenClock, marks: dict[str, Any], typ: str | None, relaxed: bool
) -> None:
    claims = id_token_claims(issuer, clock.now(), **marks)
    token = issuer.sign(claims, typ=typ) if typ is not None else _without_typ(issuer, claims)
    server = resource_server(issuer, clock, accept_jwt_typ=relaxed)
    try:
        with pytest.raises(InvalidTokenError, match="an ID token, not an access token"):
            await server.verify(token)
    finally:
        await server.close()


async def test_an_access_token_for_a_client_id_audience_is_still_accepted(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    # An access token issued to another client (azp) for the API's client id, with the time of sign-in: accepted.
    claims = issuer.claims(clock.now(), aud=CLIENT_ID, azp="the-client", auth_time=1_799_999_000)
    caller = await resource.verify(_without_typ(issuer, claims))
    assert caller.principal == "alice"


def _without_typ(issuer: LoopbackIssuer, claims: dict[str, Any]) -> str:
    """`claims` signed by the issuer under a header with no `typ` (as Entra and many issuers sign ID tokens)."""
    header = {"alg": "RS256", "kid": issuer.signing.kid}
    return jws.serialize_compact(header, json.dumps(claims).encode(), issuer.signing)


@pytest.mark.parametrize("principal", list(HOSTILE_PRINCIPALS.values()), ids=list(HOSTILE_PRINCIPALS))
async def test_a_principal_with_control_or_bidi_characters_or_too_long_is_refused_in_a_jwt_and_by_introspection(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock, principal: str
) -> None:
    with pytest.raises(InvalidTokenError, match="principal"):
        await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, sub=principal))
    opaque = secrets.token_urlsafe(32)
    issuer.introspection[opaque] = {"active": True, **issuer.claims(clock.now(), aud=CLIENT_ID, sub=principal)}
    with pytest.raises(InvalidTokenError, match="principal"):
        await resource.verify(opaque)


async def test_a_principal_with_spaces_or_of_255_characters_is_accepted(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    for principal in ("Ana María Ruiz", "b" * 255, "用户-42"):
        caller = await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, sub=principal))
        assert caller.principal == principal


async def test_a_hundred_made_up_opaque_tokens_cost_a_bounded_number_of_introspection_calls(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    answers = {"invalid": 0, "unavailable": 0}
    for _ in range(100):
        try:
            await resource.verify(secrets.token_urlsafe(32))
        except InvalidTokenError:
            answers["invalid"] += 1
        except IssuerUnavailableError as exc:
            answers["unavailable"] += 1
            assert exc.retry_after is not None and 1 <= exc.retry_after <= FAILURE_INTERVAL
    assert issuer.introspections == MAX_FAILURES
    assert answers == {"invalid": MAX_FAILURES, "unavailable": 100 - MAX_FAILURES}

    # A real token already accepted is still answered from the cache meanwhile; a new one waits for the interval.
    clock.advance(FAILURE_INTERVAL)
    good = secrets.token_urlsafe(32)
    issuer.introspection[good] = {"active": True, **issuer.claims(clock.now(), aud=CLIENT_ID, sub="carol")}
    assert (await resource.verify(good)).principal == "carol"


async def test_a_refused_opaque_token_sent_again_is_refused_from_the_cache(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    made_up = secrets.token_urlsafe(32)
    for _ in range(50):
        with pytest.raises(InvalidTokenError, match="not active"):
            await resource.verify(made_up)
    assert issuer.introspections == 1
    # A refusal is kept a minute, not for ever.
    clock.advance(61)
    with pytest.raises(InvalidTokenError, match="not active"):
        await resource.verify(made_up)
    assert issuer.introspections == 2
