"""The demo's connected account, end to end: `askback demo` walks `summarize_inbox` from the link through both
sign-ins, the consent page and the callback to the retry's summary; a person in a real browser (Chromium) does the
same; and Demo Mail, the development OAuth provider behind it, holds to PKCE S256, rotates refresh tokens and
refuses a bad token. The provider runs on loopback in this process, as `askback demo` runs it, and is spoken to with
the requests askback's own connections build."""

from __future__ import annotations

import functools
import json
import re
import secrets
from collections.abc import Iterator
from html import unescape
from pathlib import Path
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx
import pytest
from mcp_types import ElicitResult, InputRequiredResult

from askback.accounts.connections import (
    OAuthConnection,
    authorization_request,
    new_code_verifier,
    new_state,
    refresh_request,
    token_request,
)
from askback.demo.provider import CLIENT_ID, SCOPE, DevProvider, serving_provider
from askback.demo.run import demo_servers
from askback.testing import call_round, free_port, text
from infra import browser_context, chromium, run_askback

pytestmark = pytest.mark.http

CALLBACK = "http://127.0.0.1:9/callback"  # never reached: the tests read the redirect's Location
SECRET = secrets.token_urlsafe(32)


@pytest.fixture(scope="module")
def provider() -> Iterator[DevProvider]:
    with serving_provider(client_secret=SECRET, redirect_uris=[CALLBACK]) as started:
        yield started


@pytest.fixture
def http() -> Iterator[httpx.Client]:
    with httpx.Client(follow_redirects=False, timeout=10) as client:
        yield client


def connection(provider: DevProvider) -> OAuthConnection:
    return OAuthConnection(
        name="demo-mail",
        client_id=CLIENT_ID,
        client_secret=SECRET,
        authorize_url=provider.authorize_url,
        token_url=provider.token_url,
        scopes=(SCOPE,),
    )


def consent(http: httpx.Client, url: str, *, user: str = "dana", decision: str = "allow") -> httpx.Response:
    """Open the consent page at `url` and answer it; the provider's answer (a redirect to the client)."""
    page = http.get(url)
    assert page.status_code == 200, page.text
    action = re.search(r'<form method="post" action="([^"]*)"', page.text)
    ticket = re.search(r'name="ticket" value="([^"]*)"', page.text)
    assert action is not None and ticket is not None, page.text
    return http.post(
        urljoin(url, unescape(action.group(1))),
        data={"ticket": unescape(ticket.group(1)), "user": user, "decision": decision},
    )


def redirected_with(response: httpx.Response) -> dict[str, str]:
    """The parameters of a redirect to the client's callback."""
    assert response.status_code == 302, response.text
    location = response.headers["location"]
    assert location.startswith(CALLBACK + "?"), location
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


def code_for(http: httpx.Client, provider: DevProvider, verifier: str) -> str:
    state = new_state()
    url = authorization_request(connection(provider), redirect_uri=CALLBACK, state=state, code_verifier=verifier)
    params = redirected_with(consent(http, url))
    assert params["state"] == state
    return params["code"]


def exchange(http: httpx.Client, provider: DevProvider, code: str, verifier: str) -> httpx.Response:
    url, headers, form = token_request(connection(provider), code=code, redirect_uri=CALLBACK, code_verifier=verifier)
    return http.post(url, headers=headers, data=form)


# --- the demo ---------------------------------------------------------------------------------------------------


