"""The official TypeScript v2 client (`@modelcontextprotocol/client`, run by `interop/ts-client.mjs` under Node 22)
against the demo server over real HTTP, pinned to 2026-07-28 (`input_required` rounds) and in its default 2025-11-25
mode (questions pushed on the session). The script reports what happened as one JSON line; the assertions live here,
together with the effects and the audit trail the server recorded.

Deletes are real and a deleted project cannot be asked about again, so each era gets its own server and database:
`prj_99` (billing-legacy) is the one deleted, `prj_42` (web-frontend) is only ever declined or refused. That keeps
every test independent of the order the tests run in."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from _http import audit, served
from askback.audit import AuditEvent
from infra import INTEROP, interop_node

pytestmark = pytest.mark.http

SCRIPT = INTEROP / "ts-client.mjs"
MODES = ("modern", "legacy")
VERSIONS = {"modern": "2026-07-28", "legacy": "2025-11-25"}


@dataclass(frozen=True)
class Server:
    mode: str
    url: str
    database: str


@pytest.fixture(scope="session")
def node_path() -> str:
    """A PATH with Node 22 first, interop/node_modules installed from its lockfile (`infra.interop_node`)."""
    if shutil.which("node") is None and shutil.which("npm") is None:
        pytest.skip("neither node nor npm is installed; the TypeScript client cannot run here")
    return f"{interop_node().parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    mode: str = request.param
    db = tmp_path_factory.mktemp(f"ts-{mode}") / "db.sqlite"
    with served(f"sqlite:///{db}", [secrets.token_urlsafe(48)], workers=1) as demo:
        yield Server(mode, demo.url, demo.database_url)


def ts_client(node_path: str, server: Server, scenario: str, *, project: str, user: str) -> dict[str, Any]:
    argv = ["node", str(SCRIPT), server.url, server.mode, scenario, "--project", project, "--user", user]
    done = subprocess.run(
        argv, env={**os.environ, "PATH": node_path}, capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, f"ts-client.mjs exited {done.returncode}:\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1, f"expected one JSON line, got:\n{done.stdout}\n{done.stderr}"
    report: dict[str, Any] = json.loads(lines[0])
    assert report["protocolVersion"] == VERSIONS[server.mode], report
    return report


def effects(server: Server, user: str) -> dict[str, list[dict[str, Any]]]:
    """What `list_deployments` says `user` did, read through the Python SDK client as another user."""

    async def read() -> dict[str, Any]:
        with anyio.fail_after(30):
            async with (
                httpx2.AsyncClient(headers={"Authorization": "Bearer demo-observer"}) as http,
                Client(streamable_http_client(server.url, http_client=http)) as client,
            ):
                listing = await client.call_tool("list_deployments", {})
                projects = await client.call_tool("list_projects", {})
        assert listing.structured_content is not None and projects.structured_content is not None
        return {**listing.structured_content, "projects": projects.structured_content["projects"]}

    seen = anyio.run(read)
    return {
        "deployments": [d for d in seen["deployments"] if d["by"] == user],
        "deletions": [d for d in seen["deletions"] if d["by"] == user],
        "projects": seen["projects"],
    }


def audit_of(server: Server, user: str) -> list[AuditEvent]:
    async def read() -> list[AuditEvent]:
        with anyio.fail_after(30):
            return await audit(server.database, principal=user)

    return anyio.run(read)


def trail(events: list[AuditEvent]) -> list[tuple[str, tuple[str, ...], str | None]]:
    return [(e.event, e.keys, e.action or e.outcome) for e in events]


def test_accepting_the_typed_name_deletes_the_project_once(node_path: str, server: Server) -> None:
    user = f"ts-{server.mode}-delete-accept"
    report = ts_client(node_path, server, "delete-accept", project="prj_99", user=user)
    assert report["ok"] and not report["isError"], report
    assert report["text"] == "Deleted billing-legacy."
    assert report["asked"] == ["project_name"]
    seen = effects(server, user)
    assert seen["deletions"] == [{"project_id": "prj_99", "name": "billing-legacy", "by": user}]
    assert "prj_99" not in [p["id"] for p in seen["projects"]]
    assert trail(audit_of(server, user)) == [
        ("asked", ("confirm_project",), None),
        ("answered", ("confirm_project",), "accept"),
        ("completed", (), "completed"),
    ]


def test_declining_completes_with_the_message_and_deletes_nothing(node_path: str, server: Server) -> None:
    user = f"ts-{server.mode}-delete-decline"
    report = ts_client(node_path, server, "delete-decline", project="prj_42", user=user)
    assert report["ok"] and not report["isError"], report
    assert report["text"].startswith("Cancelled"), report
    assert report["asked"] == ["project_name"]
    seen = effects(server, user)
    assert seen["deletions"] == []
    assert {"id": "prj_42", "name": "web-frontend"} in seen["projects"]
    assert trail(audit_of(server, user)) == [
        ("asked", ("confirm_project",), None),
        ("answered", ("confirm_project",), "decline"),
        ("completed", (), "declined"),
    ]


def test_a_production_deploy_takes_two_rounds_and_deploys_once(node_path: str, server: Server) -> None:
    user = f"ts-{server.mode}-deploy-production"
    report = ts_client(node_path, server, "deploy-production", project="prj_42", user=user)
    assert report["ok"] and not report["isError"], report
    assert report["text"] == f"Deployed ts-{server.mode} to production."
    assert report["asked"] == ["environment", "confirm"]
    assert effects(server, user)["deployments"] == [
        {"service": f"ts-{server.mode}", "environment": "production", "by": user}
    ]
    events = audit_of(server, user)
    assert trail(events) == [
        ("asked", ("pick_env",), None),
        ("answered", ("pick_env",), "accept"),
        ("asked", ("confirm_prod",), None),
        ("answered", ("confirm_prod",), "accept"),
        ("completed", (), "completed"),
    ]
    assert [e.round for e in events] == [1, 1, 2, 2, 2]
    assert len({e.flow_id for e in events}) == 1


def test_a_client_without_elicitation_gets_32021_and_nothing_happens(node_path: str, server: Server) -> None:
    user = f"ts-{server.mode}-no-elicitation"
    report = ts_client(node_path, server, "no-elicitation", project="prj_42", user=user)
    # Both eras: the TS client raises MissingRequiredClientCapabilityError carrying the server's -32021.
    assert not report["ok"] and report["text"] is None, report
    assert report["errorCode"] == -32021, report
    assert report["errorData"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
    assert report["asked"] == []
    seen = effects(server, user)
    assert seen["deletions"] == []
    assert {"id": "prj_42", "name": "web-frontend"} in seen["projects"]
    assert trail(audit_of(server, user)) == [("rejected", (), "missing_capability")]


def test_the_audit_times_each_answer_when_it_arrived(node_path: str, server: Server) -> None:
    """The audit says who answered what, and when: an answer cannot be recorded at or before the moment its question
    was asked. Each answer here crosses HTTP to a Node process and back, so real time passes between the two."""
    user = f"ts-{server.mode}-audit-times"
    report = ts_client(node_path, server, "deploy-production", project="prj_42", user=user)
    assert report["text"] == f"Deployed ts-{server.mode} to production.", report
    events = audit_of(server, user)
    asked = {e.keys: e.at for e in events if e.event == "asked"}
    answered = {e.keys: e.at for e in events if e.event == "answered"}
    assert set(asked) == set(answered) == {("pick_env",), ("confirm_prod",)}
    late = {keys[0]: (asked[keys], answered[keys]) for keys in asked if answered[keys] <= asked[keys]}
    assert late == {}, f"answers recorded no later than their questions were asked (asked at, answered at): {late}"
    assert answered[("pick_env",)] <= asked[("confirm_prod",)]
