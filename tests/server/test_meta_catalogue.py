"""The catalogue and the choice of exposure: connections declared with a tool (checked when it is defined), what
`tools/list` shows in each exposure (also through `askback serve --expose`), the readiness states, the search over
names and descriptions, `flow.connect`'s report mode, and the meta-tools' answers to calls that cannot go on."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ClientCapabilities

from askback import Askback, DefinitionError, Flow, load_settings
from askback.audit import AuditFilter
from askback.core import flow as core_flow
from askback.core.flow import readiness
from askback.testing import free_port
from infra import run_askback, wait_until

pytestmark = pytest.mark.anyio

META = ["search_tools", "get_tool", "check_readiness", "connect_account", "execute_tool"]


def make_app(tmp_path: Path, expose: str) -> Askback:
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32), expose=expose
    )
    app = Askback("catalogue", settings=settings)

    @app.tool()
    async def list_repositories(owner: str) -> list[str]:
        """List an owner's repositories."""
        return [f"{owner}/askback"]

    @app.tool()
    async def repository_stats(repository: str) -> dict[str, int]:
        """Stars and forks of one repository."""
        return {"stars": len(repository), "forks": 1}

    @app.tool()
    async def open_issue(title: str) -> str:
        """Open an issue in a repository, with this title."""
        return f"Opened {title!r}."

    return app


@pytest.mark.parametrize(
    ("expose", "listed"),
    [
        ("direct", ["list_repositories", "repository_stats", "open_issue"]),
        ("meta", META),
        ("both", [*META, "list_repositories", "repository_stats", "open_issue"]),
    ],
)
@pytest.mark.http
async def test_tools_list_shows_what_the_exposure_says_and_the_catalogue_holds_every_tool(
    tmp_path: Path, expose: str, listed: list[str]
) -> None:
    app = make_app(tmp_path, expose)
    async with app.running(), Client(app.mcp, mode="2026-07-28") as client:
        tools = (await client.list_tools()).tools
    assert [t.name for t in tools] == listed
    assert list(app.catalogue) == ["list_repositories", "repository_stats", "open_issue"]
    entry = app.catalogue["repository_stats"]
    assert entry.input_schema["required"] == ["repository"] and entry.output_schema is not None


def test_a_tool_declares_the_connections_it_needs_by_their_names(tmp_path: Path) -> None:
    app = make_app(tmp_path, "direct")

    @app.tool(connections=["gmail", "github", "gmail"])
    async def triage(flow: Flow) -> str:
        return "done"

    assert app.catalogue["triage"].connections == ("gmail", "github")
    for wrong in (["Gmail"], ["google drive"], [""], "gmail"):
        with pytest.raises(DefinitionError, match="connection"):
            app.tool(name=f"bad_{len(wrong)}", connections=wrong)(triage)  # type: ignore[arg-type]


@pytest.mark.parametrize("expose", ["meta", "both"])
def test_a_tool_may_not_take_a_meta_tools_name_while_the_meta_tools_are_served(tmp_path: Path, expose: str) -> None:
    app = make_app(tmp_path, expose)

    async def execute_tool() -> str:
        return "mine"

    with pytest.raises(DefinitionError, match="ASKBACK_EXPOSE=direct"):
        app.tool()(execute_tool)
    make_app(tmp_path, "direct").tool()(execute_tool)


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([], "needs_connection"),
        (["PENDING"], "needs_connection"),
        (["ACTIVE"], "ready"),
        (["EXPIRED", "ACTIVE"], "ready"),
        (["EXPIRED"], "needs_reauth"),
        (["REVOKED", "PENDING"], "needs_reauth"),
        (["ERROR"], "needs_reauth"),
    ],
)
def test_readiness_is_ready_with_an_active_account_and_needs_reauth_when_accounts_exist_but_none_is(
    statuses: list[str], expected: str
) -> None:
    assert readiness(statuses) == expected


def test_the_search_needs_every_word_and_puts_name_matches_first(tmp_path: Path) -> None:
    catalogue = make_app(tmp_path, "meta").catalogue
    assert [t.name for t in catalogue.search("repositor", limit=10)] == [
        "list_repositories",
        "repository_stats",
        "open_issue",
    ]
    assert [t.name for t in catalogue.search("repository", limit=10)] == ["repository_stats", "open_issue"]
    assert [t.name for t in catalogue.search("ISSUE title", limit=10)] == ["open_issue"]
    assert [t.name for t in catalogue.search("", limit=2)] == ["list_repositories", "open_issue"]
    assert catalogue.search("deploy", limit=10) == []


@dataclass(frozen=True)
class _Account:
    label: str
    status: str


class _Accounts:
    """A caller's accounts with given statuses; no link may be asked for in the report mode."""

    def __init__(self, *statuses: str) -> None:
        self.found = [_Account("", status) for status in statuses]

    async def accounts(self, connection: str) -> Sequence[_Account]:
        return self.found

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        raise AssertionError("the report mode asks for no link")

    async def recover(self, account: Any) -> Any:
        return account

    def handle(self, account: Any) -> Any:
        return f"handle of the {account.status} account"

    async def aclose(self) -> None:
        return None


