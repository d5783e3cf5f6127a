"""The official TypeScript tasks client (`@modelcontextprotocol/ext-tasks` 0.2 on `@modelcontextprotocol/client` 2,
run by `interop/ts-tasks-client.mjs` under Node 22) running the demo's `deploy` as a task against three askback
instances behind nginx on PostgreSQL.

nginx sends each request to the next instance, so the task is created on one instance and polled and answered on
the others. Which instance served what is read twice: the client notes each response's `X-Askback-Instance`, and
each instance's own log holds the audit lines of the runs it started (the creation's run asks `pick_env`, each
`tasks/update` that completes a round reruns the handler where it landed). The two must agree.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_types import CallToolResult

from askback.testing import call_round
from infra import INTEROP, Instance, Nginx, behind_nginx, interop_node, postgres, run_askback, wait_until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.http,
    pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"), reason="needs nginx"),
]

DEMO = "askback.demo:server"
SCRIPT = INTEROP / "ts-tasks-client.mjs"
POLL_INTERVAL_MS = 200


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def node() -> Path:
    """Node 22 with interop/node_modules installed from the lockfile (`@modelcontextprotocol/ext-tasks` among them)."""
    if shutil.which("node") is None and shutil.which("npm") is None:
        pytest.skip("neither node nor npm is installed; the TypeScript client cannot run here")
    return interop_node()


@dataclass
class Cluster:
    instances: list[Instance]
    nginx: Nginx

    def instance(self, instance_id: str | None) -> Instance:
        """The instance whose process is `host:pid`."""
        found = [i for i in self.instances if i.proc is not None and f"{instance_id}".endswith(f":{i.proc.pid}")]
        assert len(found) == 1, f"{instance_id!r} is none of the cluster's instances"
        return found[0]

    def requests_from_node(self) -> int:
        """How many requests nginx has passed on from a Node client so far."""
        log = self.nginx.root / "access.log"
        return sum(1 for line in log.read_text().splitlines() if '"POST /mcp ' in line and line.endswith('"node"'))


@pytest.fixture(scope="module")
def cluster(node: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three instances of the demo behind nginx's round-robin, on one PostgreSQL, telling clients to poll every
    200 ms."""
    with postgres() as pg:
        pg.create_database("askback")
        url = pg.url("askback")
        upgraded = run_askback("db", "upgrade", "--database", url, env={}, timeout=120)
        assert upgraded.returncode == 0, upgraded.stderr
        env = {
            "ASKBACK_DATABASE_URL": url,
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_TASK_POLL_INTERVAL": str(POLL_INTERVAL_MS),
            # One line per event: the tests find which instance asked or took each question.
            "ASKBACK_AUDIT_LOG": "event",
        }
        with behind_nginx(DEMO, env, tmp_path_factory.mktemp("nginx")) as (instances, nginx):
            yield Cluster(instances, nginx)


