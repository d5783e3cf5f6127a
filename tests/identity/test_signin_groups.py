"""The groups a person's sign-in gives them (`ASKBACK_SIGNIN_GROUPS_CLAIM`): read from the verified ID token, kept
with the session, and given back by `PeopleSignIn.person` until the session ends; odd names dropped, and counted in
the log without being written there.

The issuer is a small OpenID Connect issuer of the test's own, so that each test hands out the claims it needs
(tests/approvals/test_approvals_oidc_groups.py signs people in at oidc-provider, whose `accounts` carry groups): its
discovery document, its keys and a token endpoint that redeems the codes the test hands out for an ID token signed
with joserfc, reached in process through the sign-in's HTTP client. Everything of askback is
real: the sign-in's routes, the PKCE and nonce checks, the ID token's verification and the sessions in SQLite.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from _signin_site import AUTH, sign_in_started
from joserfc import jwt
from joserfc.jwk import RSAKey
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route

from askback.clock import FrozenClock
from askback.identity import PeopleSignIn, SignInSettings
from askback.identity._groups import MAX_GROUPS, claimed_groups
from askback.identity._signin_settings import VARIABLES
from askback.web.pages import PersonSignIn, SignedInPerson

pytestmark = [pytest.mark.anyio]

ISSUER = "http://127.0.0.1:9"
SITE = "http://127.0.0.1:8"
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class GroupsIssuer:
    """An issuer whose ID tokens carry the claims the test gives for each code (`code_for`)."""

    client_id: str = "askback"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    key: RSAKey = field(
        default_factory=lambda: RSAKey.generate_key(2048, parameters={"kid": "k1", "use": "sig", "alg": "RS256"})
    )
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)

    def code_for(self, nonce: str, **claims: Any) -> str:
        code = secrets.token_urlsafe(16)
        now = int(time.time())
        self.codes[code] = {
            "iss": ISSUER,
            "aud": self.client_id,
            "sub": "alice",
            "iat": now,
            "exp": now + 300,
            "nonce": nonce,
            **claims,
        }
        return code

    def app(self) -> Starlette:
        async def configuration(request: Request) -> Response:
            return JSONResponse(
                {
                    "issuer": ISSUER,
                    "authorization_endpoint": f"{ISSUER}/authorize",
                    "token_endpoint": f"{ISSUER}/token",
                    "jwks_uri": f"{ISSUER}/jwks",
                }
            )

        async def jwks(request: Request) -> Response:
            return JSONResponse({"keys": [self.key.as_dict(private=False)]})

        async def token(request: Request) -> Response:
            form = await request.form()
            claims = self.codes.pop(str(form.get("code")), None)
            if claims is None or not form.get("code_verifier"):
                return JSONResponse({"error": "invalid_grant"}, status_code=400)
            header = {"alg": "RS256", "kid": self.key.kid, "typ": "JWT"}
            return JSONResponse({"id_token": jwt.encode(header, claims, self.key), "token_type": "Bearer"})

        return Starlette(
            routes=[
                Route("/.well-known/openid-configuration", configuration),
                Route("/jwks", jwks),
                Route("/token", token, methods=["POST"]),
            ]
        )


@dataclass
class Site:
    issuer: GroupsIssuer
    sign_in: PeopleSignIn
    pages: httpx.AsyncClient
    clock: FrozenClock

    async def signed_in(self, **claims: Any) -> SignedInPerson | None:
        """Sign in through the sign-in's routes with an ID token carrying `claims`; who `person()` then says."""
        self.pages.cookies.clear()
        started = await self.pages.get(f"{AUTH}/sign-in", params={"next": "/approvals/"})
        assert started.status_code == 303
        asked = {k: v[0] for k, v in parse_qs(urlsplit(started.headers["location"]).query).items()}
        code = self.issuer.code_for(asked["nonce"], **claims)
        back = await self.pages.get(f"{AUTH}/callback", params={"code": code, "state": asked["state"]})
        assert back.status_code == 303, back.text
        assert back.headers["location"] == "/approvals/"
        return await self.person()

    async def person(self, cookie: str | None = None) -> SignedInPerson | None:
        """Who `person()` says a browser holding `cookie` (this client's when `None`) is."""
        cookie = cookie or self.pages.cookies.get(PeopleSignIn.COOKIE)
        scope = {"type": "http", "method": "GET", "path": "/", "headers": []}
        if cookie is not None:
            scope["headers"] = [(b"cookie", f"{PeopleSignIn.COOKIE}={cookie}".encode())]
        return await self.sign_in.person(Request(scope))


