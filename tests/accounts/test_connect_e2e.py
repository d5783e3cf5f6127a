"""A tool that needs the caller's third-party account, end to end over MCP: the tool asks with a link, the person
signs in and consents in a real browser on a real authorization server, the retry completes the tool; the token is
then found nowhere but as ciphertext.

One uvicorn server serves `/mcp` and the hosted pages (`enable_accounts`), with demo bearer tokens for the MCP
caller and the development sign-in for the pages; oidc-provider is the provider; Chromium is the person's browser.
"""

from __future__ import annotations

import io
import json
import logging
import secrets
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from mcp_types import ElicitResult

from _accounts_site import consent_at_the_provider, discovered_oidc
from _http import RawReply, post_call
from askback import Askback, Flow, load_settings
from askback.accounts.connections import Connections
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.setup import AccountsSetup, enable_accounts
from askback.accounts.status import Status
from askback.accounts.vault import Vault, new_key
from askback.audit import AuditFilter
from askback.server import DemoTokenVerifier, Mounted, Open, build_app
from infra import OidcProvider, async_browser_context, serving_asgi

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@dataclass
class Served:
    base: str
    app: Askback
    setup: AccountsSetup
    verifier: DevelopmentSignIn
    database: Path
    logs: io.StringIO

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"


@pytest.fixture(scope="module")
async def served(
    listener: socket.socket, provider: OidcProvider, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    database = tmp_path_factory.mktemp("connect") / "askback.db"
    settings = load_settings(database_url=f"sqlite:///{database}", state_keys=secrets.token_urlsafe(32))
    app = Askback("mail", settings=settings)
    userinfo = str(provider.metadata["userinfo_endpoint"])

    @app.tool()
    async def whoami(flow: Flow) -> str:
        """Who the caller is at the provider, read with their connected account."""
        account = await flow.connect("oidc")
        reply = await account.http.get(userinfo)
        return f"At the provider you are {reply.json()['sub']}."

    @app.tool()
    async def whoami_work(flow: Flow) -> str:
        account = await flow.connect("oidc", label="work")
        return f"Using the {account.label} account."

    oauth = await discovered_oidc(provider)
    verifier = DevelopmentSignIn(secrets.token_bytes(32))
    setup = enable_accounts(
        app, connections=Connections([oauth]), vault=Vault(new_key()), verifier=verifier, base_url=base
    )
    http_app = build_app(
        app, token_verifier=DemoTokenVerifier(), mounts=[Mounted(setup.prefix, setup.pages, auth=Open())]
    )
    logs = io.StringIO()
    handler = logging.StreamHandler(logs)
    handler.setLevel(logging.DEBUG)
    root = logging.getLogger()
    root.addHandler(handler)
    old_level = root.level
    root.setLevel(logging.DEBUG)
    try:
        async with serving_asgi(http_app, listener, log_level="debug"):
            yield Served(base, app, setup, verifier, database, logs)
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as client:
        yield client


def link_of(reply: RawReply) -> tuple[str, str, str]:
    """The (key, url, requestState) of a reply that asks one URL question."""
    result = reply.message()["result"]
    assert result["resultType"] == "input_required", result
    [(key, request)] = result["inputRequests"].items()
    assert request["params"]["mode"] == "url"
    return key, request["params"]["url"], result["requestState"]


async def connect_in_browser(browser: Browser, served: Served, provider: OidcProvider, user: str, url: str) -> Page:
    context = await async_browser_context(browser)
    await context.add_cookies(
        [{"name": DevelopmentSignIn.COOKIE, "value": served.verifier.cookie_value(user), "url": served.base}]
    )
    page = await context.new_page()
    await page.goto(url)
    await consent_at_the_provider(page, provider.issuer, user=user)
    await page.wait_for_url(lambda u: u.startswith(f"{served.base}/accounts/callback"))
    return page


def database_bytes(path: Path) -> bytes:
    """The database file and its write-ahead log, as a copy of the disk would hold them."""
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def stored_tokens(served: Served, principal: str) -> dict[str, Any]:
    service = await served.setup.service()
    [account] = [a for a in await service.accounts_of(principal, "oidc") if a.label == ""]
    sealed = await service.accounts.sealed_credential(account.id)
    assert sealed is not None
    return service.vault.open(account.id, sealed)


async def test_a_tool_asks_for_the_account_the_person_connects_it_and_the_retry_completes_without_the_token_leaking(
    served: Served, provider: OidcProvider, browser: Browser, http: httpx.AsyncClient
) -> None:
    traffic: list[bytes] = []
    first = await post_call(http, served.mcp, "whoami", {}, token="demo-alice")
    traffic.append(first.body)
    key, url, state = link_of(first)
    assert url.startswith(f"{served.base}/accounts/start?t=")

    page = await connect_in_browser(browser, served, provider, "alice", url)
    assert "Connected" in await page.locator("h1").inner_text()
    page_html = await page.content()
    await page.context.close()

    done = await post_call(
        http,
        served.mcp,
        "whoami",
        {},
        token="demo-alice",
        responses={key: ElicitResult(action="accept")},
        request_state=state,
    )
    traffic.append(done.body)
    result = done.message()["result"]
    assert result["content"][0]["text"] == "At the provider you are alice."

    tokens = await stored_tokens(served, "alice")
    canaries = [tokens["access_token"], tokens["refresh_token"]]
    store = await served.app.store()
    audit = json.dumps([e.__dict__ for e in await store.audit_log.query(AuditFilter(tool="whoami"))], default=str)
    places = {
        "MCP traffic": b"".join(traffic).decode(),
        "the server's logs": served.logs.getvalue(),
        "the audit rows": audit,
        "every requestState": state + json.dumps(result),
        "the page": page_html,
    }
    database = database_bytes(served.database)
    for token in canaries:
        assert token and len(token) > 20
        for where, text in places.items():
            assert token not in text, f"a token in {where}"
        assert token.encode() not in database, "a token in clear in the database file"


async def test_an_accept_while_the_account_is_still_not_connected_completes_saying_so_without_another_link(
    served: Served, http: httpx.AsyncClient
) -> None:
    first = await post_call(http, served.mcp, "whoami", {}, token="demo-bob")
    key, _, state = link_of(first)
    again = await post_call(
        http,
        served.mcp,
        "whoami",
        {},
        token="demo-bob",
        responses={key: ElicitResult(action="accept")},
        request_state=state,
    )
    result = again.message()["result"]
    assert "inputRequests" not in result
    assert result["content"][0]["text"].startswith("Not connected: your oidc account is still not connected")
    [account] = await (await served.setup.service()).accounts_of("bob", "oidc")
    assert account.status is Status.PENDING


async def test_a_declined_link_completes_and_a_client_without_url_mode_gets_32021(
    served: Served, http: httpx.AsyncClient
) -> None:
    first = await post_call(http, served.mcp, "whoami", {}, token="demo-carol")
    key, _, state = link_of(first)
    declined = await post_call(
        http,
        served.mcp,
        "whoami",
        {},
        token="demo-carol",
        responses={key: ElicitResult(action="decline")},
        request_state=state,
    )
    assert declined.message()["result"]["content"][0]["text"] == "Cancelled: you did not connect your oidc account."

    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "whoami",
            "arguments": {},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
            },
        },
    }
    headers = {
        "Authorization": "Bearer demo-carol",
        "MCP-Protocol-Version": "2026-07-28",
        "Accept": "application/json, text/event-stream",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "whoami",
    }
    refused = await http.post(served.mcp, json=body, headers=headers)
    error = RawReply(refused.status_code, None, refused.content).message()["error"]
    assert (refused.status_code, error["code"]) == (400, -32021)
    assert error["data"] == {"requiredCapabilities": {"elicitation": {"url": {}}}}
    assert "elicitation.url" in error["message"]


async def test_with_two_active_accounts_the_tool_asks_which_one_and_uses_the_chosen_one(
    served: Served, provider: OidcProvider, browser: Browser, http: httpx.AsyncClient
) -> None:
    # dave connects a default account, then a "work" one (a tool that names the label asks for it).
    for tool in ("whoami", "whoami_work"):
        first = await post_call(http, served.mcp, tool, {}, token="demo-dave")
        _, url, _ = link_of(first)
        page = await connect_in_browser(browser, served, provider, "dave", url)
        await page.context.close()
    asked = await post_call(http, served.mcp, "whoami", {}, token="demo-dave")
    result = asked.message()["result"]
    [(key, request)] = result["inputRequests"].items()
    schema = request["params"]["requestedSchema"]["properties"]["account"]
    assert request["params"]["mode"] == "form" and sorted(schema["enum"]) == ["default", "work"]
    chosen = await post_call(
        http,
        served.mcp,
        "whoami",
        {},
        token="demo-dave",
        responses={key: ElicitResult(action="accept", content={"account": "work"})},
        request_state=result["requestState"],
    )
    assert chosen.message()["result"]["content"][0]["text"] == "At the provider you are dave."
