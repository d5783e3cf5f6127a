"""People's sessions end when they should, for every copy of the cookie, on every instance: at sign-out, at the end
of `ASKBACK_SESSION_TTL`, and past `ASKBACK_SESSIONS_PER_PERSON` sessions of one person.

One real oidc-provider and one Chromium serve the module. The site (`_signin_site`: the sign-in and the account pages,
in process, with a frozen clock) has a second instance, `askback serve signin_pages_server:server` in a process of its
own, sharing its database and session secret. The web inbox is `askback inbox serve --auth-issuer ...` in a process of
its own, over a runtime whose call was parked against a real askback server.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import httpx
import pytest
import sqlalchemy as sa
from _signin_site import (
    AUTH,
    SignInSite,
    redirect_uris,
    serve_sign_in_site,
    sign_in_as,
    sign_in_started,
    signed_in_inbox,
)
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from pydantic import SecretStr
from sqlalchemy import Connection
from starlette.applications import Starlette
from starlette.routing import Mount

from askback.accounts.vault import new_key
from askback.clock import FrozenClock
from askback.identity import PeopleSignIn
from askback.identity._models import Base
from askback.identity.schema import MIGRATIONS
from askback.runtime import Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import FIXTURES, OidcProvider, async_browser_context, async_chromium, held_port, oidc_provider

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page

pytestmark = [pytest.mark.anyio]

COOKIE = PeopleSignIn.COOKIE
NOBODY = "Nobody is signed in in this browser."
SECOND_PORT = held_port()
SECOND = f"http://127.0.0.1:{SECOND_PORT}"
INBOX_PORT = held_port()
INBOX = f"http://127.0.0.1:{INBOX_PORT}"
INBOX_TTL = 900


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


# --- sessions in the store, on a frozen clock -----------------------------------------------------------------------


async def who(sign_in: PeopleSignIn, value: str) -> str:
    """Who the sign-out page says is signed in, for a browser holding `value` as its session cookie."""
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount(AUTH, app=sign_in.app)]))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as http:
        page = await http.get(f"{AUTH}/sign-out", headers={"Cookie": f"{COOKIE}={value}"})
    assert page.status_code == 200
    if NOBODY in page.text:
        return "nobody"
    return page.text.split("You are signed in as ", 1)[1].split(".</p>", 1)[0]


async def session_rows(store: Any) -> list[tuple[str, float]]:
    async with store.database.engine.connect() as conn:
        found = await conn.execute(sa.text("SELECT principal, expires_at FROM askback_people_sessions"))
        return sorted((row[0], row[1]) for row in found)


async def test_a_session_older_than_the_session_ttl_setting_is_refused_however_long_its_cookie_lasts(
    tmp_path: Path,
) -> None:
    clock = FrozenClock()
    # No lifetime given in code: the one of the settings it is started with (ASKBACK_SESSION_TTL).
    sign_in = PeopleSignIn(
        issuer="https://login.example.com",
        client_id="askback",
        client_secret=SecretStr("x"),
        base_url="http://127.0.0.1:9",
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
    async with sign_in_started(sign_in, tmp_path / "askback.db", session_ttl=600):
        copied = await sign_in.session_cookie("alice")
        assert sign_in.session_ttl == 600
        clock.advance(599)
        assert await who(sign_in, copied) == "alice"
        clock.advance(1)
        assert await who(sign_in, copied) == "nobody"


def test_the_session_settings_have_bounds_named_in_the_refusal() -> None:
    from askback.errors import ConfigurationError

    assert load_settings().session_ttl == 8 * 3600 and load_settings().sessions_per_person == 10
    for name, value in (("session_ttl", 0), ("session_ttl", 31 * 86400), ("sessions_per_person", 0)):
        with pytest.raises(ConfigurationError, match=f"ASKBACK_{name.upper()}"):
            load_settings(**{name: value})


async def test_past_the_sessions_per_person_setting_a_sign_in_ends_that_persons_oldest_and_run_out_rows_go(
    tmp_path: Path,
) -> None:
    clock = FrozenClock()
    sign_in = PeopleSignIn(
        issuer="https://login.example.com",
        client_id="askback",
        client_secret=SecretStr("x"),
        base_url="http://127.0.0.1:9",
        session_secret=secrets.token_bytes(32),
        clock=clock,
    )
    async with sign_in_started(sign_in, tmp_path / "askback.db", sessions_per_person=3, session_ttl=3600) as store:
        bob = await sign_in.session_cookie("bob")
        alice = []
        for _ in range(4):
            alice.append(await sign_in.session_cookie("alice"))
            clock.advance(1)
        assert [await who(sign_in, value) for value in alice] == ["nobody", "alice", "alice", "alice"]
        assert await who(sign_in, bob) == "bob"  # another person's sessions are theirs
        assert len(await session_rows(store)) == 4

        clock.advance(3600)  # every session has run out; the next sign-in clears their rows
        carol = await sign_in.session_cookie("carol")
        assert await who(sign_in, carol) == "carol"
        assert [principal for principal, _ in await session_rows(store)] == ["carol"]


async def test_the_sessions_migration_creates_exactly_the_table_its_model_describes(tmp_path: Path) -> None:
    from askback.store import Store

    store = await Store.open(f"sqlite:///{tmp_path / 'i.db'}", migrate=True, components=(MIGRATIONS,))
    try:

        def differences(connection: Connection) -> list[Any]:
            return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

        async with store.database.engine.connect() as conn:
            found = await conn.run_sync(differences)
        assert await store.database.revisions() == {"identity": "i002"}
    finally:
        await store.close()
    assert [d for d in found if not (d[0] == "remove_table" and d[1].name == MIGRATIONS.version_table)] == []


@pytest.mark.http
def test_the_inbox_refuses_a_bad_issuer_before_it_says_anything_of_the_session_secret(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    env["ASKBACK_SIGNIN_CLIENT_SECRET"] = "s3cret"  # and no ASKBACK_SESSION_SECRET
    command = [
        *(sys.executable, "-m", "askback", "inbox", "serve", "--database", f"sqlite:///{tmp_path / 'a.db'}"),
        *("--auth-issuer", "http://login.example.com", "--auth-client-id", "askback"),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0
    assert "issuer" in done.stderr and "https" in done.stderr
    assert "ASKBACK_SESSION_SECRET" not in done.stderr + done.stdout


# --- sign-out on real processes, in Chromium ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def provider(listener: socket.socket) -> Iterator[OidcProvider]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    uris = [*redirect_uris(base), *redirect_uris(SECOND), f"{INBOX}{AUTH}/callback"]
    with oidc_provider(redirect_uris=uris) as started:
        yield started


@pytest.fixture(scope="module")
async def site(
    listener: socket.socket, provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SignInSite]:
    database = tmp_path_factory.mktemp("sessions") / "askback.db"
    async with serve_sign_in_site(listener, provider, database) as served:
        yield served


@pytest.fixture(scope="module")
def second(site: SignInSite, provider: OidcProvider) -> Iterator[str]:
    """A second instance of the site: `askback serve` over the same database, with the same session secret."""
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{site.database}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_SIGNIN_ISSUER": provider.issuer,
        "ASKBACK_SIGNIN_CLIENT_ID": provider.client_id,
        "ASKBACK_SIGNIN_CLIENT_SECRET": provider.client_secret,
        "ASKBACK_SESSION_SECRET": site.secret,
        "ASKBACK_PUBLIC_URL": SECOND,
        "ASKBACK_VAULT_KEYS": new_key(),
    }
    with serving("signin_pages_server:server", port=SECOND_PORT, workers=1, env=env, cwd=str(FIXTURES)):
        yield SECOND


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_chromium() as launched:
        yield launched


@pytest.fixture
async def people(browser: Browser) -> AsyncIterator[list[BrowserContext]]:
    made: list[BrowserContext] = []
    yield made
    for context in made:
        await context.close()


async def person(browser: Browser, people: list[BrowserContext]) -> Page:
    context = await async_browser_context(browser)
    people.append(context)
    return await context.new_page()


async def sign_out(page: Page, base: str) -> None:
    """Sign out from the site's own sign-out page, as a person does."""
    await page.goto(f"{base}{AUTH}/sign-out")
    await page.get_by_role("button", name="Sign out").click()
    assert (await page.locator("h1").inner_text()).strip() == "Signed out"


