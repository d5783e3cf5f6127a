"""The official TypeScript v2 client (`@modelcontextprotocol/client`, run by `interop/ts-meta-client.mjs` under Node
22) through askback's META exposure, declaring no elicitation at all: `execute_tool` answers `not_connected`,
`connect_account` gives the link, a person connects the account at Demo Mail (plain HTTP through the hosted pages
with the development sign-in, `askback.demo.person`), `check_readiness` says `ready`, and `execute_tool` answers what
the tool answers. The TS client checks every structured result against the tool's output schema itself.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from pydantic import SecretStr

from askback import Askback, Flow, load_settings
from askback.accounts.vault import new_key
from askback.demo.mail import DemoMail, callback_url, mail_accounts, summarize
from askback.demo.person import connect_account
from askback.demo.provider import serving_provider
from askback.server import DemoTokenVerifier, build_app
from infra import INTEROP, interop_node, serving_asgi

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SCRIPT = INTEROP / "ts-meta-client.mjs"
CONNECTION = "demo-mail"


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node_path() -> str:
    """A PATH with Node 22 first, interop/node_modules installed from its lockfile (`infra.interop_node`)."""
    if shutil.which("node") is None and shutil.which("npm") is None:
        pytest.skip("neither node nor npm is installed; the TypeScript client cannot run here")
    return f"{interop_node().parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="module")
async def meta_url(listener: socket.socket, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    base = f"http://127.0.0.1:{listener.getsockname()[1]}"
    secret = secrets.token_urlsafe(32)
    with serving_provider(client_secret=secret, redirect_uris=[callback_url(base)]) as provider:
        settings = load_settings(
            database_url=f"sqlite:///{tmp_path_factory.mktemp('meta-ts') / 'askback.db'}",
            state_keys=secrets.token_urlsafe(32),
            vault_keys=new_key(),
            expose="meta",
        )
        mail = DemoMail(provider.issuer, SecretStr(secret), base, SecretStr(secrets.token_urlsafe(32)))
        app = Askback("mail", settings=settings, extensions=[mail_accounts(mail, settings)])

        @app.tool(connections=[CONNECTION])
        async def summarize_inbox(flow: Flow) -> str:
            """Summarize the caller's inbox at Demo Mail."""
            account = await flow.connect(CONNECTION)
            return summarize((await account.http.get(provider.messages_url)).json())

        async with serving_asgi(build_app(app, token_verifier=DemoTokenVerifier()), listener) as served:
            yield f"{served}/mcp"


def walk_meta_loop(node_path: str, url: str, user: str) -> tuple[dict[str, Any], list[str]]:
    """Run the TS client; when it prints the link, connect the account as `user`, then let it go on. Its report and
    what the person saw."""
    said: list[str] = []
    with subprocess.Popen(
        ["node", str(SCRIPT), url, "summarize_inbox", "--user", user],
        env={**os.environ, "PATH": node_path},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stdin is not None
            first = json.loads(proc.stdout.readline())
            if "link" in first:
                said.append(str(connect_account(first["link"], user=user, say=said.append)))
                proc.stdin.write("done\n")
                proc.stdin.flush()
                report = json.loads(proc.stdout.readline())
            else:
                report = first
            proc.stdin.close()
            assert proc.wait(timeout=60) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
    return report, said


async def test_the_typescript_client_without_elicitation_walks_the_meta_loop_to_the_tools_result(
    node_path: str, meta_url: str
) -> None:
    with anyio.fail_after(120):
        report, said = await anyio.to_thread.run_sync(walk_meta_loop, node_path, meta_url, "hana")
    assert report["ok"], report
    assert report["protocolVersion"] == "2026-07-28"
    assert [t["name"] for t in report["tools"]] == [
        "search_tools",
        "get_tool",
        "check_readiness",
        "connect_account",
        "execute_tool",
    ]
    assert all(t["hasInputSchema"] and t["hasOutputSchema"] for t in report["tools"]), report["tools"]
    assert said[-1] == "True", said
    calls = [(c["name"], c["structured"]) for c in report["calls"]]
    assert calls[0] == ("execute_tool", {"status": "not_connected", "connection": CONNECTION})
    assert calls[1][0] == "connect_account" and calls[1][1]["host"] == "127.0.0.1"
    assert calls[2] == (
        "check_readiness",
        {"ready": True, "connections": [{"connection": CONNECTION, "readiness": "ready"}]},
    )
    assert calls[3][0] == "execute_tool" and calls[3][1]["result"].startswith("3 messages for hana, 2 unread;")
    assert not any(c["isError"] for c in report["calls"]), report["calls"]
