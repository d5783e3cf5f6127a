"""`askback serve askback.demo.standalone:server`: the demo's mail tool served by one command, outside `askback demo`,
for a client of one's own: its tool list has `summarize_inbox`, Demo Mail answers beside `/mcp`, and a call asks for
the caller's account with a link to the server's own pages."""

from __future__ import annotations

import secrets
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ElicitResult, InputRequiredResult

from askback.demo.person import connect_account
from askback.testing import call_round, free_port, serving, text
from infra import ROOT

pytestmark = [pytest.mark.http, pytest.mark.anyio]


async def test_the_standalone_demo_serves_the_mail_tool_and_demo_mail_with_one_command(tmp_path: Path) -> None:
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    env = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'standalone.db'}",
        "ASKBACK_DEMO_PUBLIC_URL": public,
    }
    with serving("askback.demo.standalone:server", port=port, workers=1, env=env, cwd=str(ROOT)) as url:
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer demo-alice"}) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"summarize_inbox", "delete_project", "deploy"} <= tools
        async with httpx.AsyncClient(timeout=10) as plain:
            metadata = (await plain.get(f"{public}/demo-mail/.well-known/oauth-authorization-server")).json()
            assert metadata["issuer"] == f"{public}/demo-mail"
            asked = await call_round(url, "summarize_inbox", {}, token="demo-alice")
            assert isinstance(asked.result, InputRequiredResult), asked
            [(question_key, question)] = (asked.result.input_requests or {}).items()
            link = question.params.url  # type: ignore[union-attr]
            assert link.startswith(f"{public}/accounts/"), link
            assert (await plain.get(link)).status_code < 500
        # alice connects as a person would (her sign-in, Demo Mail's consent, the callback), and the retry reads her
        # mailbox: Demo Mail, mounted in the same process, issued the grant and serves the messages.
        said: list[str] = []
        assert await anyio.to_thread.run_sync(lambda: connect_account(link, user="alice", say=said.append)), said
        done = await call_round(
            url,
            "summarize_inbox",
            {},
            token="demo-alice",
            responses={question_key: ElicitResult(action="accept")},
            request_state=asked.result.request_state,
        )
        assert "messages for alice" in text(done.result), done
