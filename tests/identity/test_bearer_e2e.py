"""`askback serve --auth-issuer ... --auth-audience ...` as an OAuth 2.1 resource server, end to end: real server
processes, oidc-provider (`tests/infra.py`) as the issuer issuing RFC 9068 JWT access tokens, raw 2026-07-28
JSON-RPC over HTTP.

Tokens come from the client_credentials grant, whose `sub` oidc-provider sets to the client's id (`askback-test`);
the tokens a test forges are signed with the provider's own private key (the test generated it), so only the claim
or header under test is wrong.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from joserfc import jws, jwt
from joserfc.jwk import RSAKey
from mcp_types import ElicitResult

from _http import RawReply, audit
from askback.audit import AuditEvent
from askback.testing import free_port, serving
from infra import ROOT, OidcProvider, oidc_provider, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SERVER = "tests.fixtures.identity_server:server"
SCOPES = ["openid", "offline_access", "read", "write", "deploy"]
UNUSED_REDIRECT = "http://127.0.0.1:9/callback"  # the client_credentials client must still name one
OTHER_RESOURCE = "http://127.0.0.1:9/mcp"
SUBJECT = "askback-test"  # oidc-provider's `sub` for a client_credentials token: the client's id
SECOND_CLIENT = {
    "client_id": "second-client",
    "client_secret": "second-client-secret",
    "redirect_uris": [UNUSED_REDIRECT],
    "grant_types": ["client_credentials"],
    "response_types": [],
    "token_endpoint_auth_method": "client_secret_basic",
}


def signing_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid, "use": "sig", "alg": "RS256"}, private=True)


def jwks_of(*keys: RSAKey) -> dict[str, Any]:
    return {"keys": [key.as_dict(private=True) for key in keys]}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64json(value: dict[str, Any]) -> str:
    return b64(json.dumps(value).encode())


@dataclass(frozen=True)
class Site:
    """An issuer, a second one whose client has the same id (so its tokens name the same `sub`), and `askback serve`
    trusting the first."""

    provider: OidcProvider
    key: RSAKey
    other: OidcProvider
    url: str
    database_url: str

    @property
    def audience(self) -> str:
        return self.url

    @property
    def base(self) -> str:
        return self.url.removesuffix("/mcp")

    @property
    def metadata_url(self) -> str:
        return f"{self.base}/.well-known/oauth-protected-resource/mcp"

    def token(self, scope: str = "read") -> str:
        return self.provider.client_credentials_token(self.audience, scope)

    def second_client_token(self) -> str:
        """A token of the same issuer for the same audience naming another principal (`second-client`)."""
        response = httpx.post(
            self.provider.token_endpoint,
            data={"grant_type": "client_credentials", "resource": self.audience, "scope": "read"},
            auth=(SECOND_CLIENT["client_id"], SECOND_CLIENT["client_secret"]),
            timeout=10,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token

    def claims(self, **overrides: Any) -> dict[str, Any]:
        """The claims of a valid token for this site, with `overrides` (a value of None drops the claim)."""
        now = int(time.time())
        claims: dict[str, Any] = {
            "iss": self.provider.issuer,
            "sub": SUBJECT,
            "aud": self.audience,
            "client_id": SUBJECT,
            "scope": "read",
            "iat": now,
            "exp": now + 300,
            "jti": secrets.token_urlsafe(16),
        }
        claims.update(overrides)
        return {k: v for k, v in claims.items() if v is not None}

    def forge(
        self, key: RSAKey | None = None, *, kid: str | None = None, typ: str | None = "at+jwt", **overrides: Any
    ) -> str:
        """A token signed RS256 (with the provider's key unless another is given, its header naming `kid` or the
        key's, and `typ` unless it is None) over `claims(**overrides)`."""
        key = key or self.key
        if typ is None:
            # joserfc's jwt.encode writes typ JWT when none is given: sign the claims as they are instead.
            header = {"alg": "RS256", "kid": kid or key.kid}
            return jws.serialize_compact(header, json.dumps(self.claims(**overrides)).encode(), key)
        header = {"alg": "RS256", "typ": typ, "kid": kid or key.kid}
        return jwt.encode(header, self.claims(**overrides), key, algorithms=["RS256"])


@contextlib.contextmanager
def site_for(tmp: Path, *, jwks_min_interval: float | None = None) -> Iterator[Site]:
    """A fresh `Site`: both issuers, then the server (which reads the first one's discovery document)."""
    port = free_port()
    audience = f"http://127.0.0.1:{port}/mcp"
    resources = {audience: {"scope": "read deploy"}, OTHER_RESOURCE: {"scope": "read deploy"}}
    key = signing_key("first-1")
    database_url = f"sqlite:///{tmp / 'server.db'}"
    with (
        oidc_provider(
            [UNUSED_REDIRECT],
            resources=resources,
            client_credentials=True,
            jwks=jwks_of(key),
            scopes=SCOPES,
            extra_clients=[SECOND_CLIENT],
        ) as provider,
        oidc_provider(
            [UNUSED_REDIRECT],
            resources=resources,
            client_credentials=True,
            jwks=jwks_of(signing_key("second-1")),
            scopes=SCOPES,
        ) as other,
    ):
        env = {
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
            "ASKBACK_DATABASE_URL": database_url,
            "ASKBACK_AUTH_ISSUER": provider.issuer,
            "ASKBACK_AUTH_AUDIENCE": audience,
            "ASKBACK_AUTH_SCOPES_SUPPORTED": "read,deploy",
        }
        if jwks_min_interval is not None:
            env["ASKBACK_AUTH_JWKS_MIN_INTERVAL"] = str(jwks_min_interval)
        with serving(SERVER, port=port, workers=1, env=env, cwd=str(ROOT)) as url:
            assert url == audience
            yield Site(provider=provider, key=key, other=other, url=url, database_url=database_url)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with site_for(tmp_path_factory.mktemp("identity")) as started:
        yield started


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=30) as client:
        yield client


