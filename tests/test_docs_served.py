"""Every runnable example of README.md and docs/*.md that defines an app with tools is served and called, as a reader
would: the block, as written, goes to a temporary folder as `ops.py`; `askback serve ops:app` serves it on a free
loopback port, with a state key and a SQLite file of its own and none of this process's `ASKBACK_*` settings; and the
official SDK client calls each of its tools over Streamable HTTP, answering every question as a person would (`CALLS`)
until the call completes. A call that fails, completes with an error (`isError`, such as the SDK's "Error executing
tool" when the handler raises) or says something else than `CALLS` expects fails the test; so does a served tool
`CALLS` does not say how to call.

The approval of README.md's `drop_database` is given as its example's development sign-in gives it: erin, in `sre`,
signs in on the approvals' pages and approves. The example's `base_url` names port 8000, where `askback serve` listens
by default, so the link it asks the caller to open does too; erin opens the same path on the port the test serves on.

Runnable examples with tools that are not served here, and why (`NOT_SERVED`):
- docs/testing.md's builds its app inside a function and calls it itself, in process, with the SDK's in-memory client:
  it is its own test, and `test_docs.py` runs it.
"""

from __future__ import annotations

import ast
import contextlib
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult

from askback.core.capabilities import MRTR_REVISION
from askback.core.plan import Answerer
from askback.demo.approval_walk import ApproverBrowser
from askback.testing import accept, drive_flow, free_port, text
from infra import running_process
from test_docs import ALL_BLOCKS, Block


@dataclass(frozen=True)
class Call:
    """How a person calls one tool of an example, and what the completed call says."""

    arguments: dict[str, Any]
    said: str
    answers: dict[str, dict[str, Any]] = field(default_factory=dict)  # form content, by question key
    approver: str | None = None  # who approves on the approvals' pages, signed in with the development sign-in


CALLS: dict[tuple[str, str], Call] = {
    ("README.md", "delete_project"): Call(
        {"project_id": "prj_42"}, "Deleted billing-legacy.", {"confirm_project": {"project_name": "billing-legacy"}}
    ),
    ("README.md", "drop_database"): Call(
        {"name": "billing-legacy"}, "Dropped billing-legacy, approved by erin.", approver="erin"
    ),
    ("docs/capabilities.md", "deploy"): Call(
        {"service": "web"}, "Deployed web to staging.", {"pick_env": {"environment": "staging"}}
    ),
    ("docs/effects.md", "delete_project"): Call(
        {"project_id": "prj_42"}, "Deleted billing-legacy.", {"confirm_project": {"project_name": "billing-legacy"}}
    ),
    # Called as a client without the tasks extension calls it: in MRTR rounds on tools/call.
    ("docs/tasks.md", "deploy"): Call({"service": "web"}, "Deployed web.", {"ok": {"ok": True}}),
}

NOT_SERVED = {"docs/testing.md": "builds its app in a function and drives it in process; test_docs.py runs it"}


def tools_of(block: Block) -> list[str]:
    """The tools a block's module-level `app = Askback(...)` registers with `@app.tool(...)`; none without one."""
    tree = ast.parse(block.source)
    app = any(
        isinstance(node, ast.Assign)
        and any(isinstance(target, ast.Name) and target.id == "app" for target in node.targets)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "Askback"
        for node in tree.body
    )
    if not app:
        return []
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.AsyncFunctionDef | ast.FunctionDef)
        and any(ast.unparse(decorator).startswith("app.tool(") for decorator in node.decorator_list)
    ]


SERVED = [block for block in ALL_BLOCKS if block.kind == "runnable" and tools_of(block)]


def test_every_runnable_example_with_tools_is_served_or_says_why_not() -> None:
    with_tools = {block.page for block in ALL_BLOCKS if block.kind == "runnable" and ".tool(" in block.source}
    assert with_tools - {block.page for block in SERVED} == set(NOT_SERVED)
    assert {"README.md", "docs/capabilities.md", "docs/effects.md", "docs/tasks.md"} <= {block.page for block in SERVED}


def test_every_call_is_of_a_tool_a_served_example_defines() -> None:
    defined = {(block.page, tool) for block in SERVED for tool in tools_of(block)}
    assert set(CALLS) == defined


@contextlib.contextmanager
def serving_example(folder: Path) -> Iterator[str]:
    """`askback serve ops:app` from `folder` on a free loopback port until the block ends; yields its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(32), "ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'ops.db'}"}

    def ready() -> bool:
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    argv = [sys.executable, "-m", "askback", "serve", "ops:app", "--port", str(port)]
    log = folder / "serve.log"
    with running_process(
        argv, ready=ready, what="askback serve ops:app", log=log, cwd=folder, env=env, own_settings=True
    ):
        yield base


async def listed_tools(url: str) -> list[str]:
    async with (
        httpx2.AsyncClient() as http,
        Client(streamable_http_client(url, http_client=http), mode=MRTR_REVISION) as client,
    ):
        return sorted(tool.name for tool in (await client.list_tools()).tools)


def answering_as_people(call: Call, base: str, asked: list[str]) -> Answerer:
    """Answers each question with the form content `call` gives for its key, or, for a link to an approval request,
    approves it on the approvals' pages as `call.approver` and accepts the link; records each key in `asked`."""

    def answer(key: str, params: dict[str, Any]) -> ElicitResult:
        asked.append(key)
        if key in call.answers:
            return accept(**call.answers[key])
        if params.get("mode") == "url" and call.approver is not None:
            request = urlsplit(str(params["url"])).path.removesuffix("/status")
            with ApproverBrowser(call.approver) as approver:
                said = approver.decide(f"{base}{request}", "approve", "checked: nothing uses it any more")
            assert said.startswith("You approved the request"), said
            return accept()
        raise AssertionError(f"a question CALLS has no answer for: {key} {params}")

    return answer


@pytest.mark.http
@pytest.mark.parametrize("block", [pytest.param(block, id=block.id) for block in SERVED])
def test_a_served_example_completes_every_call_of_each_of_its_tools(block: Block, tmp_path: Path) -> None:
    (tmp_path / "ops.py").write_text(block.source)
    with serving_example(tmp_path) as base:
        url = f"{base}/mcp"
        tools = anyio.run(listed_tools, url)
        assert tools == sorted(tools_of(block)), f"{block.id} serves {tools}"
        for tool in tools:
            call, asked = CALLS[(block.page, tool)], []
            sent = anyio.run(drive_flow, url, tool, call.arguments, answering_as_people(call, base, asked))
            last = sent[-1][1]
            assert last.error is None, f"{block.id}: {tool} failed: {last.error!r}"
            assert isinstance(last.result, CallToolResult), f"{block.id}: {tool} ended with {last.result!r}"
            said = text(last.result)
            failed = last.result.is_error or "Error executing tool" in said
            assert not failed, f"{block.id}: {tool} completed with an error: {said}"
            assert said == call.said, f"{block.id}: {tool}"
            assert set(call.answers) <= set(asked), f"{block.id}: {tool} asked {asked}"
            assert call.approver is None or any(key.startswith("askback.approval.") for key in asked), asked
