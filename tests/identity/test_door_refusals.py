"""What the resource server refuses at the door however well signed: an ID token without the marks the old checks
looked for, scopes and principals that are not safe to show or store, and issuer URLs carrying a password. Tokens are
checked in process against a real issuer of the tests' own on loopback."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from _loopback_issuer import CLIENT_ID, LoopbackIssuer, resource_server
from joserfc import jws
from pydantic import SecretStr

from askback.clock import FrozenClock
from askback.core.text import name_problem
from askback.errors import ConfigurationError, InvalidTokenError
from askback.identity import PeopleSignIn, ResourceServer
from askback.identity._settings import load_identity_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def resource(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[ResourceServer]:
    server = resource_server(issuer, clock)
    try:
        yield server
    finally:
        await server.close()


def signed(issuer: LoopbackIssuer, claims: dict[str, Any], typ: str | None) -> str:
    if typ is not None:
        return issuer.sign(claims, typ=typ)
    header = {"alg": "RS256", "kid": issuer.signing.kid}
    return jws.serialize_compact(header, json.dumps(claims).encode(), issuer.signing)


def entra_id_token(issuer: LoopbackIssuer, now: float, **extra: Any) -> dict[str, Any]:
    """An Entra-shaped ID token for the app `CLIENT_ID`, without a nonce."""
    claims: dict[str, Any] = {
        "aud": CLIENT_ID,
        "iss": issuer.issuer,
        "iat": int(now),
        "nbf": int(now),
        "exp": int(now + 3600),
        "sub": "AAAAAAAAAAAAAAAAAAAAAIkzqFVrSaSaFHy782bbtaQ",
        "oid": "00000000-0000-0000-66f3-3332eca7ea81",
        "tid": "9122040d-6c67-4c5b-b112-36a304b66dad",
        "name": "Abe Lincoln",
        "preferred_username": "abeli@microsoft.com",
        "ver": "2.0",
    }
    claims.update(extra)
    return claims


ID_TOKEN_SHAPES = {
    "no nonce": {},
    "auth_time and no azp": {"auth_time": 1_799_999_000},
    "azp not in aud": {"auth_time": 1_799_999_000, "azp": "another-app"},
}


@pytest.mark.parametrize("extra", list(ID_TOKEN_SHAPES.values()), ids=list(ID_TOKEN_SHAPES))
@pytest.mark.parametrize(
    ("typ", "relaxed"), [(None, False), ("JWT", True)], ids=["typ absent", "typ JWT, relaxed setting"]
)
@pytest.mark.http
async def test_an_id_token_without_nonce_is_refused_as_an_access_token_for_a_client_id_audience(
    issuer: LoopbackIssuer, clock: FrozenClock, extra: dict[str, Any], typ: str | None, relaxed: bool
) -> None:
    server = resource_server(issuer, clock, accept_jwt_typ=relaxed)
    try:
        with pytest.raises(InvalidTokenError, match="looks like an ID token"):
            await server.verify(signed(issuer, entra_id_token(issuer, clock.now(), **extra), typ))
    finally:
        await server.close()


@pytest.mark.parametrize("mark", [{"scp": "notes.read"}, {"roles": ["Notes.Write"]}], ids=["scp", "roles"])
@pytest.mark.http
async def test_an_entra_access_token_typed_jwt_with_scp_or_roles_is_accepted_under_the_relaxed_setting(
    issuer: LoopbackIssuer, clock: FrozenClock, mark: dict[str, Any]
) -> None:
    server = resource_server(issuer, clock, accept_jwt_typ=True)
    try:
        claims = entra_id_token(issuer, clock.now(), azp="the-client", **mark)
        caller = await server.verify(signed(issuer, claims, "JWT"))
        assert caller.principal == claims["sub"]
    finally:
        await server.close()


HOSTILE_SCOPES = {
    "ESC (OSC 52)": "read \x1b]52;c;ZWNobyBwd25lZA==\x07",
    "U+202E": "read \u202egpj.exe",
    "5,000 characters": "read " + "a" * 5_000,
    "2,000 scopes": " ".join(f"s{i}" for i in range(2_000)),
    "a no-break space": "read extra\u00a0deploy",
}


@pytest.mark.parametrize("scope", list(HOSTILE_SCOPES.values()), ids=list(HOSTILE_SCOPES))
@pytest.mark.http
async def test_a_scope_with_control_or_bidi_characters_too_long_or_too_many_is_refused_in_a_jwt_and_by_introspection(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock, scope: str
) -> None:
    with pytest.raises(InvalidTokenError, match="scope"):
        await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, scope=scope))
    opaque = secrets.token_urlsafe(32)
    issuer.introspection[opaque] = {"active": True, **issuer.claims(clock.now(), aud=CLIENT_ID, scope=scope)}
    with pytest.raises(InvalidTokenError, match="scope"):
        await resource.verify(opaque)


@pytest.mark.http
async def test_a_hundred_ordinary_scopes_are_accepted(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    scope = " ".join(f"api://notes/s{i}" for i in range(100))
    caller = await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, scope=scope))
    assert len(caller.scopes) == 100


LOOK_ALIKE_NAMES = {
    "U+3164 alone": "\u3164",
    "U+115F": "\u115f",
    "U+2800": "\u2800",
    "a trailing no-break space": "alice\u00a0",
    "a no-break space inside": "Ana María\u00a0Ruiz",
    "a leading space": " alice",
    "250 combining marks": "a" + "\u0301" * 250,
}
ORDINARY_NAMES = ["alice", "Zoë Ångström", "山田 太郎", "a.b-c_d@example.com", "Ana María Ruiz", "e\u0301"]


@pytest.mark.parametrize("name", list(LOOK_ALIKE_NAMES.values()), ids=list(LOOK_ALIKE_NAMES))
@pytest.mark.http
async def test_an_invisible_or_look_alike_principal_is_refused_at_the_jwt_door_and_by_name_problem(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock, name: str
) -> None:
    assert name_problem(name, what="the name", limit=255) is not None
    with pytest.raises(InvalidTokenError, match="principal"):
        await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, sub=name))


@pytest.mark.http
async def test_ordinary_names_are_still_accepted_at_the_jwt_door_and_by_name_problem(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    for name in ORDINARY_NAMES:
        assert name_problem(name, what="the name", limit=255) is None, name
        assert (await resource.verify(issuer.access_token(clock.now(), aud=CLIENT_ID, sub=name))).principal == name


SECRET = "s3cret-pw"


@pytest.mark.parametrize("variable", ["ASKBACK_AUTH_ISSUER", "ASKBACK_AUTH_INTROSPECTION_URL"])
def test_an_issuer_or_introspection_url_with_a_password_is_refused_naming_the_variable_never_the_secret(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, f"http://user:{SECRET}@127.0.0.1:9")
    with pytest.raises(ConfigurationError) as refused:
        load_identity_settings()
    assert variable in str(refused.value)
    assert SECRET not in str(refused.value)


def test_a_sign_in_issuer_with_a_password_is_refused_never_saying_the_secret() -> None:
    with pytest.raises(ConfigurationError) as refused:
        PeopleSignIn.from_settings(
            {
                "ASKBACK_SIGNIN_ISSUER": f"https://user:{SECRET}@issuer.example.com",
                "ASKBACK_SIGNIN_CLIENT_ID": "pages",
                "ASKBACK_SIGNIN_CLIENT_SECRET": "pages-secret",
                "ASKBACK_SESSION_SECRET": secrets.token_urlsafe(32),
                "ASKBACK_PUBLIC_URL": "https://tools.example.com",
            }
        )
    assert "ASKBACK_SIGNIN_ISSUER" in str(refused.value) and SECRET not in str(refused.value)
    with pytest.raises(ConfigurationError):
        PeopleSignIn(
            issuer=f"https://user:{SECRET}@issuer.example.com",
            client_id="pages",
            client_secret=SecretStr("pages-secret"),
            base_url="https://tools.example.com",
            session_secret=secrets.token_bytes(32),
        )