@pytest.fixture
async def site(tmp_path: Path) -> AsyncIterator[Site]:
    issuer = GroupsIssuer()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=issuer.app())) as to_issuer:
        clock = FrozenClock()
        sign_in = PeopleSignIn(
            issuer=ISSUER,
            client_id=issuer.client_id,
            client_secret=SecretStr(issuer.client_secret),
            base_url=SITE,
            session_secret=secrets.token_bytes(32),
            http=to_issuer,
            clock=clock,
        )
        async with sign_in_started(sign_in, tmp_path / "askback.db", session_ttl=600):
            served = Starlette(routes=[Mount(AUTH, app=sign_in.app)])
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=SITE) as pages:
                yield Site(issuer, sign_in, pages, clock)


async def test_the_id_tokens_groups_claim_lands_in_the_session_and_comes_back_from_person(site: Site) -> None:
    person = await site.signed_in(groups=["finance", "ops-leads"])
    assert isinstance(site.sign_in, PersonSignIn)
    assert person == SignedInPerson("alice", frozenset({"finance", "ops-leads"}), f"oidc {ISSUER}")


async def test_an_id_token_without_the_groups_claim_signs_the_person_in_with_no_group(site: Site) -> None:
    assert await site.signed_in() == SignedInPerson("alice", frozenset(), f"oidc {ISSUER}")


async def test_odd_group_names_are_dropped_and_only_their_count_is_logged(
    site: Site, caplog: pytest.LogCaptureFixture
) -> None:
    odd = ["fin\u202eance", "nul\x00", "line\nbreak", " padded", "", "x" * 256, 7, None, {"a": 1}]
    with caplog.at_level(logging.WARNING, logger="askback.identity"):
        person = await site.signed_in(groups=["finance", *odd, "finance"])
    assert person is not None and person.groups == frozenset({"finance"})
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert f"held {len(odd)} name(s) that were dropped" in logged
    assert "\u202e" not in logged and "nul" not in logged and "padded" not in logged


async def test_a_groups_claim_that_is_not_a_list_gives_no_group(site: Site) -> None:
    person = await site.signed_in(groups="finance")
    assert person is not None and person.groups == frozenset()


async def test_past_64_groups_the_rest_are_dropped() -> None:
    names = [f"g{i:03d}" for i in range(MAX_GROUPS + 6)]
    claimed = claimed_groups(names)
    assert len(claimed.groups) == MAX_GROUPS and claimed.dropped == 6
    assert claimed.groups == frozenset(names[:MAX_GROUPS])


async def test_the_groups_claim_is_the_one_the_settings_name(tmp_path: Path) -> None:
    issuer = GroupsIssuer()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=issuer.app())) as to_issuer:
        settings = SignInSettings.from_environ(
            {
                "ASKBACK_SIGNIN_ISSUER": ISSUER,
                "ASKBACK_SIGNIN_CLIENT_ID": issuer.client_id,
                "ASKBACK_SIGNIN_CLIENT_SECRET": issuer.client_secret,
                "ASKBACK_PUBLIC_URL": SITE,
                "ASKBACK_SESSION_SECRET": secrets.token_urlsafe(32),
                "ASKBACK_SIGNIN_GROUPS_CLAIM": "roles",
            }
        )
        sign_in = PeopleSignIn.of(settings, http=to_issuer, clock=FrozenClock())
        assert sign_in.groups_claim == "roles"
        async with sign_in_started(sign_in, tmp_path / "askback.db"):
            served = Starlette(routes=[Mount(AUTH, app=sign_in.app)])
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=SITE) as pages:
                person = await Site(issuer, sign_in, pages, FrozenClock()).signed_in(
                    roles=["approvers"], groups=["other"]
                )
    assert person is not None and person.groups == frozenset({"approvers"})


async def test_groups_end_with_the_session_at_sign_out(site: Site) -> None:
    assert await site.signed_in(groups=["finance"]) is not None
    copy = site.pages.cookies.get(PeopleSignIn.COOKIE)
    page = await site.pages.get(f"{AUTH}/sign-out")
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None
    ended = await site.pages.post(f"{AUTH}/sign-out", data={"csrf": token.group(1)})
    assert ended.status_code == 200
    assert site.pages.cookies.get(PeopleSignIn.COOKIE) is None
    # A copy of the cookie taken before signing out names nobody, groups and all.
    assert copy is not None and await site.person(copy) is None


async def test_groups_end_with_the_session_when_its_time_runs_out(site: Site) -> None:
    assert await site.signed_in(groups=["finance"]) is not None
    site.clock.advance(599)
    assert await site.person() is not None
    site.clock.advance(1)
    assert await site.person() is None


def test_every_sign_in_variable_is_in_the_auth_pages_settings_table() -> None:
    table = (DOCS / "auth.md").read_text(encoding="utf-8")
    missing = [variable for variable, _ in VARIABLES.values() if f"`{variable}`" not in table]
    assert not missing, f"sign-in variables docs/auth.md does not name: {missing}"