def test_the_demo_links_carols_mail_account_connects_it_and_the_retry_summarizes_her_inbox(tmp_path: Path) -> None:
    demo = run_askback("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    assert "Starting Demo Mail, a development OAuth provider, on http://127.0.0.1:" in out
    assert "carol calls summarize_inbox" in out
    assert re.search(r"link http://127\.0\.0\.1:\d+/accounts/start\?t=\S+", out), out
    assert "they sign in as carol and are sent back to the link" in out
    assert "Your demo-mail account is connected." in out
    assert '3 messages for carol, 2 unread; the latest is "web-frontend is live in production"' in out
    # The earlier flows are unchanged.
    assert "Deleted billing-legacy." in out and "Deployed web-frontend to production." in out

    listed = run_askback("accounts", "list", "--database", "sqlite:///askback-demo.db", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    accounts = {a["principal"]: (a["connection"], a["status"]) for a in json.loads(listed.stdout)}
    assert accounts["carol"] == ("demo-mail", "ACTIVE")  # erin's, from the META walk, is beside it


def test_a_person_in_a_real_browser_connects_the_account_from_the_link_and_the_retry_reads_the_inbox(
    tmp_path: Path,
) -> None:
    port = free_port()
    with demo_servers(workers=2, port=port, database=f"sqlite:///{tmp_path / 'demo.db'}") as url:
        first = anyio.run(functools.partial(call_round, url, "summarize_inbox", {}, token="demo-dana"))
        assert isinstance(first.result, InputRequiredResult), first
        [(key, asked)] = (first.result.input_requests or {}).items()
        link = asked.params.model_dump()["url"]
        assert link.startswith(f"http://127.0.0.1:{port}/accounts/start?t=")

        with chromium() as browser:
            page = browser_context(browser).new_page()
            page.goto(link)
            page.get_by_role("link", name="Sign in (development sign-in)").click()
            page.get_by_label("User name").fill("dana")
            page.get_by_role("button", name="Sign in").click()
            # Signed in, back on the link by itself, and on to the provider.
            page.get_by_role("heading", name="Sign in to Demo Mail").wait_for()
            page.get_by_label("User name").fill("dana")
            page.get_by_role("button", name="Allow").click()
            page.wait_for_url(f"http://127.0.0.1:{port}/accounts/callback?*")
            assert page.locator("h1").inner_text() == "Connected"

        done = anyio.run(
            functools.partial(
                call_round,
                url,
                "summarize_inbox",
                {},
                token="demo-dana",
                responses={key: ElicitResult(action="accept")},
                request_state=first.result.request_state,
            )
        )
    assert text(done.result).startswith("3 messages for dana, 2 unread;")


def test_the_demo_server_given_a_mail_issuer_without_the_rest_refuses_to_start_naming_what_to_set(
    tmp_path: Path,
) -> None:
    env = {"ASKBACK_DEMO_MAIL_ISSUER": "http://127.0.0.1:9", "ASKBACK_DEMO_PUBLIC_URL": "http://127.0.0.1:8"}
    result = run_askback("serve", "askback.demo:server", "--port", "1", cwd=tmp_path, env=env)
    assert result.returncode == 2, result.stderr
    assert "ASKBACK_DEMO_MAIL_CLIENT_SECRET, ASKBACK_DEMO_SIGN_IN_SECRET" in result.stderr
    assert "ASKBACK_DEMO_PUBLIC_URL" not in result.stderr.partition("also needs")[2]


# --- Demo Mail, the development provider -----------------------------------------------------------------------


def test_the_provider_gives_tokens_only_for_the_verifier_of_the_s256_challenge(
    provider: DevProvider, http: httpx.Client
) -> None:
    verifier = new_code_verifier()
    code = code_for(http, provider, verifier)

    wrong = exchange(http, provider, code, new_code_verifier())
    assert wrong.status_code == 400 and wrong.json()["error"] == "invalid_grant", wrong.text

    right = exchange(http, provider, code, verifier)
    assert right.status_code == 200, right.text
    tokens = right.json()
    assert tokens["token_type"] == "Bearer" and tokens["access_token"] and tokens["refresh_token"]
    assert tokens["scope"] == SCOPE and tokens["expires_in"] > 0

    again = exchange(http, provider, code, verifier)  # a code works once
    assert again.status_code == 400 and again.json()["error"] == "invalid_grant"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"code_challenge": None, "code_challenge_method": None}, "no challenge"),
        ({"code_challenge_method": None}, "no method, which would mean plain"),
        ({"code_challenge_method": "plain"}, "plain"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_the_provider_sends_back_an_authorization_request_without_an_s256_challenge(
    provider: DevProvider, http: httpx.Client, change: dict[str, str | None], why: str
) -> None:
    url = authorization_request(
        connection(provider), redirect_uri=CALLBACK, state="s1", code_verifier=new_code_verifier()
    )
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query = {k: v for k, v in {**query, **change}.items() if v is not None}
    answer = http.get(provider.authorize_url, params=query)
    params = redirected_with(answer)
    assert params["error"] == "invalid_request" and params["state"] == "s1", why
    assert "S256" in params["error_description"]


def test_a_request_from_an_unknown_redirect_uri_gets_a_page_and_goes_nowhere(
    provider: DevProvider, http: httpx.Client
) -> None:
    url = authorization_request(
        connection(provider), redirect_uri="http://127.0.0.1:9/elsewhere", state="s1", code_verifier=new_code_verifier()
    )
    answer = http.get(url)
    assert answer.status_code == 400 and "location" not in answer.headers
    assert "not valid" in answer.text


def test_denying_access_sends_the_client_access_denied(provider: DevProvider, http: httpx.Client) -> None:
    url = authorization_request(
        connection(provider), redirect_uri=CALLBACK, state="s2", code_verifier=new_code_verifier()
    )
    params = redirected_with(consent(http, url, decision="deny"))
    assert (params["error"], params["state"]) == ("access_denied", "s2") and "code" not in params


def test_a_consent_form_is_answered_once(provider: DevProvider, http: httpx.Client) -> None:
    url = authorization_request(
        connection(provider), redirect_uri=CALLBACK, state="s3", code_verifier=new_code_verifier()
    )
    page = http.get(url)
    ticket = re.search(r'name="ticket" value="([^"]*)"', page.text)
    assert ticket is not None
    form = {"ticket": ticket.group(1), "user": "dana", "decision": "allow"}
    assert http.post(url, data=form).status_code == 302
    replayed = http.post(url, data=form)
    assert replayed.status_code == 400 and "already used" in replayed.text
    assert http.post(url, data={**form, "ticket": "forged"}).status_code == 400


def test_the_mailbox_answers_the_tokens_user_and_refuses_a_bad_token_with_401(
    provider: DevProvider, http: httpx.Client
) -> None:
    verifier = new_code_verifier()
    tokens = exchange(http, provider, code_for(http, provider, verifier), verifier).json()

    mailbox = http.get(provider.messages_url, headers={"Authorization": f"Bearer {tokens['access_token']}"})
    assert mailbox.status_code == 200
    assert mailbox.json()["user"] == "dana" and len(mailbox.json()["messages"]) == 3

    for headers in ({"Authorization": "Bearer not-a-token"}, {}):
        refused = http.get(provider.messages_url, headers=headers)
        assert refused.status_code == 401, headers
        assert refused.headers["www-authenticate"].lower().startswith("bearer ")  # schemes are case-insensitive


def test_a_refresh_rotates_the_refresh_token_and_the_old_one_is_refused(
    provider: DevProvider, http: httpx.Client
) -> None:
    verifier = new_code_verifier()
    first = exchange(http, provider, code_for(http, provider, verifier), verifier).json()

    url, headers, form = refresh_request(connection(provider), first["refresh_token"])
    second = http.post(url, headers=headers, data=form)
    assert second.status_code == 200, second.text
    assert second.json()["refresh_token"] != first["refresh_token"]
    assert (
        http.get(provider.messages_url, headers={"Authorization": f"Bearer {first['access_token']}"}).status_code == 401
    )

    reused = http.post(url, headers=headers, data=form)
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
