"""A subject is unique only within its issuer: alice of one issuer is never alice of another. Two loopback issuers
(`_loopback_issuer`) both name a user `alice`; one server trusts both through a token verifier of the SDK's protocol
that says which issuer each token came from (`claims["iss"]`), with connected accounts (their pages signed in by a
header, as behind a signing-in proxy) and a task tool, served by uvicorn on loopback; two `askback serve` processes
share one key ring, each trusting one of the issuers. Raw 2026-07-28 JSON-RPC over HTTP.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from _loopback_issuer import AUDIENCE, LoopbackIssuer, loopback_issuer
from mcp.server.auth.provider import AccessToken
from mcp_types import ElicitResult

from _accounts_site import form_field
from _http import RawReply, audit, post_call
from askback import Askback, Confirm, Flow, load_settings
from askback.accounts.connections import ApiKeyConnection, Connections
from askback.accounts.repository import Account, Accounts
from askback.accounts.setup import AccountsSetup
from askback.accounts.status import Status
from askback.accounts.vault import Vault, new_key
from askback.clock import FrozenClock
from askback.errors import InvalidTokenError
from askback.identity import ResourceServer
from askback.server import build_app
from askback.testing import free_port, serving
from infra import ROOT, serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

CONNECTION = "notes"
PERSON = "X-Person"
proceed = Confirm(key="proceed", message="Go on?", field="ok", title="Go on")


class EitherIssuer:
    """A token verifier (the SDK's `TokenVerifier` protocol) accepting the access tokens of either issuer, and saying
    which one in `claims["iss"]`."""

    def __init__(self, *issuers: LoopbackIssuer) -> None:
        self.checks = [ResourceServer(issuer=i.issuer, audience=AUDIENCE) for i in issuers]

    async def verify_token(self, token: str) -> AccessToken | None:
        for check in self.checks:
            try:
                caller = await check.verify(token)
            except InvalidTokenError:
                continue
            return AccessToken(
                token="verified",
                client_id=caller.client_id or "client",
                scopes=sorted(caller.scopes),
                subject=caller.principal,
                claims={"iss": caller.issuer},
            )
        return None

    async def close(self) -> None:
        for check in self.checks:
            await check.close()


@dataclass
class Served:
    base: str
    app: Askback
    first: LoopbackIssuer
    second: LoopbackIssuer
    clock: FrozenClock
    database_url: str

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"

    def token(self, issuer: LoopbackIssuer, sub: str = "alice") -> str:
        return issuer.access_token(self.clock.now(), sub=sub, scope="notes")

    async def accounts_of(self, principal: str) -> list[Account]:
        return await Accounts((await self.app.store()).database).of(principal, CONNECTION)


@pytest.fixture(scope="module")
def issuers() -> Iterator[tuple[LoopbackIssuer, LoopbackIssuer]]:
    with loopback_issuer() as first, loopback_issuer() as second:
        yield first, second


@pytest.fixture
async def served(issuers: tuple[LoopbackIssuer, LoopbackIssuer], tmp_path: Path) -> AsyncIterator[Served]:
    """A fresh server trusting both issuers through `EitherIssuer`."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        base = f"http://127.0.0.1:{listening.getsockname()[1]}"
        database_url = f"sqlite:///{tmp_path / 'askback.db'}"
        settings = load_settings(database_url=database_url, state_keys=secrets.token_urlsafe(32))
        clock = FrozenClock(at=time.time())

        async def by_header(request: Any) -> str | None:
            return request.headers.get(PERSON) or None

        accounts = AccountsSetup(
            connections=Connections([ApiKeyConnection(name=CONNECTION, label="Notes API key")]),
            vault=Vault(new_key()),
            verifier=by_header,
            base_url=base,
        )
        app = Askback("notes", settings=settings, clock=clock, extensions=[accounts])

        @app.tool(asks=[proceed])
        async def greet(flow: Flow) -> str:
            """Ask once, then greet the caller by principal."""
            assert flow.caller is not None
            return f"hello {flow.caller.principal}" if flow.ask(proceed) else "declined"

        @app.tool()
        async def notes_owner(flow: Flow) -> dict[str, Any]:
            """Whose notes account this call uses."""
            account = await flow.connect(CONNECTION)
            assert flow.caller is not None
            return {"principal": flow.caller.principal, "account": account.id}

        @app.tool(task="optional")
        async def job(flow: Flow) -> str:
            """A task that asks once."""
            return "done" if flow.ask(proceed) else "kept"

        verifier = EitherIssuer(*issuers)
        try:
            async with serving_asgi(build_app(app, token_verifier=verifier), listening):
                yield Served(base, app, *issuers, clock, database_url)
        finally:
            await verifier.close()


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as client:
        yield client


def asked(reply: RawReply) -> tuple[str, dict[str, Any], str]:
    """The (key, request, requestState) of a reply that asks one question."""
    assert reply.status == 200, reply.body
    result = reply.message()["result"]
    assert result["resultType"] == "input_required", result
    [(key, request)] = result["inputRequests"].items()
    return key, request, result["requestState"]


def qualified(issuer: LoopbackIssuer, sub: str = "alice") -> str:
    return f"{issuer.issuer}#{sub}"


async def test_a_round_sealed_for_alice_of_one_issuer_is_refused_to_alice_of_the_other_on_a_server_trusting_both(
    served: Served, http: httpx.AsyncClient
) -> None:
    key, _, state = asked(await post_call(http, served.mcp, "greet", {}, token=served.token(served.first)))
    yes = {key: ElicitResult(action="accept", content={"ok": True})}

    stolen = await post_call(
        http, served.mcp, "greet", {}, token=served.token(served.second), responses=yes, request_state=state
    )
    assert stolen.status == 400, stolen.body
    assert stolen.message()["error"]["data"]["reason"] == "invalid_request_state"

    done = await post_call(
        http, served.mcp, "greet", {}, token=served.token(served.first), responses=yes, request_state=state
    )
    assert done.status == 200, done.body
    assert done.message()["result"]["content"][0]["text"] == f"hello {qualified(served.first)}"


async def test_the_audit_trail_tells_alice_of_one_issuer_from_alice_of_the_other(
    served: Served, http: httpx.AsyncClient
) -> None:
    for issuer in (served.first, served.second):
        key, _, state = asked(await post_call(http, served.mcp, "greet", {}, token=served.token(issuer)))
        done = await post_call(
            http,
            served.mcp,
            "greet",
            {},
            token=served.token(issuer),
            responses={key: ElicitResult(action="accept", content={"ok": True})},
            request_state=state,
        )
        assert done.status == 200, done.body
    answered = [e for e in await audit(served.database_url, tool="greet") if e.event == "answered"]
    assert [e.principal for e in answered] == [qualified(served.first), qualified(served.second)]
    assert await audit(served.database_url, tool="greet", principal="alice") == []


async def connect_with_a_key(served: Served, person: str, link: str) -> httpx.Response:
    """Open `link` as `person` and, when it shows the key form, send a key: the last answer."""
    async with httpx.AsyncClient(base_url=served.base, headers={PERSON: person}, timeout=20) as browser:
        form = await browser.get(link)
        if form.status_code != 200:
            return form
        return await browser.post(
            "/accounts/key",
            data={
                "state": form_field(form.text, "state"),
                "csrf": form_field(form.text, "csrf"),
                "key": "nk-" + secrets.token_hex(16),
            },
            headers={"Origin": served.base},
        )


def heading(html: str) -> str:
    found = re.search(r"<h1>(.*?)</h1>", html, re.S)
    assert found is not None, html
    return found.group(1).strip()


async def test_a_connected_account_of_alice_of_one_issuer_is_not_alice_of_the_others(
    served: Served, http: httpx.AsyncClient
) -> None:
    alice_a, alice_b = qualified(served.first), qualified(served.second)
    _, request, _ = asked(await post_call(http, served.mcp, "notes_owner", {}, token=served.token(served.first)))
    link = request["params"]["url"]
    [pending] = await served.accounts_of(alice_a)
    assert pending.status is Status.PENDING and await served.accounts_of("alice") == []

    for someone_else in ("alice", alice_b):
        refused = await connect_with_a_key(served, someone_else, link)
        assert refused.status_code == 403 and heading(refused.text) == "Not connected", someone_else
    connected = await connect_with_a_key(served, alice_a, link)
    assert connected.status_code == 200 and heading(connected.text) == "Connected", connected.text
    [active] = await served.accounts_of(alice_a)
    assert (active.id, active.status) == (pending.id, Status.ACTIVE)

    # Alice of the other issuer does not get that account: she is asked to connect one of her own.
    asked(await post_call(http, served.mcp, "notes_owner", {}, token=served.token(served.second)))
    [hers] = await served.accounts_of(alice_b)
    assert hers.id != active.id and hers.status is Status.PENDING
    again = await post_call(http, served.mcp, "notes_owner", {}, token=served.token(served.first))
    assert again.message()["result"]["structuredContent"] == {"principal": alice_a, "account": active.id}


async def rpc(http: httpx.AsyncClient, served: Served, token: str, method: str, params: dict[str, Any]) -> Any:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "elicitation": {"form": {}},
            "extensions": {"io.modelcontextprotocol/tasks": {}},
        },
    }
    reply = await http.post(
        served.mcp,
        json={"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}},
        headers={
            "Authorization": f"Bearer {token}",
            "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream",
            "Mcp-Method": method,
            "Mcp-Name": str(params.get("name", params.get("taskId"))),
        },
    )
    return reply.json()


async def test_a_task_of_alice_of_one_issuer_is_unknown_to_alice_of_the_other(
    served: Served, http: httpx.AsyncClient
) -> None:
    started = await rpc(http, served, served.token(served.first), "tools/call", {"name": "job", "arguments": {}})
    task_id = started["result"]["taskId"]
    mine = await rpc(http, served, served.token(served.first), "tasks/get", {"taskId": task_id})
    assert "result" in mine, mine

    # Another id of the same first characters, unknown to everyone: the other alice gets exactly that answer.
    unknown_id = task_id[:-1] + ("A" if task_id[-1] != "A" else "B")
    unknown = await rpc(http, served, served.token(served.first), "tasks/get", {"taskId": unknown_id})
    theirs = await rpc(http, served, served.token(served.second), "tasks/get", {"taskId": task_id})
    assert "error" in theirs, theirs
    assert theirs["error"] == unknown["error"] and theirs["error"]["code"] == -32602
    cancelled = await rpc(http, served, served.token(served.second), "tasks/cancel", {"taskId": task_id})
    assert cancelled["error"] == unknown["error"]
    still = await rpc(http, served, served.token(served.first), "tasks/get", {"taskId": task_id})
    assert still["result"]["status"] != "cancelled"


# --- two deployments sharing a key ring ------------------------------------------------------------------------------


@pytest.fixture
def deployments(issuers: tuple[LoopbackIssuer, LoopbackIssuer], tmp_path: Path) -> Iterator[tuple[str, str]]:
    """`askback serve` twice, one key ring, each trusting one issuer (tokens of both name the same audience)."""
    keys = secrets.token_urlsafe(32)
    urls = []
    with contextlib.ExitStack() as stack:
        for n, issuer in enumerate(issuers):
            env = {
                "ASKBACK_STATE_KEYS": keys,
                "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / f'server{n}.db'}",
                "ASKBACK_AUTH_ISSUER": issuer.issuer,
                "ASKBACK_AUTH_AUDIENCE": AUDIENCE,
            }
            server = serving(
                "tests.fixtures.identity_server:server", port=free_port(), workers=1, env=env, cwd=str(ROOT)
            )
            urls.append(stack.enter_context(server))
        yield urls[0], urls[1]


async def test_a_round_sealed_for_alice_at_one_deployment_is_refused_to_alice_of_another_issuer_sharing_its_keys(
    issuers: tuple[LoopbackIssuer, LoopbackIssuer], deployments: tuple[str, str], http: httpx.AsyncClient
) -> None:
    (first, second), (at_first, at_second) = issuers, deployments
    now = time.time()
    key, _, state = asked(await post_call(http, at_first, "greet", {}, token=first.access_token(now)))
    yes = {key: ElicitResult(action="accept", content={"ok": True})}

    stolen = await post_call(
        http, at_second, "greet", {}, token=second.access_token(now), responses=yes, request_state=state
    )
    assert stolen.status == 400, stolen.body
    assert stolen.message()["error"]["data"]["reason"] == "invalid_request_state"

    done = await post_call(
        http, at_first, "greet", {}, token=first.access_token(now), responses=yes, request_state=state
    )
    assert done.status == 200 and done.message()["result"]["content"][0]["text"] == "hello alice", done.body
