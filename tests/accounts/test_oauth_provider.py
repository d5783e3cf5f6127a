"""The outside parts the connected-accounts tests run against, proven end to end: a real authorization server
(oidc-provider under Node 22, `tests/infra.py`'s `oidc_provider`), Debian's Chromium driven by Playwright clicking
through its login and consent pages, and Authlib's OAuth 2.0 client doing authorization code + PKCE S256, refresh
with rotation, and RFC 7009 revocation. The redirect lands on a small HTTP server of the test's own on loopback.

Each test gets a fresh provider (its state is in memory); the browser is shared by the module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
from authlib.common.security import generate_token
from authlib.integrations.httpx_client import AsyncOAuth2Client, OAuthError

from _accounts_site import Callback, consent_at_the_provider
from infra import OidcProvider, async_browser_context, oidc_provider

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = [pytest.mark.anyio, pytest.mark.http]

# oidc-provider keeps `offline_access` (and so issues a refresh token) only when consent is prompted for.
SCOPE = "openid offline_access"


@pytest.fixture
def provider(callback: Callback) -> Iterator[OidcProvider]:
    with oidc_provider(redirect_uris=[callback.uri], access_token_ttl=30) as started:
        yield started


@pytest.fixture
async def client(provider: OidcProvider, callback: Callback) -> AsyncIterator[AsyncOAuth2Client]:
    async with AsyncOAuth2Client(
        provider.client_id,
        provider.client_secret,
        scope=SCOPE,
        redirect_uri=callback.uri,
        code_challenge_method="S256",
        leeway=0,
        timeout=10,
    ) as oauth:
        yield oauth


async def connect(browser: Browser, provider: OidcProvider, client: AsyncOAuth2Client, callback: Callback) -> Any:
    """Authorization code + PKCE S256 as a person does it: open the authorization URL, sign in and consent on the
    provider's pages, land on the redirect URI; then exchange the code with the verifier."""
    verifier = generate_token(48)
    url, _state = client.create_authorization_url(
        provider.authorization_endpoint, code_verifier=verifier, prompt="consent"
    )
    context = await async_browser_context(browser)
    try:
        page = await context.new_page()
        await page.goto(url)
        await consent_at_the_provider(page, provider.issuer)
        await page.wait_for_url(lambda u: u.startswith(f"{callback.uri}?"))
        landed = page.url
    finally:
        await context.close()
    assert callback.received == [landed]
    return await client.fetch_token(provider.token_endpoint, authorization_response=landed, code_verifier=verifier)


async def test_discovery_names_the_authorization_token_and_revocation_endpoints_and_only_s256(
    provider: OidcProvider,
) -> None:
    async with httpx2.AsyncClient(timeout=5) as http:
        found = (await http.get(f"{provider.issuer}/.well-known/openid-configuration")).json()
    assert found["issuer"] == provider.issuer
    assert found["authorization_endpoint"] == f"{provider.issuer}/auth"
    assert found["token_endpoint"] == f"{provider.issuer}/token"
    assert found["revocation_endpoint"] == f"{provider.issuer}/token/revocation"
    assert found["code_challenge_methods_supported"] == ["S256"]
    assert {"authorization_code", "refresh_token"} <= set(found["grant_types_supported"])


async def test_an_authorization_request_without_pkce_is_sent_back_with_invalid_request(
    provider: OidcProvider, callback: Callback
) -> None:
    params = {"client_id": provider.client_id, "response_type": "code", "redirect_uri": callback.uri, "scope": SCOPE}
    async with httpx2.AsyncClient(timeout=5) as http:
        refused = await http.get(provider.authorization_endpoint, params=params)
    assert refused.status_code == 303
    location = httpx2.URL(refused.headers["location"])
    assert str(location.copy_with(query=None)) == callback.uri
    assert location.params["error"] == "invalid_request"
    assert "PKCE" in location.params["error_description"]


async def test_signing_in_and_consenting_in_a_browser_yields_an_access_and_a_refresh_token(
    browser: Browser, provider: OidcProvider, client: AsyncOAuth2Client, callback: Callback
) -> None:
    token = await connect(browser, provider, client, callback)

    assert token["token_type"].lower() == "bearer"
    assert token["access_token"]
    assert token["refresh_token"]
    assert token["expires_in"] == 30
    assert set(token["scope"].split()) == {"openid", "offline_access"}
    assert provider.counters() == {
        "token": {"authorization_code": 1, "refresh_token": 0},
        "revocation": 0,
        "refresh_token_reuse": 0,
    }


async def test_a_refresh_rotates_the_refresh_token_and_reusing_the_old_one_is_refused(
    browser: Browser, provider: OidcProvider, client: AsyncOAuth2Client, callback: Callback
) -> None:
    first = await connect(browser, provider, client, callback)

    second = await client.refresh_token(provider.token_endpoint, refresh_token=first["refresh_token"])
    assert second["access_token"] != first["access_token"]
    assert second["refresh_token"] != first["refresh_token"]
    assert provider.counters()["token"] == {"authorization_code": 1, "refresh_token": 1}

    with pytest.raises(OAuthError) as reused:
        await client.refresh_token(provider.token_endpoint, refresh_token=first["refresh_token"])
    assert reused.value.error == "invalid_grant"
    assert provider.counters()["refresh_token_reuse"] == 1
    # Reuse detection revokes the whole grant: the successor is dead too.
    with pytest.raises(OAuthError) as successor:
        await client.refresh_token(provider.token_endpoint, refresh_token=second["refresh_token"])
    assert successor.value.error == "invalid_grant"


async def test_a_revoked_refresh_token_can_no_longer_refresh(
    browser: Browser, provider: OidcProvider, client: AsyncOAuth2Client, callback: Callback
) -> None:
    first = await connect(browser, provider, client, callback)
    second = await client.refresh_token(provider.token_endpoint, refresh_token=first["refresh_token"])
    provider.reset_counters()

    revoked = await client.revoke_token(
        provider.revocation_endpoint, token=second["refresh_token"], token_type_hint="refresh_token"
    )
    assert revoked.status_code == 200

    with pytest.raises(OAuthError) as refused:
        await client.refresh_token(provider.token_endpoint, refresh_token=second["refresh_token"])
    assert refused.value.error == "invalid_grant"
    assert provider.counters() == {
        "token": {"authorization_code": 0, "refresh_token": 1},
        "revocation": 1,
        "refresh_token_reuse": 0,
    }