def challenge(response: httpx.Response) -> dict[str, str]:
    """The parameters of the response's `WWW-Authenticate: Bearer k="v", ...` header."""
    value = response.headers["www-authenticate"]
    scheme, _, rest = value.partition(" ")
    assert scheme == "Bearer", value
    return dict(re.findall(r'([a-z_]+)="([^"]*)"', rest))


def tools_call(
    tool: str,
    token: str | None,
    *,
    responses: dict[str, ElicitResult] | None = None,
    request_state: str | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The body and headers of a 2026-07-28 `tools/call` built by hand; `token=None` sends no Authorization."""
    params: dict[str, Any] = {
        "name": tool,
        "arguments": {},
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
        },
    }
    if responses is not None:
        params["inputResponses"] = {k: v.model_dump(mode="json", exclude_none=True) for k, v in responses.items()}
    if request_state is not None:
        params["requestState"] = request_state
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, headers


async def call(
    http: httpx.AsyncClient,
    site: Site,
    tool: str,
    token: str | None,
    *,
    responses: dict[str, ElicitResult] | None = None,
    request_state: str | None = None,
) -> httpx.Response:
    body, headers = tools_call(tool, token, responses=responses, request_state=request_state)
    return await http.post(site.url, json=body, headers=headers)


def message(response: httpx.Response) -> dict[str, Any]:
    return RawReply(response.status_code, None, response.content).message()


async def flow_events(site: Site) -> list[AuditEvent]:
    return [e for e in await audit(site.database_url, tool="greet") if e.event in ("asked", "answered", "completed")]


async def test_a_provider_token_for_the_audience_runs_a_round_trip_and_the_audit_names_its_subject(
    site: Site, http: httpx.AsyncClient
) -> None:
    token = site.token()
    first = await call(http, site, "greet", token)
    assert first.status_code == 200, first.text
    result = message(first)["result"]
    assert result["resultType"] == "input_required", result
    [key] = result["inputRequests"]

    done = await call(
        http,
        site,
        "greet",
        token,
        responses={key: ElicitResult(action="accept", content={"ok": True})},
        request_state=result["requestState"],
    )
    assert done.status_code == 200, done.text
    assert message(done)["result"]["content"][0]["text"] == f"hello {SUBJECT}"

    events = await flow_events(site)
    [answered] = [e for e in events if e.event == "answered" and e.flow_id == events[-1].flow_id]
    assert (answered.principal, answered.scopes) == (SUBJECT, ("read",))
    assert {e.principal for e in events if e.flow_id == answered.flow_id} == {SUBJECT}


async def test_a_round_sealed_for_one_principal_is_refused_to_another_token_of_the_same_issuer(
    site: Site, http: httpx.AsyncClient
) -> None:
    first = await call(http, site, "greet", site.token())
    result = message(first)["result"]
    [key] = result["inputRequests"]
    before = await flow_events(site)

    stolen = await call(
        http,
        site,
        "greet",
        site.second_client_token(),
        responses={key: ElicitResult(action="accept", content={"ok": True})},
        request_state=result["requestState"],
    )
    assert stolen.status_code == 400, stolen.text
    assert message(stolen)["error"]["data"]["reason"] == "invalid_request_state"
    assert [e for e in await flow_events(site) if e.event != "asked"] == [e for e in before if e.event != "asked"]


async def test_a_request_without_a_token_gets_401_naming_the_metadata_and_no_error(
    site: Site, http: httpx.AsyncClient
) -> None:
    refused = await call(http, site, "greet", None)
    assert refused.status_code == 401
    assert challenge(refused) == {"resource_metadata": site.metadata_url}


# Each builds a token that must be refused, from the site (and the issuers it knows).
BAD_TOKENS: dict[str, Callable[[Site], str]] = {
    "expired": lambda s: s.forge(iat=int(time.time()) - 900, exp=int(time.time()) - 600),
    "not yet valid": lambda s: s.forge(nbf=int(time.time()) + 600, exp=int(time.time()) + 900),
    "for another audience": lambda s: s.provider.client_credentials_token(OTHER_RESOURCE, "read"),
    "from another issuer's name": lambda s: s.forge(iss="http://127.0.0.1:9"),
    "with a bad signature": lambda s: tampered(s.token(), sub="someone-else"),
    "with alg none": lambda s: ".".join(
        [b64json({"alg": "none", "typ": "at+jwt", "kid": s.key.kid}), b64json(s.claims()), ""]
    ),
    "signed HS256 with the public key": lambda s: hmac_signed(s),
    "naming an unknown kid": lambda s: s.forge(signing_key("unknown-1")),
    "of a second issuer with the same sub": lambda s: s.other.client_credentials_token(s.audience, "read"),
    "an ID token without typ (nonce)": lambda s: s.forge(typ=None, nonce="n-0S6_WzA2Mj"),
    "an ID token without typ (at_hash)": lambda s: s.forge(typ=None, at_hash="77QmUPtjPfzWtF2AnpK9RQ"),
    "an ID token without typ (auth_time, aud is azp)": lambda s: s.forge(
        typ=None, aud=s.audience, azp=s.audience, auth_time=int(time.time())
    ),
    "naming a principal with ESC (OSC 52)": lambda s: s.forge(sub="alice\x1b]52;c;ZWNobyBwd25lZA==\x07"),
    "naming a principal with a newline": lambda s: s.forge(sub="alice\nadmin  completed"),
    "naming a principal with U+202E": lambda s: s.forge(sub="alice\u202egpj.exe"),
    "naming a principal of 10 KB": lambda s: s.forge(sub="a" * 10_240),
}


def tampered(token: str, **overrides: Any) -> str:
    """`token` with its claims changed and its header and signature kept."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return ".".join([header, b64json({**claims, **overrides}), signature])


def hmac_signed(site: Site) -> str:
    """The classic key-confusion token: HS256 keyed with the issuer's public key (its PEM, as a verifier that
    takes the header's `alg` would use it)."""
    public_pem = site.key.as_pem(private=False)
    signing_input = f"{b64json({'alg': 'HS256', 'typ': 'at+jwt', 'kid': site.key.kid})}.{b64json(site.claims())}"
    signature = hmac.new(public_pem, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


@pytest.mark.parametrize("kind", list(BAD_TOKENS))
async def test_a_bad_token_gets_401_invalid_token_and_never_reaches_the_handler(
    site: Site, http: httpx.AsyncClient, kind: str
) -> None:
    bad = BAD_TOKENS[kind](site)
    before = await flow_events(site)

    refused = await call(http, site, "greet", bad)
    assert refused.status_code == 401, refused.text
    params = challenge(refused)
    assert (params["error"], params["resource_metadata"]) == ("invalid_token", site.metadata_url)
    assert set(params) <= {"error", "error_description", "resource_metadata"}
    assert bad not in refused.text

    assert await flow_events(site) == before
    assert site.other.counters()["jwks"] == 0, "the second issuer was asked for its keys"


async def test_a_round_answered_with_a_bad_token_records_no_answer(site: Site, http: httpx.AsyncClient) -> None:
    first = await call(http, site, "greet", site.token())
    result = message(first)["result"]
    [key] = result["inputRequests"]
    before = await flow_events(site)
    assert before[-1].event == "asked"
    for kind in ("expired", "with alg none", "of a second issuer with the same sub"):
        refused = await call(
            http,
            site,
            "greet",
            BAD_TOKENS[kind](site),
            responses={key: ElicitResult(action="accept", content={"ok": True})},
            request_state=result["requestState"],
        )
        assert refused.status_code == 401, (kind, refused.text)
    assert await flow_events(site) == before


async def test_a_tool_needing_deploy_answers_403_insufficient_scope_without_it_and_runs_with_it(
    site: Site, http: httpx.AsyncClient
) -> None:
    refused = await call(http, site, "deploy", site.token("read"))
    assert refused.status_code == 403, refused.text
    params = challenge(refused)
    assert (params["error"], params["scope"]) == ("insufficient_scope", "deploy")
    assert params["resource_metadata"] == site.metadata_url

    ran = await call(http, site, "deploy", site.token("read deploy"))
    assert ran.status_code == 200, ran.text
    assert message(ran)["result"]["content"][0]["text"] == f"deployed {SUBJECT}"


async def test_two_authorization_headers_are_refused_with_400_whichever_comes_first(
    site: Site, http: httpx.AsyncClient
) -> None:
    body, headers = tools_call("greet", None)
    for pair in ([site.token(), "not-a-token"], ["not-a-token", site.token()], [site.token(), site.token()]):
        sent = [*headers.items(), *(("Authorization", f"Bearer {token}") for token in pair)]
        refused = await http.post(site.url, json=body, headers=sent)
        assert refused.status_code == 400, refused.text
        assert challenge(refused)["error"] == "invalid_request"
        assert all(token not in refused.text for token in pair)


async def test_a_scope_joined_by_a_no_break_space_grants_neither_of_its_parts(
    site: Site, http: httpx.AsyncClient
) -> None:
    # A scope holding another white space is not a name askback shows or stores: the whole token is refused.
    for scope in ("read extra\u00a0deploy", "read extra\tdeploy", "read extra\u2003deploy"):
        refused = await call(http, site, "deploy", site.forge(scope=scope))
        assert refused.status_code == 401, (scope, refused.text)
        assert challenge(refused)["error"] == "invalid_token"
    ran = await call(http, site, "deploy", site.forge(scope="read deploy"))
    assert ran.status_code == 200, ran.text


@pytest.mark.parametrize("path", ["/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"])
async def test_the_protected_resource_metadata_names_the_issuer_the_resource_and_the_scopes(
    site: Site, http: httpx.AsyncClient, path: str
) -> None:
    response = await http.get(f"{site.base}{path}")
    assert response.status_code == 200, response.text
    document = response.json()
    assert document["resource"] == site.audience
    assert document["authorization_servers"] == [site.provider.issuer]
    assert document["scopes_supported"] == ["read", "deploy"]
    assert document["bearer_methods_supported"] == ["header"]


async def test_after_the_issuer_rotates_its_key_new_tokens_are_accepted_after_one_refetch_and_old_ones_refused(
    tmp_path: Path, http: httpx.AsyncClient
) -> None:
    with site_for(tmp_path, jwks_min_interval=1) as site:
        old = site.token()
        assert (await call(http, site, "greet", old)).status_code == 200
        rotated = signing_key("first-2")
        site.provider.restart(jwks=jwks_of(rotated))  # the old kid is no longer published
        new = site.token()

        def accepted() -> bool:
            body, headers = tools_call("greet", new)
            reply = httpx.post(site.url, json=body, headers=headers, timeout=30)
            assert reply.status_code in (200, 401), reply.text
            return reply.status_code == 200

        wait_until(accepted, timeout=75, what="a token signed with the rotated key accepted")
        assert site.provider.counters()["jwks"] == 1
        refused = await call(http, site, "greet", old)
        assert refused.status_code == 401
        assert challenge(refused)["error"] == "invalid_token"


async def test_a_flood_of_tokens_naming_unknown_kids_costs_the_issuer_at_most_a_few_key_fetches(
    site: Site, http: httpx.AsyncClient
) -> None:
    assert (await call(http, site, "greet", site.token())).status_code == 200  # the keys are held
    site.provider.reset_counters()
    stranger = signing_key("flood")
    for _ in range(200):
        forged = site.forge(stranger, kid=f"flood-{secrets.token_hex(8)}")
        refused = await call(http, site, "greet", forged)
        assert refused.status_code == 401, refused.text
        assert challenge(refused)["error"] == "invalid_token"
    assert site.provider.counters()["jwks"] <= 3
