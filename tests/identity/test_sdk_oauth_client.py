"""The official SDK client's OAuth support against `askback serve --auth-issuer ...`, end to end: it is refused with
401, finds oidc-provider through the protected resource metadata, registers itself (RFC 7591), sends a person to
the provider's login page in real Chromium, exchanges the code (PKCE S256, RFC 8707 resource), and then completes a
flow that asks a question; the audit trail names the person who signed in."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from pydantic import AnyUrl

from _accounts_site import Callback
from _http import audit
from askback.core.capabilities import MRTR_REVISION
from askback.testing import accept, answering, free_port, serving, text
from infra import ROOT, OidcProvider, async_browser_context, async_chromium, oidc_provider, serving_http

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SERVER = "tests.fixtures.identity_server:server"
SCOPES = ["openid", "offline_access", "read", "write", "deploy"]
PERSON = "grace"


class MemoryStorage:
    """The SDK's `TokenStorage`, in memory: what the client registered and the tokens it holds."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@dataclass(frozen=True)
class Site:
    provider: OidcProvider
    url: str
    database_url: str


@pytest.fixture
def callback() -> Iterator[Callback]:
    served = Callback()
    with serving_http(served.server):
        yield served


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    port = free_port()
    audience = f"http://127.0.0.1:{port}/mcp"
    database_url = f"sqlite:///{tmp_path / 'server.db'}"
    # The provider's own client is not the one the SDK uses: the SDK registers one of its own.
    with oidc_provider(
        ["http://127.0.0.1:9/callback"],
        resources={audience: {"scope": "read deploy"}},
        registration=True,
        scopes=SCOPES,
    ) as provider:
        env = {
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
            "ASKBACK_DATABASE_URL": database_url,
            "ASKBACK_AUTH_ISSUER": provider.issuer,
            "ASKBACK_AUTH_AUDIENCE": audience,
            "ASKBACK_AUTH_SCOPES_SUPPORTED": "read,deploy",
        }
        with serving(SERVER, port=port, workers=1, env=env, cwd=str(ROOT)) as url:
            yield Site(provider=provider, url=url, database_url=database_url)


async def test_the_sdk_client_signs_in_through_the_metadata_and_chromium_and_completes_a_flow_as_that_person(
    site: Site, callback: Callback
) -> None:
    seen: list[tuple[str, str, int]] = []

    async def record(response: httpx2.Response) -> None:
        seen.append((response.request.method, str(response.request.url).split("?")[0], response.status_code))

    storage = MemoryStorage()
    async with async_chromium() as browser:
        context = await async_browser_context(browser)

        async def sign_in(authorization_url: str) -> None:
            page = await context.new_page()
            await page.goto(authorization_url)
            assert await page.locator("h1").inner_text() == "Sign-in"
            await page.fill("input[name=login]", PERSON)
            await page.fill("input[name=password]", "anything")
            await page.click("button[type=submit]")
            await page.locator("h1", has_text="Authorize").wait_for()
            await page.get_by_role("button", name="Continue").click()
            await page.wait_for_url(lambda u: u.startswith(f"{callback.uri}?"))

        async def landed() -> AuthorizationCodeResult:
            [url] = callback.received
            query = parse_qs(urlsplit(url).query)
            assert "error" not in query, query
            return AuthorizationCodeResult(
                code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
            )

        oauth = OAuthClientProvider(
            server_url=site.url,
            client_metadata=OAuthClientMetadata(
                client_name="askback identity test",
                redirect_uris=[AnyUrl(callback.uri)],
                grant_types=["authorization_code", "refresh_token"],
                response_types=["code"],
            ),
            storage=storage,
            redirect_handler=sign_in,
            callback_handler=landed,
        )
        async with httpx2.AsyncClient(auth=oauth, timeout=30, event_hooks={"response": [record]}) as http:
            transport = streamable_http_client(site.url, http_client=http)
            async with Client(
                transport, mode=MRTR_REVISION, elicitation_callback=answering(ok=accept(ok=True))
            ) as client:
                result = await client.call_tool("greet", {})

    assert text(result) == f"hello {PERSON}"
    base = site.url.removesuffix("/mcp")
    assert ("POST", site.url, 401) in seen
    assert ("GET", f"{base}/.well-known/oauth-protected-resource/mcp", 200) in seen
    assert ("POST", f"{site.provider.issuer}/reg", 201) in seen
    assert storage.client_info is not None and storage.client_info.client_id != site.provider.client_id
    assert len(callback.received) == 1

    events = await audit(site.database_url, tool="greet")
    answered = [e for e in events if e.event == "answered"]
    assert answered and {e.principal for e in answered} == {PERSON}
