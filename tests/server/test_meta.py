"""The same catalogue tools, served in both exposures, end to end with the official Python SDK client over real HTTP.

Two servers are made by one function from the same tool definitions, one with `ASKBACK_EXPOSE=direct`, one with
`meta`, each with connected accounts at Demo Mail (the development OAuth provider, on loopback in this process) and
the hosted pages with the development sign-in. A person connects an account with plain HTTP through those pages and
the provider's consent page (`askback.demo.person`, run on a thread: the servers run on this test's event loop).

Direct: the tool asks with a URL question, the person connects, the retry answers. META: `execute_tool` answers
`not_connected`, `connect_account` gives the link, the person connects, `check_readiness` says `ready`, and
`execute_tool` answers exactly what the tool answers; a revoked account then reads `reauth_needed`. A client that
declares no elicitation at all goes through the whole loop; the provider's tokens appear in no META result.
"""

from __future__ import annotations

import contextlib
import functools
import json
import secrets
import socket
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from pydantic import BaseModel, SecretStr

from askback import Askback, Confirm, Flow, load_settings
from askback.accounts.setup import AccountsSetup
from askback.accounts.status import Status
from askback.accounts.vault import new_key
from askback.audit import AuditFilter
from askback.demo.mail import DemoMail, callback_url, mail_accounts, summarize
from askback.demo.person import connect_account
from askback.demo.provider import DevProvider, serving_provider
from askback.server import DemoTokenVerifier, build_app
from askback.testing import call_round, text
from infra import serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

Exposure = Literal["direct", "meta"]
CONNECTION = "demo-mail"
PENDING_CAP = 3
META = {"search_tools", "get_tool", "check_readiness", "connect_account", "execute_tool"}
confirm_reply = Confirm(key="confirm_reply", message="Send this reply?", title="Send it")


class Sent(BaseModel):
    subject: str
    to: str


def define_tools(app: Askback, messages_url: str) -> None:
    """The catalogue both servers serve."""

    @app.tool(connections=[CONNECTION])
    async def summarize_inbox(flow: Flow) -> str:
        """Summarize the caller's inbox at Demo Mail."""
        account = await flow.connect(CONNECTION)
        return summarize((await account.http.get(messages_url)).json())

    @app.tool(connections=[CONNECTION])
    async def send_reply(subject: str, flow: Flow) -> Sent:
        """Reply to the latest message at Demo Mail, once the person confirms."""
        if not flow.ask(confirm_reply):
            return Sent(subject="", to="nobody")
        account = await flow.connect(CONNECTION)
        latest = (await account.http.get(messages_url)).json()["messages"][0]
        return Sent(subject=f"Re: {subject}", to=latest["from"])

    @app.tool(scopes=["deploy"])
    async def deploy_release(version: str) -> str:
        """Deploy a release (needs the deploy scope, which no demo token grants)."""
        return f"Deployed {version}."


@dataclass
class Served:
    mcp: str
    app: Askback
    setup: AccountsSetup


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


def _listening() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    return sock


@pytest.fixture(scope="module")
def sockets() -> Iterator[dict[Exposure, socket.socket]]:
    made: dict[Exposure, socket.socket] = {"direct": _listening(), "meta": _listening()}
    try:
        yield made
    finally:
        for sock in made.values():
            sock.close()


def base_of(sock: socket.socket) -> str:
    return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def provider(sockets: dict[Exposure, socket.socket]) -> Iterator[tuple[DevProvider, str]]:
    secret = secrets.token_urlsafe(32)
    uris = [callback_url(base_of(sock)) for sock in sockets.values()]
    with serving_provider(client_secret=secret, redirect_uris=uris) as started:
        yield started, secret


@contextlib.asynccontextmanager
async def serve(
    exposure: Exposure, sock: socket.socket, provider: DevProvider, secret: str, folder: Path
) -> AsyncIterator[Served]:
    settings = load_settings(
        database_url=f"sqlite:///{folder / f'{exposure}.db'}",
        state_keys=secrets.token_urlsafe(32),
        vault_keys=new_key(),
        expose=exposure,
        pending_accounts_per_principal=PENDING_CAP,
    )
    mail = DemoMail(
        issuer=provider.issuer,
        client_secret=SecretStr(secret),
        public_url=base_of(sock),
        sign_in_secret=SecretStr(secrets.token_urlsafe(32)),
    )
    setup = mail_accounts(mail, settings)
    # As when the connections come from a file: its path is the server's business, never a client's.
    setup.connections.source = str(folder / "secret-dir" / "connections.toml")
    app = Askback("mail", settings=settings, extensions=[setup])
    define_tools(app, provider.messages_url)
    async with serving_asgi(build_app(app, token_verifier=DemoTokenVerifier()), sock) as base:
        yield Served(f"{base}/mcp", app, setup)


