"""A real access token's principal owns the connected accounts `flow.connect` makes: one server with the OAuth 2.1
resource server and connected accounts as extensions (`Askback(..., extensions=[ResourceServer(...),
AccountsSetup(...)])`, served by `build_app` under uvicorn on loopback), JWT access tokens signed by the tests' own
loopback issuer, raw 2026-07-28 JSON-RPC over HTTP, and the hosted pages opened with the development sign-in.
"""

from __future__ import annotations

import re
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from _loopback_issuer import AUDIENCE, LoopbackIssuer, loopback_issuer
from mcp_types import ElicitResult

from _accounts_site import form_field
from _http import RawReply, post_call
from askback import Askback, Flow, load_settings
from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.pages import DevelopmentSignIn
from askback.accounts.repository import Account, Accounts
from askback.accounts.setup import AccountsSetup
from askback.accounts.status import Status
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.core.caller import Caller
from askback.identity import ResourceServer
from askback.server import build_app
from infra import serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

CONNECTION = "notes"
TOOL = "notes_owner"


@dataclass
class Served:
    """The server, its issuer, the sign-in of its pages, and every caller the tool has seen (in order)."""

    base: str
    app: Askback
    issuer: LoopbackIssuer
    clock: FrozenClock
    sign_in: DevelopmentSignIn
    callers: list[Caller | None] = field(default_factory=list)

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"

    def token(self, sub: str, scope: str) -> str:
        return self.issuer.access_token(self.clock.now(), sub=sub, scope=scope)

    async def accounts_of(self, principal: str) -> list[Account]:
        return await Accounts((await self.app.store()).database).of(principal, CONNECTION)


@pytest.fixture(scope="module")
def issuer() -> Iterator[LoopbackIssuer]:
    with loopback_issuer() as running:
        yield running


@pytest.fixture
def listening() -> Iterator[socket.socket]:
    """A loopback socket already listening, for this test's own server (its port is the pages' base URL)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    try:
        yield sock
    finally:
        sock.close()


@pytest.fixture
async def served(listening: socket.socket, issuer: LoopbackIssuer, tmp_path: Path) -> AsyncIterator[Served]:
    """A fresh server for each test (accounts of its own), trusting the module's issuer."""
    base = f"http://127.0.0.1:{listening.getsockname()[1]}"
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32))
    clock = FrozenClock(at=time.time())
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    accounts = AccountsSetup(
        connections=Connections([ApiKeyConnection(name=CONNECTION, label="Notes API key")]),
        vault=Vault(new_key()),
        verifier=sign_in,
        base_url=base,
    )
    app = Askback(
        "notes",
        settings=settings,
        clock=clock,
        extensions=[ResourceServer(issuer=issuer.issuer, audience=AUDIENCE), accounts],
    )
    served = Served(base, app, issuer, clock, sign_in)

    @app.tool()
    async def notes_owner(flow: Flow) -> dict[str, Any]:
        """Whose notes account this call uses: the caller, their scopes, and the account."""
        served.callers.append(flow.caller)
        account = await flow.connect(CONNECTION)
        assert flow.caller is not None
        return {"principal": flow.caller.principal, "scopes": sorted(flow.caller.scopes), "account": account.id}

    async with serving_asgi(build_app(app), listening):
        yield served


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as client:
        yield client


def link_of(reply: RawReply) -> tuple[str, str, str]:
    """The (key, url, requestState) of a reply that asks one URL question."""
    assert reply.status == 200, reply.body
    result = reply.message()["result"]
    assert result["resultType"] == "input_required", result
    [(key, request)] = result["inputRequests"].items()
    assert request["params"]["mode"] == "url"
    return key, request["params"]["url"], result["requestState"]


def person(served: Served, user: str | None) -> httpx.AsyncClient:
    """A browser of its own, signed in to the hosted pages as `user` (nobody when None), following no redirect."""
    cookies = {DevelopmentSignIn.COOKIE: served.sign_in.cookie_value(user)} if user is not None else {}
    return httpx.AsyncClient(base_url=served.base, cookies=cookies, timeout=20, follow_redirects=False)


def heading(html: str) -> str:
    found = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert found is not None, html
    return found.group(1).strip()


