"""People signed in on the pages askback hosts (`askback.identity.PeopleSignIn`): OpenID Connect at a real
oidc-provider, in a real Chromium, for the hosted account pages and the web inbox.

The account pages and the sign-in are served in process by uvicorn on the module's listening socket (`_signin_site`),
with a frozen clock; the web inbox is `askback inbox serve --auth-issuer ...` in a process of its own, over a runtime
whose calls were parked against a real askback server. One provider and one browser serve the module; each test
makes its own people (browser contexts) and links.
"""

from __future__ import annotations

import base64
import json
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, quote, urlencode, urlsplit

import anyio
import httpx
import pytest
from _signin_site import (
    ACCOUNTS,
    AUTH,
    OtherSite,
    SignInSite,
    people_sign_in,
    redirect_uris,
    serve_sign_in_site,
    sign_in_as,
    sign_in_started,
    signed_in_inbox,
)
from pydantic import SecretStr
from starlette.applications import Starlette
from starlette.routing import Mount
from tests.fixtures.hostile_server import serving_hostile
from tests.fixtures.hostile_text import ODD_KEYS

from _accounts_site import form_field, main_text
from askback.accounts.status import Status
from askback.clock import FrozenClock
from askback.errors import ConfigurationError
from askback.identity import PeopleSignIn
from askback.runtime import Parked, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from askback.web.pages import safe_next_path
from infra import (
    FIXTURES,
    OidcProvider,
    async_browser_context,
    async_chromium,
    held_port,
    oidc_provider,
    serving_http,
)

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page

pytestmark = [pytest.mark.anyio, pytest.mark.http]

COOKIE = PeopleSignIn.COOKIE
# A site reached over https, whose callback the browser is sent to but never loads (every host name but localhost
# fails to resolve in the test browser): the callback URL is read from the failed request.
HTTPS_SITE = "https://tools.example"
INBOX_PORT = held_port()
INBOX = f"http://127.0.0.1:{INBOX_PORT}"
APART_PORT = held_port()  # a site whose people sign in at another issuer than its tokens'
APART = f"http://127.0.0.1:{APART_PORT}"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def provider(listener: socket.socket) -> Iterator[OidcProvider]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    uris = [*redirect_uris(base), *redirect_uris(APART), f"{HTTPS_SITE}{AUTH}/callback", f"{INBOX}{AUTH}/callback"]
    with oidc_provider(redirect_uris=uris) as started:
        yield started