@pytest.fixture(scope="module")
async def servers(
    sockets: dict[Exposure, socket.socket],
    provider: tuple[DevProvider, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[dict[Exposure, Served]]:
    folder = tmp_path_factory.mktemp("meta")
    async with (
        serve("direct", sockets["direct"], *provider, folder) as direct,
        serve("meta", sockets["meta"], *provider, folder) as meta,
    ):
        yield {"direct": direct, "meta": meta}


async def person_connects(link: str, user: str) -> None:
    said: list[str] = []
    done = await anyio.to_thread.run_sync(functools.partial(connect_account, link, user=user, say=said.append))
    assert done, said


async def listed_tools(url: str) -> dict[str, Any]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": "Bearer demo-lister"}) as http,
        Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client,
    ):
        return {t.name: t for t in (await client.list_tools()).tools}


async def meta(served: Served, tool: str, arguments: dict[str, Any], user: str, **round: Any) -> CallToolResult:
    """One call of a meta-tool by a client that declares no elicitation at all; its complete result."""
    got = await call_round(served.mcp, tool, arguments, token=f"demo-{user}", elicitation=False, **round)
    assert got.error is None and isinstance(got.result, CallToolResult), got
    assert not got.result.is_error, text(got.result)
    assert got.result.structured_content is not None, "every META result is structured"
    return got.result


async def provider_tokens(served: Served, user: str) -> list[str]:
    service = await served.setup.service()
    [account] = await service.accounts_of(user, CONNECTION)
    sealed = await service.accounts.sealed_credential(account.id)
    assert sealed is not None
    tokens = service.vault.open(account.id, sealed)
    return [tokens["access_token"], tokens["refresh_token"]]


async def test_tools_list_shows_the_catalogue_directly_and_the_five_meta_tools_with_their_schemas_in_meta(
    servers: dict[Exposure, Served],
) -> None:
    direct = await listed_tools(servers["direct"].mcp)
    assert set(direct) == {"summarize_inbox", "send_reply", "deploy_release"}
    listed = await listed_tools(servers["meta"].mcp)
    assert set(listed) == META
    for tool in listed.values():
        assert tool.input_schema["type"] == "object", tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
    assert listed["execute_tool"].input_schema["required"] == ["name"]


async def test_the_direct_exposure_runs_the_url_mode_connect_loop(servers: dict[Exposure, Served]) -> None:
    served = servers["direct"]
    first = await call_round(served.mcp, "summarize_inbox", {}, token="demo-dana")
    assert isinstance(first.result, InputRequiredResult), first
    [(key, asked)] = (first.result.input_requests or {}).items()
    params = asked.params.model_dump()
    assert key == f"connect.{CONNECTION}" and params["mode"] == "url"
    await person_connects(params["url"], "dana")
    done = await call_round(
        served.mcp,
        "summarize_inbox",
        {},
        token="demo-dana",
        responses={key: ElicitResult(action="accept")},
        request_state=first.result.request_state,
    )
    assert text(done.result).startswith("3 messages for dana, 2 unread;"), done


async def test_the_meta_loop_completes_for_a_client_without_elicitation_and_shows_no_token(
    servers: dict[Exposure, Served],
) -> None:
    served, user = servers["meta"], "erin"
    results: list[CallToolResult] = []
    # This client declares no elicitation: called directly, the tool cannot ask it for the account.
    direct = await call_round(servers["direct"].mcp, "summarize_inbox", {}, token=f"demo-{user}", elicitation=False)
    assert direct.error is not None and direct.error.error.code == -32021, direct

    async def call(tool: str, **arguments: Any) -> dict[str, Any]:
        results.append(await meta(served, tool, arguments, user))
        found = results[-1].structured_content
        assert found is not None
        return found

    [hit] = (await call("search_tools", query="inbox"))["tools"]
    assert hit == {
        "name": "summarize_inbox",
        "description": "Summarize the caller's inbox at Demo Mail.",
        "connections": [{"connection": CONNECTION, "readiness": "needs_connection"}],
    }
    described = await call("get_tool", name="send_reply")
    assert described["inputSchema"]["required"] == ["subject"] and described["connections"] == [CONNECTION]

    assert await call("execute_tool", name="summarize_inbox") == {"status": "not_connected", "connection": CONNECTION}
    link = await call("connect_account", connection=CONNECTION)
    assert link["host"] == "127.0.0.1" and link["url"].startswith(f"{served.mcp.removesuffix('/mcp')}/accounts/start")
    assert link["url"] in text(results[-1])
    assert await call("check_readiness", name="summarize_inbox") == {
        "ready": False,
        "connections": [{"connection": CONNECTION, "readiness": "needs_connection"}],
    }
    await person_connects(link["url"], user)
    assert (await call("check_readiness", connections=[CONNECTION]))["ready"] is True

    answered = await call("execute_tool", name="summarize_inbox")
    assert answered["result"].startswith(f"3 messages for {user}, 2 unread;")
    assert text(results[-1]) == answered["result"]

    store = await served.app.store()
    trail = await store.audit_log.query(AuditFilter(tool="summarize_inbox", principal=user))
    assert [(e.event, e.outcome) for e in trail] == [("completed", "not_connected")]

    canaries = await provider_tokens(served, user)
    wire = json.dumps([r.model_dump(mode="json", by_alias=True) for r in results])
    audit = json.dumps([e.__dict__ for e in trail], default=str)
    for token in canaries:
        assert token and len(token) > 20
        assert token not in wire and token not in audit


async def test_execute_tool_passes_the_tools_own_form_question_through_and_answers_what_the_tool_answers(
    servers: dict[Exposure, Served],
) -> None:
    user = "fay"
    direct, served = servers["direct"], servers["meta"]
    arguments = {"name": "send_reply", "arguments": {"subject": "launch"}}

    async def confirmed(url: str, tool: str, given: dict[str, Any]) -> CallToolResult | InputRequiredResult | None:
        asked = await call_round(url, tool, given, token=f"demo-{user}")
        assert isinstance(asked.result, InputRequiredResult), asked
        assert list(asked.result.input_requests or {}) == ["confirm_reply"]
        answer = {"confirm_reply": ElicitResult(action="accept", content={"confirm": True})}
        done = await call_round(
            url, tool, given, token=f"demo-{user}", responses=answer, request_state=asked.result.request_state
        )
        return done.result

    first = await confirmed(served.mcp, "execute_tool", arguments)
    assert isinstance(first, CallToolResult)
    assert first.structured_content == {"status": "not_connected", "connection": CONNECTION}
    link = (await meta(served, "connect_account", {"connection": CONNECTION}, user)).structured_content
    assert link is not None
    await person_connects(link["url"], user)
    through_meta = await confirmed(served.mcp, "execute_tool", arguments)

    # The same tool called directly (once fay has connected there too) answers the same.
    await person_connects(await (await direct.setup.service()).link(user, CONNECTION, flow_id="direct-fay"), user)
    through_direct = await confirmed(direct.mcp, "send_reply", {"subject": "launch"})
    assert isinstance(through_meta, CallToolResult) and isinstance(through_direct, CallToolResult)
    assert through_meta.structured_content == through_direct.structured_content
    assert through_meta.structured_content == {"subject": "Re: launch", "to": "ops@example.com"}
    assert [c.model_dump() for c in through_meta.content] == [c.model_dump() for c in through_direct.content]


async def test_a_revoked_account_reads_needs_reauth_and_execute_tool_answers_reauth_needed(
    servers: dict[Exposure, Served],
) -> None:
    served, user = servers["meta"], "gus"
    link = (await meta(served, "connect_account", {"connection": CONNECTION}, user)).structured_content
    assert link is not None
    await person_connects(link["url"], user)
    assert (await meta(served, "execute_tool", {"name": "summarize_inbox"}, user)).structured_content != {
        "status": "not_connected",
        "connection": CONNECTION,
    }

    service = await served.setup.service()
    [account] = await service.accounts_of(user, CONNECTION)
    await service.tokens.revoke(account)
    [revoked] = await service.accounts_of(user, CONNECTION)
    assert revoked.status is Status.REVOKED

    readiness = await meta(served, "check_readiness", {"name": "summarize_inbox"}, user)
    assert readiness.structured_content == {
        "ready": False,
        "connections": [{"connection": CONNECTION, "readiness": "needs_reauth"}],
    }
    ran = await meta(served, "execute_tool", {"name": "summarize_inbox"}, user)
    assert ran.structured_content == {"status": "reauth_needed", "connection": CONNECTION}
    again = await meta(served, "connect_account", {"connection": CONNECTION}, user)
    assert again.structured_content is not None
    await person_connects(again.structured_content["url"], user)
    back = await meta(served, "execute_tool", {"name": "summarize_inbox"}, user)
    assert back.structured_content is not None
    assert back.structured_content["result"].startswith(f"3 messages for {user}")


@pytest.mark.parametrize(
    ("label", "said"),
    [
        ("w" * (1 << 20), "longer than 128 characters"),
        ("work\nACTIVE", "U+000A"),
        ("work\u202egpj", "U+202E"),
        ("work\x1b]52;c;eA==\x07", "U+001B"),
    ],
    ids=["1 MB", "a newline", "U+202E", "ESC"],
)
async def test_connect_account_refuses_a_label_too_long_or_with_control_or_bidi_characters_and_stores_nothing(
    servers: dict[Exposure, Served], label: str, said: str
) -> None:
    served, user = servers["meta"], f"label-{secrets.token_hex(4)}"
    got = await call_round(
        served.mcp,
        "connect_account",
        {"connection": CONNECTION, "label": label},
        token=f"demo-{user}",
        elicitation=False,
    )
    assert got.error is None and isinstance(got.result, CallToolResult), got
    assert got.result.is_error
    message = text(got.result)
    assert said in message and "short label on one line" in message and label not in message
    service = await served.setup.service()
    assert await service.accounts_of(user, CONNECTION) == []
    # A label a person would give is taken.
    work = await meta(served, "connect_account", {"connection": CONNECTION, "label": "work (ana@example.com)"}, user)
    assert work.structured_content is not None and work.structured_content["connection"] == CONNECTION


async def test_an_unknown_connection_is_a_tool_error_naming_the_configured_ones_and_never_the_servers_files(
    servers: dict[Exposure, Served],
) -> None:
    served = servers["meta"]
    for tool, arguments in [
        ("connect_account", {"connection": "gmial"}),
        ("check_readiness", {"connections": ["gmial"]}),
    ]:
        got = await call_round(served.mcp, tool, arguments, token="demo-hal", elicitation=False)
        assert got.error is None and isinstance(got.result, CallToolResult), got
        assert got.result.is_error, got.result
        said = text(got.result)
        assert "'gmial'" in said and f"the connections are: {CONNECTION}." in said, said
        assert "secret-dir" not in said and "toml" not in said and "/" not in said, said
    many = await call_round(
        served.mcp,
        "check_readiness",
        {"connections": [f"c{i}" for i in range(65)]},
        token="demo-hal",
        elicitation=False,
    )
    assert isinstance(many.result, CallToolResult) and many.result.is_error, many
    assert text(many.result).endswith("Name at most 64 connections at once.")


async def test_a_tool_needing_a_scope_answers_403_insufficient_scope_through_execute_tool_as_it_does_directly(
    servers: dict[Exposure, Served],
) -> None:
    async def refused(url: str, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        }
        params = {"name": tool, "arguments": arguments, "_meta": meta}
        headers = {
            "Authorization": "Bearer demo-ivy",
            "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream",
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        async with httpx2.AsyncClient() as http:
            body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
            return await http.post(url, json=body, headers=headers)

    direct = await refused(servers["direct"].mcp, "deploy_release", {"version": "1.2"})
    through_meta = await refused(
        servers["meta"].mcp, "execute_tool", {"name": "deploy_release", "arguments": {"version": "1.2"}}
    )
    for reply in (direct, through_meta):
        assert reply.status_code == 403, reply.text
        assert 'error="insufficient_scope"' in reply.headers["WWW-Authenticate"]
        assert reply.json()["scope"] == "deploy"
    assert through_meta.json() == direct.json()


async def test_connect_account_past_the_pending_cap_is_a_tool_error_naming_the_limit_and_stores_nothing(
    servers: dict[Exposure, Served],
) -> None:
    served = servers["meta"]
    for n in range(PENDING_CAP):
        await meta(served, "connect_account", {"connection": CONNECTION, "label": f"box {n}"}, "kim")
    got = await call_round(
        served.mcp, "connect_account", {"connection": CONNECTION, "label": "one more"}, token="demo-kim"
    )
    assert got.error is None and isinstance(got.result, CallToolResult), got
    assert got.result.is_error
    assert f"you already hold {PENDING_CAP} whose link was never used" in text(got.result)
    service = await served.setup.service()
    assert len(await service.accounts_of("kim", CONNECTION)) == PENDING_CAP
    # A link to an account kim already has is still given, and lee is not affected.
    await meta(served, "connect_account", {"connection": CONNECTION, "label": "box 0"}, "kim")
    await meta(served, "connect_account", {"connection": CONNECTION, "label": "box 0"}, "lee")