def run_ts_tasks_client(
    node: Path, url: str, tool: str, arguments: dict[str, Any], *, user: str, answers: dict[str, Any]
) -> dict[str, Any]:
    """The client's one-line report."""
    done = subprocess.run(
        [str(node), str(SCRIPT), url, tool, json.dumps(arguments), "--user", user, "--answers", json.dumps(answers)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


async def deploy_as_task(node: Path, cluster: Cluster, service: str, user: str, confirm: bool) -> dict[str, Any]:
    answers = {"pick_env": {"environment": "production"}, "confirm_prod": {"confirm": confirm}}
    with anyio.fail_after(150):
        return await anyio.to_thread.run_sync(
            lambda: run_ts_tasks_client(
                node, cluster.nginx.url, "deploy", {"service": service}, user=user, answers=answers
            )
        )


def result_text(report: dict[str, Any]) -> str:
    result = CallToolResult.model_validate(report["result"])
    assert not result.is_error, result
    return "".join(getattr(block, "text", "") for block in result.content)


def audit_lines(instance: Instance, principal: str) -> list[dict[str, Any]]:
    """The audit lines of `principal`'s deploy runs in this instance's own log."""
    lines = [json.loads(line) for line in instance.log.read_text().splitlines() if line.startswith("{")]
    return [
        line
        for line in lines
        if line.get("logger") == "askback.audit" and line.get("principal") == principal and line.get("tool") == "deploy"
    ]


def runs_by_instance(cluster: Cluster, principal: str) -> dict[str, list[dict[str, Any]]]:
    """Each instance's audit lines of `principal`'s deploy, by instance id, once the task's end is logged (it is
    written just after the end is committed, so a client may see the end first)."""

    def ended() -> bool:
        return any(
            line["askback_event"] == "completed" for i in cluster.instances for line in audit_lines(i, principal)
        )

    wait_until(ended, timeout=15, what=f"the end of {principal}'s task in an instance's log")
    found: dict[str, list[dict[str, Any]]] = {}
    for instance in cluster.instances:
        for line in audit_lines(instance, principal):
            assert cluster.instance(line["instance"]) is instance, line
            found.setdefault(line["instance"], []).append(line)
    return found


def where(runs: dict[str, list[dict[str, Any]]], event: str, key: str) -> str:
    """The one instance whose log has `event` for the question `key` (`asked` names the wire key)."""
    hits = [
        instance
        for instance, lines in runs.items()
        for line in lines
        if line["askback_event"] == event and any(k == key or k.startswith(f"{key}.") for k in line["keys"])
    ]
    assert len(hits) == 1, (event, key, runs)
    return hits[0]


async def deployments_of(cluster: Cluster, service: str) -> list[dict[str, Any]]:
    listing = await call_round(cluster.nginx.url, "list_deployments", {}, token="demo-observer")
    assert isinstance(listing.result, CallToolResult) and isinstance(listing.result.structured_content, dict)
    return [d for d in listing.result.structured_content["deployments"] if d["service"] == service]


async def test_the_typescript_tasks_client_deploys_through_nginx_created_on_one_instance_polled_on_others_once(
    node: Path, cluster: Cluster
) -> None:
    before = cluster.requests_from_node()
    report = await deploy_as_task(node, cluster, "web-frontend", "carol", confirm=True)

    assert report["ok"], report
    assert report["created"] is True and report["taskId"], report
    assert [key.split(".")[0] for key in report["inputRequests"]] == ["pick_env", "confirm_prod"], report
    assert report["declined"] == []
    assert result_text(report) == "Deployed web-frontend to production."
    assert await deployments_of(cluster, "web-frontend") == [
        {"service": "web-frontend", "environment": "production", "by": "carol"}
    ]

    # Every request went through nginx; those of the task came after the client's discovery and tools/list.
    served = [(method, instance) for method, instance in report["served"]]
    assert cluster.requests_from_node() - before == len(served)
    task = served[[method for method, _ in served].index("tools/call") :]
    methods = [method for method, _ in task]
    assert set(methods[1:]) == {"tasks/get", "tasks/update"} and methods.count("tasks/update") == 2, methods
    assert methods[1] == "tasks/get" and methods[-1] == "tasks/get", methods
    created_on = task[0][1]
    assert len({instance for _, instance in task}) >= 2, task
    assert any(instance != created_on for method, instance in task if method == "tasks/get"), task

    # The instances' own logs: the creation's run asked pick_env where tools/call landed, and each answer was taken
    # by the instance its tasks/update landed on, which reran the handler there.
    runs = runs_by_instance(cluster, "carol")
    updates = [instance for method, instance in task if method == "tasks/update"]
    assert where(runs, "asked", "pick_env") == created_on
    assert where(runs, "answered", "pick_env") == updates[0]
    assert where(runs, "asked", "confirm_prod") == updates[0]
    assert where(runs, "answered", "confirm_prod") == updates[1]
    completed = [line for lines in runs.values() for line in lines if line["askback_event"] == "completed"]
    assert [(line["instance"], line["outcome"]) for line in completed] == [(updates[1], "completed")]


async def test_the_typescript_tasks_client_answering_no_to_production_ends_the_task_without_deploying(
    node: Path, cluster: Cluster
) -> None:
    report = await deploy_as_task(node, cluster, "billing-api", "dana", confirm=False)

    assert report["ok"], report
    assert report["created"] is True and report["taskId"], report
    assert [key.split(".")[0] for key in report["inputRequests"]] == ["pick_env", "confirm_prod"], report
    assert report["declined"] == []
    assert result_text(report) == "Cancelled: production deploy not confirmed."
    assert await deployments_of(cluster, "billing-api") == []
    # The person accepted the form with confirm unticked: an answer, not a decline.
    runs = runs_by_instance(cluster, "dana")
    answered = [line for lines in runs.values() for line in lines if line["askback_event"] == "answered"]
    assert sorted((line["keys"][0], line["action"]) for line in answered) == [
        ("confirm_prod", "accept"),
        ("pick_env", "accept"),
    ]