async def session_of(page: Page, base: str) -> dict[str, Any]:
    cookies = {c["name"]: c for c in await page.context.cookies(base)}
    return dict(cookies[COOKIE])


@pytest.mark.http
async def test_after_sign_out_a_copied_session_cookie_opens_no_page_on_this_instance_or_another(
    site: SignInSite, second: str, browser: Browser, people: list[BrowserContext]
) -> None:
    link, _ = await site.link("alice", "notes")
    page = await person(browser, people)
    await page.goto(link)
    await sign_in_as(page, site.provider.issuer, "alice")
    await page.locator("input[name=key]").wait_for()
    copied = {"Cookie": f"{COOKIE}={(await session_of(page, site.base))['value']}"}

    async with httpx.AsyncClient(timeout=10, headers=copied) as thief:
        # The copy opens alice's links on both instances, and showing the sign-out page ends nothing.
        assert (await thief.get((await site.link("alice", "notes"))[0])).status_code == 200
        there = (await site.link("alice", "notes"))[0].replace(site.base, second)
        assert (await thief.get(there)).status_code == 200
        assert "You are signed in as alice." in (await thief.get(f"{second}{AUTH}/sign-out")).text

        await sign_out(page, site.base)

        for base in (site.base, second):
            link_now = (await site.link("alice", "notes"))[0].replace(site.base, base)
            refused = await thief.get(link_now)
            assert refused.status_code == 303, base
            assert refused.headers["location"].startswith(f"{AUTH}/sign-in?next=")
            assert NOBODY in (await thief.get(f"{base}{AUTH}/sign-out")).text


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("sessions-server")
    env = {"ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'server.db'}", "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
    with serving("runtime_inbox_server:server", port=free_port(), workers=1, env=env, cwd=str(FIXTURES)) as url:
        yield url


@pytest.fixture(scope="module")
def inbox_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('sessions-agent') / 'agent.db'}"