@pytest.mark.parametrize(
    ("statuses", "reason"),
    [
        ((), "not_connected"),
        (("PENDING",), "not_connected"),
        (("EXPIRED",), "reauth_needed"),
        (("REVOKED",), "reauth_needed"),
    ],
)
async def test_flow_connect_in_the_report_mode_ends_the_run_naming_the_connection_instead_of_asking(
    statuses: tuple[str, ...], reason: str
) -> None:
    flow = Flow(
        tool="t",
        arguments={},
        capabilities=ClientCapabilities(),
        state=None,
        responses=None,
        now=0.0,
        accounts=_Accounts(*statuses),
        new_id=lambda: "flow-1",
        connect_mode="report",
    )

    async def handler() -> Any:
        return await flow.connect("gmail")

    outcome = await core_flow.run(flow, handler, new_id=lambda: "flow-1")
    assert isinstance(outcome, core_flow.Ended) and outcome.reason == reason
    assert "connect_account(connection='gmail')" in outcome.text


async def test_in_the_report_mode_an_account_named_by_its_label_is_reported_with_the_label() -> None:
    flow = Flow(
        tool="t",
        arguments={},
        capabilities=None,
        state=None,
        responses=None,
        now=0.0,
        accounts=_Accounts("ACTIVE"),
        connect_mode="report",
    )
    ended: list[core_flow.NotReady] = []

    async def handler() -> Any:
        try:
            return await flow.connect("gmail", label="work")
        except core_flow.NotReady as report:
            ended.append(report)
            raise

    outcome = await core_flow.run(flow, handler, new_id=lambda: "flow-1")
    assert isinstance(outcome, core_flow.Ended) and outcome.reason == "not_connected"
    assert "connect_account(connection='gmail', label='work')" in outcome.text
    assert ended[0].report() == {"status": "not_connected", "connection": "gmail", "label": "work"}


async def test_in_the_report_mode_an_active_account_is_handed_over_as_in_the_ask_mode() -> None:
    flow = Flow(
        tool="t",
        arguments={},
        capabilities=None,
        state=None,
        responses=None,
        now=0.0,
        accounts=_Accounts("ACTIVE"),
        connect_mode="report",
    )

    async def handler() -> Any:
        return await flow.connect("gmail")

    outcome = await core_flow.run(flow, handler, new_id=lambda: "flow-1")
    assert isinstance(outcome, core_flow.Returned) and outcome.value == "handle of the ACTIVE account"


async def test_execute_tool_refuses_an_unknown_tool_and_arguments_that_do_not_fit_as_the_sdk_would(
    tmp_path: Path,
) -> None:
    app = make_app(tmp_path, "meta")
    async with app.running(), Client(app.mcp, mode="2026-07-28") as client:
        unknown = await client.call_tool("execute_tool", {"name": "delete_everything"})
        misfit = await client.call_tool("execute_tool", {"name": "open_issue", "arguments": {"title": 42}})
        neither = await client.call_tool("check_readiness", {})
        ran = await client.call_tool("execute_tool", {"name": "repository_stats", "arguments": {"repository": "ab"}})
        store = await app.store()
        refused = await store.audit_log.query(AuditFilter(event="rejected"))
    assert unknown.is_error and "search_tools(query)" in unknown.content[0].text  # type: ignore[union-attr]
    assert misfit.is_error and "Error executing tool open_issue" in misfit.content[0].text  # type: ignore[union-attr]
    assert neither.is_error and "Give name" in neither.content[0].text  # type: ignore[union-attr]
    assert [(e.tool, e.outcome) for e in refused] == [("open_issue", "invalid_arguments")]
    assert ran.structured_content == {"stars": 2, "forks": 1} and not ran.is_error


@contextlib.contextmanager
def askback_serve(*args: str, env: dict[str, str]) -> Iterator[str]:
    """`askback serve ARGS` in a child process until the block ends; yields its /mcp URL."""
    port = free_port()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", "serve", *args, "--port", str(port)],
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, f"askback serve exited {proc.returncode}"
        try:
            return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, timeout=60, what="askback serve to answer /healthz")
        yield f"{base}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def listed_over_http(url: str) -> list[str]:
    async def listing() -> list[str]:
        async with (
            httpx2.AsyncClient(headers={"Authorization": "Bearer demo-lister"}) as http,
            Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client,
        ):
            return [t.name for t in (await client.list_tools()).tools]

    return anyio.run(listing)


@pytest.mark.http
def test_askback_serve_expose_meta_serves_the_meta_tools_and_overrides_the_variable(tmp_path: Path) -> None:
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_EXPOSE": "direct",
    }
    with askback_serve("askback.demo:server", "--expose", "meta", env=env) as url:
        assert listed_over_http(url) == META
    with askback_serve("askback.demo:server", env={**env, "ASKBACK_EXPOSE": "both"}) as url:
        assert listed_over_http(url)[: len(META)] == META and "delete_project" in listed_over_http(url)
    refused = run_askback("serve", "askback.demo:server", "--expose", "everything", cwd=tmp_path)
    assert refused.returncode == 2 and "--expose is direct, meta or both" in refused.stderr
