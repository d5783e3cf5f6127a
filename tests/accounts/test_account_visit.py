"""Two clocks for an authorization link: its own lifetime until it is opened (`ASKBACK_LINK_TTL`), then the time the
person has to sign in at the provider, or enter their key, and come back (`ASKBACK_PROVIDER_VISIT_TTL`).

Someone slow at the provider's sign-in or MFA must not fail at the very end because the link's short lifetime ran
out meanwhile; someone who never comes back must still fail, clearly, and nothing is connected. The clock is frozen
and moved by the test, so the visit "takes" as long as it says at once.

Real parts: the pages on a loopback socket (uvicorn), oidc-provider as the provider, Debian's Chromium through
Playwright, a SQLite file.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from _accounts_site import LINK_TTL, VISIT_TTL, Site, consent_and_hold_the_callback, main_text, new_person
from askback import Askback, ConfigurationError, load_settings
from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.setup import enable_accounts
from askback.accounts.status import Status
from askback.accounts.vault import Vault, new_key

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

pytestmark = [pytest.mark.anyio, pytest.mark.http]


async def test_a_provider_visit_longer_than_the_link_lifetime_but_within_the_visit_time_connects(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    callback = await consent_and_hold_the_callback(page, site, link)

    site.clock.advance(LINK_TTL + 300)  # a slow sign-in with MFA at the provider
    back = await page.goto(callback)

    assert back is not None and back.status == 200
    assert await page.title() == "Connected: return to your assistant"
    status, sealed = await site.account(account)
    assert status is Status.ACTIVE and sealed is not None


async def test_coming_back_after_the_visit_time_fails_clearly_and_connects_nothing(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    callback = await consent_and_hold_the_callback(page, site, link)

    site.clock.advance(VISIT_TTL)
    late = await page.goto(callback)

    assert late is not None and late.status == 400
    said = await main_text(page)
    assert "This sign-in has expired: the time allowed to sign in at the provider and come back ran out" in said
    assert "Nothing was connected. Ask your assistant again for a new link, and start again from it." in said
    assert await site.account(account) == (Status.PENDING, None)


async def let_the_browser_clock_run(context: BrowserContext, seconds: float) -> None:
    """What `seconds` passing does to a browser's cookies: each one whose lifetime ends by then is gone (the site's
    clock is frozen and moved by the test; the browser's cookies live by the real one)."""
    kept = [c for c in await context.cookies() if c["expires"] == -1 or c["expires"] > time.time() + seconds]
    await context.clear_cookies()
    await context.add_cookies(kept)  # type: ignore[arg-type]


async def test_a_callback_after_the_visit_time_says_the_sign_in_expired_and_one_without_the_cookie_not_started_here(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    context, page = await new_person(browser, site, "alice")
    other_context, other = await new_person(browser, site, "alice")
    contexts.extend([context, other_context])
    callback = await consent_and_hold_the_callback(page, site, link)

    site.clock.advance(VISIT_TTL + 60)
    await let_the_browser_clock_run(context, VISIT_TTL + 60)
    elsewhere = await other.goto(callback)
    late = await page.goto(callback)

    assert elsewhere is not None and elsewhere.status == 403
    assert "This sign-in was not started in this browser" in await main_text(other)
    assert late is not None and late.status == 400
    said = await main_text(page)
    assert "This sign-in has expired" in said and "not started in this browser" not in said
    assert "Ask your assistant again for a new link, and start again from it." in said
    assert await site.account(account) == (Status.PENDING, None)


async def test_the_key_form_has_the_visit_time_too(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    slow_link, slow = await site.link("alice", "notes")
    late_link, late = await site.link("alice", "notes")
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    second = await context.new_page()
    await page.goto(slow_link)
    await second.goto(late_link)

    site.clock.advance(LINK_TTL + 1)
    await page.get_by_label("Notes API key").fill("nk-" + secrets.token_hex(8))
    await page.get_by_role("button", name="Connect").click()
    assert (await page.locator("h1").inner_text()) == "Connected"
    assert (await site.account(slow))[0] is Status.ACTIVE

    site.clock.advance(VISIT_TTL)
    await second.get_by_label("Notes API key").fill("nk-" + secrets.token_hex(8))
    await second.get_by_role("button", name="Connect").click()
    assert "ran out" in await main_text(second)
    assert await site.account(late) == (Status.PENDING, None)


async def test_a_link_not_opened_within_its_own_lifetime_still_expires(
    site: Site, browser: Browser, contexts: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    site.clock.advance(LINK_TTL)
    context, page = await new_person(browser, site, "alice")
    contexts.append(context)
    refused = await page.goto(link)
    assert refused is not None and refused.status == 400
    assert "This link has expired. Nothing was changed." in await main_text(page)
    assert await site.account(account) == (Status.PENDING, None)


# --- configuration --------------------------------------------------------------------------------------------------


def test_both_lifetimes_are_settings_with_generous_visit_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASKBACK_LINK_TTL", raising=False)
    monkeypatch.delenv("ASKBACK_PROVIDER_VISIT_TTL", raising=False)
    defaults = load_settings()
    assert (defaults.link_ttl, defaults.provider_visit_ttl) == (600.0, 1800.0)
    monkeypatch.setenv("ASKBACK_PROVIDER_VISIT_TTL", "3600")
    assert load_settings().provider_visit_ttl == 3600.0
    monkeypatch.setenv("ASKBACK_PROVIDER_VISIT_TTL", "0")
    with pytest.raises(ConfigurationError, match="ASKBACK_PROVIDER_VISIT_TTL"):
        load_settings()


async def test_enable_accounts_gives_the_service_both_lifetimes_from_the_settings(tmp_path: Path) -> None:
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'askback.db'}",
        state_keys=secrets.token_urlsafe(32),
        link_ttl=120,
        provider_visit_ttl=2700,
    )
    app = Askback("notes", settings=settings)
    setup = enable_accounts(
        app,
        connections=Connections([ApiKeyConnection(name="notes")]),
        vault=Vault(new_key()),
        verifier=DevelopmentSignIn(secrets.token_bytes(32)),
        base_url="http://127.0.0.1:9",
    )
    async with app.running():
        service = await setup.service()
        assert (service.link_ttl, service.provider_visit_ttl) == (120, 2700)