@pytest.fixture(scope="module")
def inbox(provider: OidcProvider, inbox_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`askback inbox serve --auth-issuer ...` on INBOX_PORT, its sessions lasting INBOX_TTL seconds."""
    log_path = tmp_path_factory.mktemp("sessions-inbox-log") / "inbox.log"
    with signed_in_inbox(provider, inbox_database, INBOX_PORT, log_path, ASKBACK_SESSION_TTL=str(INBOX_TTL)) as url:
        yield url


@pytest.mark.http
async def test_the_inbox_session_lasts_the_session_ttl_setting_and_after_sign_out_a_copied_cookie_opens_nothing(
    tool_server: str,
    inbox_database: str,
    inbox: str,
    provider: OidcProvider,
    browser: Browser,
    people: list[BrowserContext],
) -> None:
    runtime = await Runtime.open(
        inbox_database, renderers=[WebInbox()], settings=load_settings(database_url=inbox_database)
    )
    try:
        outcome = await runtime.call_tool(tool_server, "approve", {"item": "the budget"}, principal="alice")
    finally:
        await runtime.close()
    assert isinstance(outcome, Parked), outcome
    q = outcome.questions[0]
    question = f"{inbox}/q/{q.call_id}/{q.round}/{q.key}"
    with anyio.fail_after(60):
        # The inbox is up once it answers; the transport retries the connection, backing off, while it starts.
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=7)) as http:
            assert (await http.get(question)).status_code == 303

    alice = await person(browser, people)
    await alice.goto(question)
    await sign_in_as(alice, provider.issuer, "alice")
    await alice.wait_for_url(question)
    session = await session_of(alice, inbox)
    copied = {"Cookie": f"{COOKIE}={session['value']}"}

    async with httpx.AsyncClient(timeout=10, headers=copied) as thief:
        assert (await thief.get(question)).status_code == 200
        await sign_out(alice, inbox)
        refused = await thief.get(question)
        assert refused.status_code == 303
        assert refused.headers["location"].startswith(f"{AUTH}/sign-in?next=")
        assert "Approve the budget?" not in refused.text
    assert time.time() + INBOX_TTL - 120 < session["expires"] <= time.time() + INBOX_TTL  # ASKBACK_SESSION_TTL