async def connect_with_a_key(served: Served, user: str, link: str) -> str:
    """Open `link` as `user`, type a key in the form and send it: the heading of the page it ends on."""
    async with person(served, user) as browser:
        form = await browser.get(link)
        assert form.status_code == 200, form.text
        sent = await browser.post(
            "/accounts/key",
            data={
                "state": form_field(form.text, "state"),
                "csrf": form_field(form.text, "csrf"),
                "key": "nk-" + secrets.token_hex(16),
            },
            headers={"Origin": served.base},
        )
        assert sent.status_code == 200, sent.text
        return heading(sent.text)


async def test_a_token_of_alice_makes_alices_account_whose_link_only_she_can_use_and_her_retry_completes(
    served: Served, http: httpx.AsyncClient
) -> None:
    alice = served.token("alice", "openid notes")
    first = await post_call(http, served.mcp, TOOL, {}, token=alice)
    key, link, state = link_of(first)
    assert link.startswith(f"{served.base}/accounts/start?t=")
    caller = served.callers[-1]
    assert caller is not None
    assert (caller.principal, caller.scopes, caller.client_id, caller.issuer) == (
        "alice",
        frozenset({"openid", "notes"}),
        "the-client",
        served.issuer.issuer,
    )
    [account] = await served.accounts_of("alice")
    assert (account.principal, account.status) == ("alice", Status.PENDING)
    assert await served.accounts_of("bob") == []

    for opener, status, why in (("bob", 403, "made for another person"), (None, 400, "Sign in first")):
        async with person(served, opener) as browser:
            refused = await browser.get(link)
        assert refused.status_code == status, (opener, refused.text)
        assert heading(refused.text) == "Not connected" and why in refused.text
    assert [a.status for a in await served.accounts_of("alice")] == [Status.PENDING]

    assert await connect_with_a_key(served, "alice", link) == "Connected"
    assert [(a.id, a.status) for a in await served.accounts_of("alice")] == [(account.id, Status.ACTIVE)]

    done = await post_call(
        http,
        served.mcp,
        TOOL,
        {},
        token=alice,
        responses={key: ElicitResult(action="accept")},
        request_state=state,
    )
    assert done.status == 200, done.body
    result = done.message()["result"]
    assert result["structuredContent"] == {"principal": "alice", "scopes": ["notes", "openid"], "account": account.id}


async def test_a_token_of_bob_from_the_same_issuer_does_not_see_alices_account_and_gets_a_link_of_his_own(
    served: Served, http: httpx.AsyncClient
) -> None:
    alice = served.token("alice", "notes")
    key, alices_link, alices_state = link_of(await post_call(http, served.mcp, TOOL, {}, token=alice))
    assert await connect_with_a_key(served, "alice", alices_link) == "Connected"
    [alices] = await served.accounts_of("alice")
    assert alices.status is Status.ACTIVE

    bob = served.token("bob", "notes")
    _, bobs_link, _ = link_of(await post_call(http, served.mcp, TOOL, {}, token=bob))
    assert served.callers[-1] is not None and served.callers[-1].principal == "bob"
    assert bobs_link != alices_link
    [bobs] = await served.accounts_of("bob")
    assert (bobs.principal, bobs.status) == ("bob", Status.PENDING) and bobs.id != alices.id

    # Alice's own round, answered with bob's token, is refused before the tool runs.
    seen = len(served.callers)
    stolen = await post_call(
        http,
        served.mcp,
        TOOL,
        {},
        token=bob,
        responses={key: ElicitResult(action="accept")},
        request_state=alices_state,
    )
    assert stolen.status == 400, stolen.body
    assert stolen.message()["error"]["data"]["reason"] == "invalid_request_state"
    assert len(served.callers) == seen

    async with person(served, "alice") as browser:
        refused = await browser.get(bobs_link)
    assert refused.status_code == 403 and heading(refused.text) == "Not connected"
    assert await served.accounts_of("bob") == [bobs]
    assert await served.accounts_of("alice") == [alices]

    # A new call of alice's finds her account at once; bob's link changed nothing of hers.
    again = await post_call(http, served.mcp, TOOL, {}, token=alice)
    assert again.status == 200, again.body
    assert again.message()["result"]["structuredContent"] == {
        "principal": "alice",
        "scopes": ["notes"],
        "account": alices.id,
    }