@pytest.fixture(scope="module")
async def site(
    listener: socket.socket, provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[SignInSite]:
    database = tmp_path_factory.mktemp("signin") / "askback.db"
    async with serve_sign_in_site(listener, provider, database) as served:
        yield served


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
    """A person's own browser, nobody signed in."""
    context = await async_browser_context(browser)
    people.append(context)
    return await context.new_page()


async def heading(page: Page) -> str:
    return (await page.locator("h1").inner_text()).strip()


# --- the account pages ----------------------------------------------------------------------------------------------


async def test_a_person_not_signed_in_is_sent_through_the_provider_and_back_to_the_link_and_connects(
    site: SignInSite, browser: Browser, people: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    page = await person(browser, people)
    visited: list[str] = []
    page.on("request", lambda r: visited.append(r.url) if r.url.startswith(site.base) else None)

    await page.goto(link)
    await sign_in_as(page, site.provider.issuer, "alice")
    # Back on the link, signed in, which sends alice on to the provider to connect her account.
    await page.locator("h1", has_text="Authorize").wait_for()
    await page.get_by_role("button", name="Continue").click()
    await page.locator("h1", has_text="Connected").wait_for()

    ours = [urlsplit(u).path for u in visited]
    assert ours == [
        f"{ACCOUNTS}/start",
        f"{AUTH}/sign-in",
        f"{AUTH}/callback",
        f"{ACCOUNTS}/start",
        f"{ACCOUNTS}/callback",
    ]
    assert visited[3] == link  # the very link, its query and all
    assert await site.status(account) == Status.ACTIVE
    cookies = {c["name"]: c for c in await page.context.cookies(site.base)}
    session = cookies[COOKIE]
    assert session["httpOnly"] and session["sameSite"] == "Lax" and session["path"] == "/"
    assert not session["secure"]  # plain http on loopback; over https it is Secure (below)
    assert session["expires"] > site.clock.now() + 7 * 3600  # as long as the session lasts, not the browser
    assert not [name for name in cookies if name.startswith("askback_sign_in_")]  # the sign-in under way is gone


async def test_a_link_made_for_alice_is_refused_to_bob_signed_in_at_the_provider(
    site: SignInSite, browser: Browser, people: list[BrowserContext]
) -> None:
    link, account = await site.link("alice", "oidc")
    page = await person(browser, people)
    await page.goto(link)
    async with page.expect_response(lambda r: r.url == link) as came_back:
        await sign_in_as(page, site.provider.issuer, "bob")
    refused = await came_back.value
    assert refused.status == 403
    assert "This link was made for another person. Nothing was changed." in await main_text(page)
    assert await site.status(account) == Status.PENDING


async def test_people_of_a_sign_in_issuer_apart_from_the_tokens_one_never_open_the_links_of_its_subjects(
    provider: OidcProvider, browser: Browser, people: list[BrowserContext], tmp_path: Path
) -> None:
    def apart(base: str, clock: FrozenClock) -> PeopleSignIn:
        environ = {
            "ASKBACK_AUTH_ISSUER": "https://tokens.example.com",
            "ASKBACK_SIGNIN_ISSUER": provider.issuer,
            "ASKBACK_SIGNIN_CLIENT_ID": provider.client_id,
            "ASKBACK_SIGNIN_CLIENT_SECRET": provider.client_secret,
            "ASKBACK_SESSION_SECRET": secrets.token_urlsafe(32),
            "ASKBACK_PUBLIC_URL": base,
        }
        return PeopleSignIn.from_settings(environ, clock=clock)

    with socket.create_server(("127.0.0.1", APART_PORT)) as listening:
        async with serve_sign_in_site(listening, provider, tmp_path / "askback.db", sign_in_of=apart) as site:
            tokens_dave, account = await site.link("dave", "notes")
            own_dave, _ = await site.link(f"{provider.issuer}#dave", "notes")
            page = await person(browser, people)
            await page.goto(tokens_dave)
            async with page.expect_response(lambda r: r.url == tokens_dave) as came_back:
                await sign_in_as(page, provider.issuer, "dave")
            assert (await came_back.value).status == 403
            assert "This link was made for another person. Nothing was changed." in await main_text(page)
            assert await site.status(account) == Status.PENDING

            opened = await page.goto(own_dave)
            assert opened is not None and opened.status == 200
            await page.locator("input[name=key]").wait_for()


async def test_a_cross_site_sign_out_post_is_refused_and_the_person_stays_signed_in(
    site: SignInSite, browser: Browser, people: list[BrowserContext]
) -> None:
    page = await person(browser, people)
    alice = await site.sign_in.session_cookie("alice")
    await page.context.add_cookies([{"name": COOKIE, "value": alice, "url": site.base}])
    other = OtherSite()
    with serving_http(other.server):
        await page.goto(other.page(site.url(f"{AUTH}/sign-out")))
        async with page.expect_response(site.url(f"{AUTH}/sign-out")) as posted:
            await page.get_by_role("button", name="Win a prize").click()
    response = await posted.value
    assert (await response.request.all_headers())["sec-fetch-site"] == "cross-site"
    assert response.status == 403 and await heading(page) == "Refused"

    await page.goto(site.url(f"{AUTH}/sign-out"))
    assert "You are signed in as alice." in await main_text(page)
    await page.get_by_role("button", name="Sign out").click()  # from the site's own page, it signs out
    assert await heading(page) == "Signed out"
    assert COOKIE not in {c["name"] for c in await page.context.cookies(site.base)}


async def test_a_key_form_posted_from_another_site_by_a_signed_in_person_stores_nothing(site: SignInSite) -> None:
    link, account = await site.link("alice", "notes")
    async with httpx.AsyncClient(
        base_url=site.base, timeout=10, cookies={COOKIE: await site.sign_in.session_cookie("alice")}
    ) as http:
        shown = await http.get(link)
        assert shown.status_code == 200
        fields = {"state": form_field(shown.text, "state"), "csrf": form_field(shown.text, "csrf"), "key": "sk-test"}
        posted = await http.post(f"{ACCOUNTS}/key", data=fields, headers={"Origin": "https://evil.example"})
    assert posted.status_code == 403
    assert await site.status(account) == Status.PENDING


# --- the session cookie ---------------------------------------------------------------------------------------------


async def test_over_https_the_session_cookie_is_secure_and_an_off_site_next_is_ignored(
    provider: OidcProvider, browser: Browser, people: list[BrowserContext], tmp_path: Path
) -> None:
    clock = FrozenClock()
    sign_in = people_sign_in(provider, HTTPS_SITE, clock)
    transport = httpx.ASGITransport(app=Starlette(routes=[Mount(AUTH, app=sign_in.app)]))
    async with (
        sign_in_started(sign_in, tmp_path / "askback.db"),
        httpx.AsyncClient(transport=transport, base_url=HTTPS_SITE) as http,
    ):
        started = await http.get(f"{AUTH}/sign-in", params={"next": "https://evil.example/"})
        assert started.status_code == 303
        page = await person(browser, people)
        callbacks: list[str] = []
        page.on("request", lambda r: callbacks.append(r.url) if r.url.startswith(HTTPS_SITE) else None)
        await page.goto(started.headers["location"])
        await sign_in_as(page, provider.issuer, "carol")
        with anyio.fail_after(10):
            while not callbacks:
                await page.wait_for_event("requestfailed")
        back = await http.get(f"{AUTH}/callback?{urlsplit(callbacks[0]).query}")
    assert back.status_code == 303 and back.headers["location"] == "/"  # not to evil.example
    [session] = [v for k, v in back.headers.multi_items() if k == "set-cookie" and v.startswith(f"{COOKIE}=")]
    flags = {part.strip().lower() for part in session.split(";")[1:]}
    assert {"httponly", "secure", "samesite=lax", "path=/", "max-age=28800"} <= flags


async def who_signs_out(sign_in: PeopleSignIn, value: str | None) -> str:
    """The sign-out page's line saying who is signed in, for a browser holding `value` as its session cookie."""
    transport = httpx.ASGITransport(app=sign_in.app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9") as http:
        page = await http.get("/sign-out", headers={"Cookie": f"{COOKIE}={value}"} if value else None)
    assert page.status_code == 200
    return next(line for line in page.text.splitlines() if "signed in" in line)


async def test_a_tampered_expired_or_foreign_session_cookie_is_nobody(provider: OidcProvider, tmp_path: Path) -> None:
    clock = FrozenClock()
    sign_in = people_sign_in(provider, "http://127.0.0.1:9", clock, session_ttl=3600)
    other = people_sign_in(provider, "http://127.0.0.1:9", clock)
    async with sign_in_started(sign_in, tmp_path / "a.db"), sign_in_started(other, tmp_path / "b.db"):
        await tampered_expired_or_foreign(sign_in, await other.session_cookie("alice"), clock)


async def tampered_expired_or_foreign(sign_in: PeopleSignIn, foreign: str, clock: FrozenClock) -> None:
    good = await sign_in.session_cookie("alice")
    # A character inside the signature (the last one may differ only in padding bits a decoder ignores).
    flipped = good[:-5] + ("A" if good[-5] != "A" else "B") + good[-4:]
    nobody = "<p>Nobody is signed in in this browser.</p>"

    assert await who_signs_out(sign_in, good) == "<p>You are signed in as alice.</p>"
    assert await who_signs_out(sign_in, flipped) == nobody
    assert await who_signs_out(sign_in, foreign) == nobody  # signed with another secret
    mallory = await sign_in.session_cookie("mallory")
    _, signature = good.rsplit(".", 1)
    theirs, _ = mallory.rsplit(".", 1)
    claims = json.loads(base64.urlsafe_b64decode(theirs + "=" * (-len(theirs) % 4)))
    swapped = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    assert await who_signs_out(sign_in, f"{swapped}.{signature}") == nobody  # alice's signature on mallory's id
    clock.advance(3599)
    assert await who_signs_out(sign_in, good) == "<p>You are signed in as alice.</p>"
    clock.advance(1)
    assert await who_signs_out(sign_in, good) == nobody


@pytest.mark.parametrize(
    ("asked", "kept"),
    [
        ("/accounts/start?t=abc", "/accounts/start?t=abc"),
        ("https://evil.example/", None),
        ("//evil.example/x", None),
        ("/\\evil.example", None),
        ("/a\nb", None),
        ("javascript:alert(1)", None),
    ],
)
def test_only_a_path_on_this_site_is_a_place_to_come_back_to(asked: str, kept: str | None) -> None:
    assert safe_next_path(asked) == kept


async def test_a_callback_whose_state_this_browser_did_not_start_signs_nobody_in(
    site: SignInSite, provider: OidcProvider
) -> None:
    redeemed = provider.counters()["token"]["authorization_code"]
    async with httpx.AsyncClient(base_url=site.base, timeout=10) as http:
        started = await http.get(f"{AUTH}/sign-in", params={"next": "/x"})
        state = parse_qs(urlsplit(started.headers["location"]).query)["state"][0]
        async with httpx.AsyncClient(base_url=site.base, timeout=10) as stranger:
            forged = await stranger.get(f"{AUTH}/callback", params={"state": state, "code": "stolen-code"})
        denied = await http.get(f"{AUTH}/callback", params={"state": state, "error": "access_denied"})
    for refused in (forged, denied):
        assert refused.status_code == 400
        assert COOKIE not in refused.cookies and "stolen-code" not in refused.text
    assert "it said access_denied" in denied.text
    assert provider.counters()["token"]["authorization_code"] == redeemed  # no code was sent to the provider


def test_settings_missing_a_value_name_the_variable_to_set() -> None:
    full = {
        "ASKBACK_AUTH_ISSUER": "https://login.example.com",
        "ASKBACK_SIGNIN_CLIENT_ID": "askback",
        "ASKBACK_SIGNIN_CLIENT_SECRET": "s3cret-value",
        "ASKBACK_SESSION_SECRET": secrets.token_urlsafe(32),
        "ASKBACK_PUBLIC_URL": "https://tools.example.com",
    }
    made = PeopleSignIn.from_settings(full)
    assert made.issuer == "https://login.example.com" and made.redirect_uri == "https://tools.example.com/auth/callback"
    assert "s3cret-value" not in repr(made)
    people = PeopleSignIn.from_settings({**full, "ASKBACK_SIGNIN_ISSUER": "https://people.example.com"})
    assert people.issuer == "https://people.example.com"
    for name in full:
        with pytest.raises(ConfigurationError, match=name):
            PeopleSignIn.from_settings({k: v for k, v in full.items() if k != name})
    with pytest.raises(ConfigurationError, match="ASKBACK_SESSION_SECRET"):
        PeopleSignIn.from_settings({**full, "ASKBACK_SESSION_SECRET": "short"})
    with pytest.raises(ConfigurationError, match="https"):
        PeopleSignIn.from_settings({**full, "ASKBACK_PUBLIC_URL": "http://tools.example.com"})
    assert (
        PeopleSignIn(
            issuer="https://login.example.com",
            client_id="askback",
            client_secret=SecretStr("x"),
            base_url="http://127.0.0.1:8080",
            session_secret=b"k" * 32,
        ).secure
        is False
    )


# --- the web inbox --------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tool_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("inbox-server")
    env = {"ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'server.db'}", "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
    with serving("runtime_inbox_server:server", port=free_port(), workers=1, env=env, cwd=str(FIXTURES)) as url:
        yield url


@pytest.fixture(scope="module")
def inbox_database(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('agent') / 'agent.db'}"


@pytest.fixture(scope="module")
def inbox(provider: OidcProvider, inbox_database: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`askback inbox serve --auth-issuer ...` on INBOX_PORT over the agent's database."""
    log_path = tmp_path_factory.mktemp("inbox-log") / "inbox.log"
    with signed_in_inbox(provider, inbox_database, INBOX_PORT, log_path) as url:
        yield url


async def test_the_inbox_sends_a_person_through_the_provider_to_the_question_and_refuses_it_to_another(
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
            unsigned = await http.get(question)
    assert unsigned.status_code == 303
    assert unsigned.headers["location"].startswith(f"{AUTH}/sign-in?next=")

    alice = await person(browser, people)
    await alice.goto(question)
    await sign_in_as(alice, provider.issuer, "alice")
    await alice.wait_for_url(question)
    assert await heading(alice) == "A question from the tool approve"
    assert "Approve the budget?" in await main_text(alice)

    bob = await person(browser, people)
    await bob.goto(question)
    async with bob.expect_response(question) as came_back:
        await sign_in_as(bob, provider.issuer, "bob")
    assert (await came_back.value).status == 404  # another person's question is answered as if it did not exist
    assert "Approve the budget?" not in await main_text(bob)


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving_hostile(free_port()) as url:
        yield url


async def test_every_key_the_signed_in_inbox_lists_opens_its_question_and_is_answered(
    hostile: str,
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
        parked = await runtime.call_tool(hostile, "odd_keys", {}, principal="carol")
    finally:
        await runtime.close()
    assert isinstance(parked, Parked), parked
    assert sorted(q.key for q in parked.questions) == sorted(ODD_KEYS)

    with anyio.fail_after(60):
        # The inbox is up once it answers; the transport retries the connection, backing off, while it starts.
        async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=7)) as http:
            await http.get(f"{inbox}/")
    # Not signed in at a question whose key holds a line break: signed in, carol is back at that very question.
    carol = await person(browser, people)
    first = f"{inbox}/q/{parked.call_id}/1/{quote(ODD_KEYS[0], safe='')}"
    await carol.goto(first)
    await sign_in_as(carol, provider.issuer, "carol")
    await carol.wait_for_url(first)
    assert await heading(carol) == "A question from the tool odd_keys"

    await carol.goto(f"{inbox}/")
    links = [await a.get_attribute("href") or "" for a in await carol.locator("main h2 a").all()]
    assert len(links) == len(ODD_KEYS)
    for link in links:
        opened = await carol.goto(f"{inbox}{link}")
        assert opened is not None and opened.status == 200, link
        assert await heading(carol) == "A question from the tool odd_keys"
        async with carol.expect_navigation():
            await carol.get_by_role("button", name="Decline").click()
        assert parse_qs(urlsplit(carol.url).query)["done"] == ["decline"], link
    runtime = await Runtime.open(inbox_database, settings=load_settings(database_url=inbox_database))
    try:
        answered = await runtime.calls.answers(parked.call_id, 1)
    finally:
        await runtime.close()
    assert {key: a.action for key, a in answered.items()} == dict.fromkeys(ODD_KEYS, "decline")


@pytest.mark.parametrize("path", ["/nothing%0Ahere", "/q/call_x/one%0A/line", f"{AUTH}/sign%0Ain", f"{AUTH}/%0Ax"])
async def test_a_path_with_a_line_break_is_a_404_of_the_signed_in_inbox_with_its_headers(inbox: str, path: str) -> None:
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(retries=7)) as http:
        answered = await http.get(f"{inbox}{path}")
    assert answered.status_code == 404
    assert answered.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in answered.headers["content-security-policy"]
    assert answered.headers["x-content-type-options"] == "nosniff" and answered.headers["cache-control"] == "no-store"
    assert "Traceback" not in answered.text


async def test_as_an_extension_the_sign_in_is_served_beside_mcp_with_the_account_pages_that_use_it(
    provider: OidcProvider, tmp_path: Path
) -> None:
    from askback import Askback
    from askback.accounts import AccountsSetup
    from askback.accounts.connections import ApiKeyConnection, Connections
    from askback.accounts.vault import Vault, new_key
    from askback.server.http import build_app

    base = "https://tools.example"
    sign_in = people_sign_in(provider, base, FrozenClock())
    accounts = AccountsSetup(
        connections=Connections([ApiKeyConnection(name="notes")]),
        vault=Vault(new_key()),
        verifier=sign_in,
        base_url=base,
    )
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32))
    app = Askback("notes", settings=settings, extensions=[sign_in, accounts])
    async with app.running():
        link = await (await accounts.service()).link("alice", "notes", label="work", flow_id=None)
        served = build_app(app, allow_anonymous=True)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=base) as http:
            opened = await http.get(link.removeprefix(base))
            started = await http.get(opened.headers["location"])
    assert opened.status_code == 303
    assert opened.headers["location"] == f"{AUTH}/sign-in?{urlencode({'next': link.removeprefix(base)})}"
    assert started.status_code == 303 and started.headers["location"].startswith(provider.authorization_endpoint)


async def test_beside_mcp_a_path_with_a_line_break_under_the_account_or_sign_in_pages_is_their_404_with_headers(
    provider: OidcProvider, tmp_path: Path
) -> None:
    from askback import Askback
    from askback.accounts import AccountsSetup
    from askback.accounts.connections import ApiKeyConnection, Connections
    from askback.accounts.vault import Vault, new_key
    from askback.server.http import build_app

    base = "https://tools.example"
    sign_in = people_sign_in(provider, base, FrozenClock())
    accounts = AccountsSetup(
        connections=Connections([ApiKeyConnection(name="notes")]),
        vault=Vault(new_key()),
        verifier=sign_in,
        base_url=base,
    )
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32))
    app = Askback("notes", settings=settings, extensions=[sign_in, accounts])
    paths = [f"{ACCOUNTS}/%0Astart", f"{ACCOUNTS}/start%0A/x", f"{AUTH}/%0Asign-in", f"{AUTH}/sign-in%0Ax"]
    async with app.running():
        served = build_app(app, allow_anonymous=True)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=served), base_url=base) as http:
            answers = {path: await http.get(path) for path in paths}
    for path, answered in answers.items():
        assert answered.status_code == 404, path
        assert answered.headers["content-type"].startswith("text/html"), path
        assert "default-src 'none'" in answered.headers["content-security-policy"], path
        assert answered.headers["x-frame-options"] == "DENY" and answered.headers["referrer-policy"] == "no-referrer"
        assert "Traceback" not in answered.text
