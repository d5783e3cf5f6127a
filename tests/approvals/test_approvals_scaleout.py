"""Approvals across instances: three `askback serve` processes behind nginx on one PostgreSQL, callers and approvers
all going through nginx's round-robin. For each of several calls at once, two approvals and one denial arrive at the
same moment on different instances: whichever completes first decides, the same on every instance; the caller's
retry reads that outcome wherever it lands; an approved call's effect runs once and a denied one's never. The official
TypeScript tasks client (`@modelcontextprotocol/ext-tasks`) runs the same call as a task through nginx: it is never
asked anything, and its task completes once the approvers decide on the pages."""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import ElicitResult, InputRequiredResult
from tests.approvals.test_approvals_e2e import SECRET, Served, decide, page, send_decision, shown_digest
from tests.approvals.test_approvals_e2e import effects as effects_of

from askback.testing import call_round, free_port, state_of, text
from infra import INTEROP, behind_nginx, interop_node, postgres, run_askback

pytestmark = [pytest.mark.http, pytest.mark.anyio]

KEY = "askback.approval.release"
CALLS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("approvals-cluster")
    with postgres() as pg:
        pg.create_database("askback")
        url = pg.url("askback")
        upgraded = run_askback("db", "upgrade", "--database", url)
        assert upgraded.returncode == 0, upgraded.stderr
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {
            "ASKBACK_DATABASE_URL": url,
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_DEMO_AUTH": "true",
            "APPROVALS_TEST_SIGNIN_SECRET": SECRET,
            "APPROVALS_TEST_BASE_URL": base,
            "APPROVALS_TEST_EFFECTS": str(tmp / "effects.txt"),
        }
        with behind_nginx("tests.fixtures.approvals_server:app", env, tmp / "nginx", port=port) as (_, nginx):
            yield Served(nginx.url, base, tmp / "effects.txt")


async def one_call(served: Served, service: str, outcomes: dict[str, tuple[str, set[str | None]]]) -> None:
    first = await call_round(served.url, "release", {"service": service}, token="demo-alice")
    assert isinstance(first.result, InputRequiredResult), first
    status_url = str((first.result.input_requests or {})[KEY].params.url)  # type: ignore[union-attr]
    decisions: list[httpx.Response] = []

    # Each approver opens the request while it is open, then all three send their decision at the same moment.
    digests = {user: await shown_digest(served, user, status_url) for user in ("bob", "carol", "dave")}

    async def vote(user: str, decision: str) -> None:
        reason = f"{user} on {service}"
        decisions.append(await send_decision(served, user, status_url, decision, reason, digests[user]))

    async with anyio.create_task_group() as group:
        group.start_soon(vote, "bob", "approve")
        group.start_soon(vote, "carol", "approve")
        group.start_soon(vote, "dave", "deny")
    # Each decision is either taken or told the request was decided already (a conflict), never lost or an error.
    assert sorted(d.status_code for d in decisions) in ([200, 200, 409], [200, 409, 409]), [
        (d.status_code, " ".join(re.sub(r"<[^>]+>", " ", d.text.split("<main>")[-1]).split())[:200]) for d in decisions
    ]
    responses = {KEY: ElicitResult(action="accept")}
    state = state_of(first)
    retries = [
        await call_round(
            served.url, "release", {"service": service}, token="demo-alice", responses=responses, request_state=state
        )
        for _ in range(3)
    ]
    said = {text(r.result) for r in retries}
    assert len(said) == 1, said  # every replay, on any instance, reads the same outcome
    outcomes[service] = (said.pop(), {r.instance for r in retries} | {first.instance})


async def test_concurrent_decisions_on_three_instances_decide_each_call_once_and_every_retry_agrees(
    cluster: Served,
) -> None:
    outcomes: dict[str, tuple[str, set[str | None]]] = {}
    async with anyio.create_task_group() as group:
        for n in range(CALLS):
            group.start_soon(one_call, cluster, f"svc{n}", outcomes)
    effects = effects_of(cluster)
    served_by = set().union(*(instances for _, instances in outcomes.values()))
    assert len(served_by - {None}) >= 2, served_by  # the round-robin spread the rounds
    for service, (said, _) in outcomes.items():
        if said.startswith("Released"):
            assert said == f"Released {service}, approved by bob, carol."
            assert effects.count(f"released-{service}") == 1
        else:
            assert said.startswith("Denied:") and "dave" in said, said
            assert f"released-{service}" not in effects


def run_ts_tasks_client(node: Path, url: str, service: str) -> dict[str, Any]:
    """`release` called as a task by the official TypeScript tasks client, as alice, answering nothing: its report."""
    script = INTEROP / "ts-tasks-client.mjs"
    arguments = json.dumps({"service": service})
    done = subprocess.run(
        [str(node), str(script), url, "release", arguments, "--user", "alice", "--answers", "{}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return report


async def pending_for(served: Served, user: str, summary: str) -> str:
    """The id of the open request `user` may decide whose page shows `summary`, once it is listed for them."""
    with anyio.fail_after(60):
        while True:
            listing = await page(served, user, "/approvals/")
            assert listing.status_code == 200, listing.text
            for approval_id in re.findall(r'href="/approvals/requests/([^"/]+)"', listing.text):
                if summary in (await page(served, user, f"/approvals/requests/{approval_id}")).text:
                    return str(approval_id)
            await anyio.sleep(0.1)  # the client's first request is still on its way


async def test_the_official_typescript_tasks_client_waits_asked_nothing_until_the_release_is_approved(
    cluster: Served,
) -> None:
    if shutil.which("node") is None and shutil.which("npm") is None:
        pytest.skip("neither node nor npm is installed; the TypeScript client cannot run here")
    node = interop_node()
    async with anyio.create_task_group() as group:
        reports: list[dict[str, Any]] = []

        async def client() -> None:
            reports.append(await anyio.to_thread.run_sync(run_ts_tasks_client, node, cluster.url, "ts-tasks"))

        group.start_soon(client)
        approval_id = await pending_for(cluster, "bob", "Release ts-tasks")
        status_url = f"{cluster.base}/approvals/requests/{approval_id}/status"
        for user in ("bob", "carol"):
            decided = await decide(cluster, user, status_url, "approve", "")
            assert decided.status_code == 200, decided.text
    (report,) = reports
    assert report["ok"] and report["created"], report
    assert report["inputRequests"] == [] and report["declined"] == [], report
    assert report["result"]["content"][0]["text"] == "Released ts-tasks, approved by bob, carol."
    assert effects_of(cluster).count("released-ts-tasks") == 1
