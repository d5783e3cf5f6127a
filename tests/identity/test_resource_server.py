"""The OAuth 2.1 resource server of `/mcp`: which bearer tokens it accepts, which it refuses and why, how it treats
its issuer's keys (rotation, floods of unknown `kid`s, an issuer that is down), opaque tokens by introspection, the
protected resource metadata, and its settings. Against real issuers of the tests' own on loopback."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from _loopback_issuer import AUDIENCE, LoopbackIssuer, bound_socket, loopback_issuer, new_key, serving_in_thread
from starlette.applications import Starlette
from starlette.routing import Mount, Route

from askback import Askback, load_settings
from askback.clock import FrozenClock
from askback.errors import ConfigurationError, InvalidTokenError, IssuerUnavailableError
from askback.extension import Open
from askback.identity import ResourceServer, load_identity_settings
from askback.identity._jwt import verify_id_token
from askback.identity._keys import KeyCache

pytestmark = pytest.mark.anyio


@pytest.fixture
def other_issuer() -> Iterator[LoopbackIssuer]:
    with loopback_issuer() as running:
        yield running


@pytest.fixture
async def resource(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[ResourceServer]:
    server = ResourceServer(issuer=issuer.issuer, audience=AUDIENCE, clock=clock, scopes_supported=["notes"])
    try:
        yield server
    finally:
        await server.close()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged(header: dict[str, Any], claims: dict[str, Any], secret: bytes | None) -> str:
    """A token made the way an attacker would: `alg: none` (no signature), or HMAC keyed with `secret`."""
    signing_input = f"{_b64(json.dumps(header).encode())}.{_b64(json.dumps(claims).encode())}"
    signature = b"" if secret is None else hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{_b64(signature)}"


async def refused(resource: ResourceServer, token: str) -> str:
    """Why `resource` refuses `token`; the reason never includes the token."""
    with pytest.raises(InvalidTokenError) as raised:
        await resource.verify(token)
    assert token not in str(raised.value)
    return str(raised.value)


@pytest.mark.http
async def test_a_token_of_the_issuer_for_the_audience_names_its_caller(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    token = issuer.access_token(clock.now(), sub="alice", scope="openid notes deploy")
    caller = await resource.verify(token)
    assert caller.principal == "alice"
    assert caller.scopes == {"openid", "notes", "deploy"}
    assert caller.client_id == "the-client"
    assert caller.issuer == issuer.issuer
    assert caller.expires_at == int(clock.now() + 300)
    assert issuer.jwks_fetches == 1
    # A second token is checked with the cached keys.
    await resource.verify(issuer.access_token(clock.now(), sub="bob"))
    assert issuer.jwks_fetches == 1


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({"exp": -120}, "expired"),
        ({"nbf": 120}, "not yet valid"),
        ({"iat": 120}, "issued in the future"),
        ({"exp": None}, "no expiry"),
        ({"aud": "https://elsewhere.test/mcp"}, "another audience"),
        ({"aud": ["https://elsewhere.test/mcp", "account"]}, "another audience"),
        ({"sub": None}, "names no principal"),
    ],
)
@pytest.mark.http
async def test_a_token_whose_claims_do_not_hold_is_refused_with_a_reason(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock, overrides: dict[str, Any], reason: str
) -> None:
    now = clock.now()
    times = {name: now + value for name, value in overrides.items() if name in ("exp", "nbf", "iat") and value}
    claims = issuer.claims(now, **{**overrides, **times})
    assert reason in await refused(resource, issuer.sign(claims))


@pytest.mark.http
async def test_times_are_checked_with_the_leeway(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    now = clock.now()
    await resource.verify(issuer.sign(issuer.claims(now, exp=int(now - 30), nbf=int(now + 30), iat=int(now + 30))))
    await resource.verify(issuer.sign(issuer.claims(now, aud=["account", AUDIENCE])))


@pytest.mark.http
async def test_typ_must_be_an_access_token_type_where_present(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    claims = issuer.claims(clock.now())
    await resource.verify(issuer.sign(claims, typ="application/at+jwt"))
    assert "not an access token" in await refused(resource, issuer.sign(claims, typ="JWT"))
    lenient = ResourceServer(issuer=issuer.issuer, audience=AUDIENCE, clock=clock, accept_jwt_typ=True)
    try:
        await lenient.verify(issuer.sign(claims, typ="JWT"))
    finally:
        await lenient.close()


@pytest.mark.http
async def test_a_token_of_another_issuer_is_refused_without_contacting_that_issuer(
    resource: ResourceServer, issuer: LoopbackIssuer, other_issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    now = clock.now()
    await resource.verify(issuer.access_token(now, sub="alice"))
    # The same user at another issuer, in its own name...
    assert "another issuer" in await refused(resource, other_issuer.access_token(now, sub="alice"))
    # ...or claiming to be the trusted issuer, under its own key or under the trusted key's kid.
    posing = other_issuer.claims(now, sub="alice", iss=issuer.issuer)
    assert "unknown signing key" in await refused(resource, other_issuer.sign(posing))
    under_trusted_kid = other_issuer.sign(posing, kid=issuer.signing.kid)
    assert "signature is not valid" in await refused(resource, under_trusted_kid)
    assert other_issuer.requests == 0


@pytest.mark.http
async def test_a_token_with_a_bad_signature_is_refused(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    now = clock.now()
    alice, bob = issuer.access_token(now, sub="alice"), issuer.access_token(now, sub="bob")
    # Alice's header and claims under the signature of Bob's token.
    spliced = alice.rsplit(".", 1)[0] + "." + bob.rsplit(".", 1)[1]
    assert "signature is not valid" in await refused(resource, spliced)


@pytest.mark.http
async def test_alg_none_and_hmac_keyed_with_the_public_key_are_refused_before_any_key_is_used(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    claims = issuer.claims(clock.now())
    kid = issuer.signing.kid
    unsigned = forged({"alg": "none", "typ": "at+jwt", "kid": kid}, claims, None)
    public_pem = issuer.signing.as_pem(private=False)
    hmac_with_public_key = forged({"alg": "HS256", "typ": "at+jwt", "kid": kid}, claims, public_pem)
    for token in (unsigned, hmac_with_public_key, forged({"alg": "NONE"}, claims, None)):
        assert "signing algorithm is not accepted" in await refused(resource, token)
    assert issuer.requests == 0


@pytest.mark.http
async def test_an_unknown_kid_is_refused_after_one_refetch(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    now = clock.now()
    await resource.verify(issuer.access_token(now))
    clock.advance(31)
    stranger = new_key()
    assert "unknown signing key" in await refused(resource, issuer.sign(issuer.claims(clock.now()), key=stranger))
    assert issuer.jwks_fetches == 2


@pytest.mark.http
async def test_a_rotated_key_is_accepted_after_one_refetch_and_the_previous_works_while_published(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    await resource.verify(issuer.access_token(clock.now()))
    previous = issuer.rotate(keep_previous=True)
    clock.advance(31)
    await resource.verify(issuer.access_token(clock.now()))
    assert issuer.jwks_fetches == 2
    old_token = issuer.sign(issuer.claims(clock.now()), key=previous)
    await resource.verify(old_token)
    assert issuer.jwks_fetches == 2
    # Once the issuer stops publishing it, the next periodic refresh drops it.
    issuer.retire(previous)
    clock.advance(601)
    await resource.verify(issuer.access_token(clock.now()))
    assert issuer.jwks_fetches == 3
    assert "unknown signing key" in await refused(resource, issuer.sign(issuer.claims(clock.now()), key=previous))


@pytest.mark.http
async def test_a_flood_of_unknown_kids_costs_the_issuer_one_fetch_per_interval(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    await resource.verify(issuer.access_token(clock.now()))
    clock.advance(31)
    claims = issuer.claims(clock.now())
    tokens = [issuer.sign(claims, kid=secrets.token_hex(8)) for _ in range(200)]
    outcomes = await asyncio.gather(*(resource.verify(t) for t in tokens), return_exceptions=True)
    # Every one a refusal, none "unavailable": a refetch held back is no reason to call the issuer down.
    assert all(isinstance(o, InvalidTokenError) and "unknown signing key" in str(o) for o in outcomes)
    for token in tokens[:50]:
        await refused(resource, token)
    assert issuer.jwks_fetches == 2


@pytest.mark.http
async def test_an_unknown_kid_while_a_refetch_is_held_back_is_invalid_not_unavailable(
    resource: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    await resource.verify(issuer.access_token(clock.now()))
    previous = issuer.rotate()
    issuer.retire(previous)
    # Within the interval since the last fetch: the new key is not looked for yet, and that is a 401.
    assert "unknown signing key" in await refused(resource, issuer.access_token(clock.now()))
    assert issuer.jwks_fetches == 1
    clock.advance(30)
    await resource.verify(issuer.access_token(clock.now()))
    assert issuer.jwks_fetches == 2


@pytest.mark.http
async def test_an_issuer_down_at_start_is_unavailable_until_it_is_up(
    clock: FrozenClock, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with loopback_issuer(up=False) as issuer:
        resource = ResourceServer(issuer=issuer.issuer, audience=AUDIENCE)
        app = Askback("identity-test", settings=load_settings(database_url=db_url), clock=clock, extensions=[resource])
        with caplog.at_level(logging.WARNING, logger="askback.identity"):
            async with app.running():
                assert any("cannot be reached" in r.getMessage() for r in caplog.records)
                token = issuer.access_token(clock.now())
                with pytest.raises(IssuerUnavailableError) as raised:
                    await resource.verify(token)
                assert raised.value.retry_after >= 1 and token not in str(raised.value)
                # A token that can be refused without the issuer is refused, not answered "unavailable".
                await refused(resource, forged({"alg": "none"}, issuer.claims(clock.now()), None))
                with issuer.up():
                    clock.advance(31)
                    caller = await resource.verify(issuer.access_token(clock.now()))
                    assert caller.principal == "alice"
    assert not any(token in r.getMessage() for r in caplog.records)


async def test_keys_that_cannot_be_fetched_make_the_issuer_unavailable(clock: FrozenClock) -> None:
    sock = bound_socket()
    try:
        async with httpx.AsyncClient() as http:
            keys = KeyCache(http, f"http://127.0.0.1:{sock.getsockname()[1]}/jwks", clock=clock)
            with pytest.raises(IssuerUnavailableError):
                await keys.key_for("any")
            # Held back for the interval: still unavailable, without another try.
            with pytest.raises(IssuerUnavailableError):
                await keys.key_for("any")
            assert keys.fetches == 1
    finally:
        sock.close()


@pytest.mark.http
async def test_an_issuer_whose_metadata_names_another_issuer_is_refused(
    issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    # The same server, configured under a name it does not use for itself.
    alias = issuer.issuer.replace("127.0.0.1", "localhost")
    resource = ResourceServer(issuer=alias, audience=AUDIENCE, clock=clock)
    try:
        with pytest.raises(IssuerUnavailableError, match="names another issuer"):
            await resource.verify(issuer.access_token(clock.now(), iss=alias))
    finally:
        await resource.close()


# Opaque tokens.


@pytest.fixture
async def introspecting(issuer: LoopbackIssuer, clock: FrozenClock) -> AsyncIterator[ResourceServer]:
    server = ResourceServer(
        issuer=issuer.issuer,
        audience=AUDIENCE,
        clock=clock,
        client_id=issuer.client_id,
        client_secret=issuer.client_secret,
    )
    try:
        yield server
    finally:
        await server.close()


def _answer(issuer: LoopbackIssuer, now: float, **overrides: Any) -> dict[str, Any]:
    return {"active": True, **issuer.claims(now, **overrides)}


@pytest.mark.http
async def test_an_opaque_token_is_accepted_through_introspection_and_cached_until_its_exp(
    introspecting: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    token = secrets.token_urlsafe(32)
    issuer.introspection[token] = _answer(issuer, clock.now(), ttl=20, sub="carol")
    caller = await introspecting.verify(token)
    assert (caller.principal, caller.scopes) == ("carol", {"openid", "notes"})
    await introspecting.verify(token)
    assert issuer.introspections == 1
    # Past the token's exp the cached answer is gone: the issuer is asked again, and the token has expired.
    clock.advance(21)
    assert "expired" in await refused(introspecting, token)
    assert issuer.introspections == 2


@pytest.mark.http
async def test_an_introspected_answer_is_kept_at_most_a_minute(
    introspecting: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    token = secrets.token_urlsafe(32)
    issuer.introspection[token] = _answer(issuer, clock.now(), ttl=3600)
    await introspecting.verify(token)
    clock.advance(59)
    await introspecting.verify(token)
    assert issuer.introspections == 1
    # Revoked meanwhile: seen once the minute is over.
    issuer.introspection[token] = {"active": False}
    clock.advance(2)
    assert "not active" in await refused(introspecting, token)


@pytest.mark.http
async def test_an_inactive_or_foreign_opaque_token_is_refused(
    introspecting: ResourceServer, issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    unknown = secrets.token_urlsafe(32)
    assert "not active" in await refused(introspecting, unknown)
    elsewhere = secrets.token_urlsafe(32)
    issuer.introspection[elsewhere] = _answer(issuer, clock.now(), aud="https://elsewhere.test/mcp")
    assert "another audience" in await refused(introspecting, elsewhere)
    foreign = secrets.token_urlsafe(32)
    issuer.introspection[foreign] = _answer(issuer, clock.now(), iss="https://other.test")
    assert "another issuer" in await refused(introspecting, foreign)


@pytest.mark.http
async def test_introspection_that_refuses_askbacks_credentials_is_unavailable_not_a_refusal(
    issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    server = ResourceServer(
        issuer=issuer.issuer,
        audience=AUDIENCE,
        clock=clock,
        introspection_url=f"{issuer.issuer}/introspect",
        client_id=issuer.client_id,
        client_secret="not-the-secret",
    )
    try:
        with pytest.raises(IssuerUnavailableError, match="ASKBACK_AUTH_CLIENT_SECRET"):
            await server.verify(secrets.token_urlsafe(32))
    finally:
        await server.close()


@pytest.mark.http
async def test_an_opaque_token_without_introspection_is_refused(resource: ResourceServer) -> None:
    assert "not a JWT access token" in await refused(resource, secrets.token_urlsafe(32))


# The protected resource metadata.


def _metadata_of(resource: ResourceServer, app: Any, path: str) -> tuple[str, httpx.Response]:
    sock = bound_socket()
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        with serving_in_thread(app, sock):
            return base, httpx.get(base + path)
    finally:
        sock.close()


def _expected(base: str, issuer: LoopbackIssuer) -> dict[str, Any]:
    return {
        "resource": f"{base}/mcp",
        "authorization_servers": [issuer.issuer],
        "scopes_supported": ["notes", "deploy"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Notes",
    }


@pytest.mark.http
def test_the_served_app_names_the_issuer_resource_and_scopes_at_the_mcp_suffixed_metadata_path(
    issuer: LoopbackIssuer, db_url: str
) -> None:
    from askback.server.http import build_app

    resource = ResourceServer(
        issuer=issuer.issuer, audience=AUDIENCE, scopes_supported=["notes", "deploy"], resource_name="Notes"
    )
    app = Askback("notes", settings=load_settings(database_url=db_url), extensions=[resource])
    base, response = _metadata_of(resource, build_app(app), "/.well-known/oauth-protected-resource/mcp")
    assert response.status_code == 200
    # Nothing configured names the resource: the address served does, and nothing may cache it.
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == _expected(base, issuer)
    assert resource.metadata_url_for(base + "/mcp") == f"{base}/.well-known/oauth-protected-resource/mcp"
    assert resource.resource_metadata_url is None


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"])
@pytest.mark.http
def test_the_metadata_mount_answers_at_its_root_and_at_the_mcp_suffix(path: str, issuer: LoopbackIssuer) -> None:
    resource = ResourceServer(
        issuer=issuer.issuer, audience=AUDIENCE, scopes_supported=["notes", "deploy"], resource_name="Notes"
    )
    [mounted] = resource.mounts
    assert isinstance(mounted.auth, Open)
    # Reached at the mount's own path (a route) and below it (a mount), as a host app serves it.
    app = Starlette(routes=[Route(mounted.path, mounted.app), Mount(mounted.path, app=mounted.app)])
    base, response = _metadata_of(resource, app, path)
    assert response.status_code == 200
    assert response.json() == _expected(base, issuer)
    _, elsewhere = _metadata_of(resource, app, mounted.path + "/other")
    assert elsewhere.status_code == 404


@pytest.mark.http
def test_a_configured_resource_is_named_in_the_metadata_and_its_url(issuer: LoopbackIssuer) -> None:
    resource = ResourceServer(issuer=issuer.issuer, resource="https://askback.example.com/mcp")
    assert resource.audience == "https://askback.example.com/mcp"
    assert resource.resource_metadata_url == "https://askback.example.com/.well-known/oauth-protected-resource/mcp"
    assert resource.metadata("http://127.0.0.1:1")["resource"] == "https://askback.example.com/mcp"
    assert resource.describe() == (
        f"OAuth 2.1 resource server: JWT access tokens of {issuer.issuer} for audience "
        "https://askback.example.com/mcp (principal claim sub)"
    )


# Settings.


@pytest.mark.parametrize(
    ("environment", "variable"),
    [
        ({"ASKBACK_AUTH_ALGORITHMS": "RS256,none"}, "ASKBACK_AUTH_ALGORITHMS"),
        ({"ASKBACK_AUTH_ALGORITHMS": "HS256"}, "ASKBACK_AUTH_ALGORITHMS"),
        ({"ASKBACK_AUTH_ISSUER": "http://login.example.com"}, "ASKBACK_AUTH_ISSUER"),
        ({"ASKBACK_AUTH_LEEWAY": "301"}, "ASKBACK_AUTH_LEEWAY"),
    ],
)
def test_settings_that_would_weaken_the_check_are_refused_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, environment: dict[str, str], variable: str
) -> None:
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError, match=variable):
        load_identity_settings()


def test_settings_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ASKBACK_AUTH_ISSUER", "https://login.example.com/realms/main")
    monkeypatch.setenv("ASKBACK_AUTH_AUDIENCE", "https://askback.example.com/mcp")
    monkeypatch.setenv("ASKBACK_AUTH_ALGORITHMS", "RS256, ES256")
    monkeypatch.setenv("ASKBACK_AUTH_SCOPES_SUPPORTED", "notes,deploy")
    monkeypatch.setenv("ASKBACK_AUTH_CLIENT_SECRET", "s3cr3t-value")
    settings = load_identity_settings()
    assert settings.algorithms == ("RS256", "ES256")
    assert settings.scopes_supported == ("notes", "deploy")
    server = ResourceServer.from_settings(settings)
    assert server.describe().startswith("OAuth 2.1 resource server: JWT access tokens of https://login.example.com")
    assert "s3cr3t" not in server.describe()


def test_a_resource_server_refuses_weak_or_incomplete_arguments() -> None:
    with pytest.raises(ConfigurationError, match="HS256"):
        ResourceServer(issuer="https://login.example.com", audience=AUDIENCE, algorithms=["RS256", "HS256"])
    with pytest.raises(ConfigurationError, match="issuer"):
        ResourceServer(issuer="http://login.example.com", audience=AUDIENCE)
    with pytest.raises(ConfigurationError, match="ASKBACK_AUTH_AUDIENCE"):
        ResourceServer(issuer="https://login.example.com")


# ID tokens, for the people sign-in.


@pytest.mark.http
async def test_an_id_token_is_checked_for_the_client_and_the_nonce(issuer: LoopbackIssuer, clock: FrozenClock) -> None:
    now = clock.now()
    claims = issuer.claims(now, aud="pages", nonce="n-1", azp=None, client_id=None, scope=None)
    token = issuer.sign(claims, typ="JWT")
    async with httpx.AsyncClient() as http:
        keys = KeyCache(http, f"{issuer.issuer}/jwks", clock=clock)
        common: dict[str, Any] = {"keys": keys, "issuer": issuer.issuer, "now": now}
        assert (await verify_id_token(token, client_id="pages", nonce="n-1", **common))["sub"] == "alice"
        with pytest.raises(InvalidTokenError, match="nonce"):
            await verify_id_token(token, client_id="pages", nonce="n-2", **common)
        with pytest.raises(InvalidTokenError, match="another client"):
            await verify_id_token(token, client_id="inbox", nonce="n-1", **common)
        several = issuer.sign({**claims, "aud": ["pages", "inbox"]})
        with pytest.raises(InvalidTokenError, match="azp"):
            await verify_id_token(several, client_id="pages", nonce="n-1", **common)
