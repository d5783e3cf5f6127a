"""Scale-out on real parts: PostgreSQL, three `askback serve` instances, nginx round-robin in front of them.

Every test talks to 127.0.0.1 only. The cluster is shared by the module; tests that kill an instance or stop the
database bring it back before they end.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import pytest
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from _http import RawReply, audit, post_call
from askback.core.plan import Round
from askback.testing import accept, call_round, drive_flow, state_of, text
from infra import Instance, Nginx, Postgres, behind_nginx, postgres, run_askback

pytestmark = [
    pytest.mark.http,
    pytest.mark.anyio,
    pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"), reason="needs nginx"),
]

DEMO = "askback.demo:server"


@dataclass
class Cluster:
    pg: Postgres
    url: str  # the database URL every instance uses
    instances: list[Instance]
    nginx: Nginx
    keys: str


def askback_cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return run_askback(*args, env=env, timeout=120)


@pytest.fixture(scope="module", params=["state", "server"])
def cluster(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Cluster]:
    """Three instances behind nginx on PostgreSQL, with the answers in the sealed state, then held on the server."""
    with postgres() as pg:
        pg.create_database("askback")
        url = pg.url("askback")
        upgraded = askback_cli("db", "upgrade", "--database", url, env={})
        assert upgraded.returncode == 0, upgraded.stderr
        keys = secrets.token_urlsafe(48)
        env = {"ASKBACK_DATABASE_URL": url, "ASKBACK_STATE_KEYS": keys, "ASKBACK_ANSWERS": request.param}
        with behind_nginx(DEMO, env, tmp_path_factory.mktemp("nginx")) as (instances, nginx):
            yield Cluster(pg, url, instances, nginx, keys)


async def drive(url: str, service: str, user: str, environment: str = "production") -> list[Round]:
    """One deploy flow, every round on a new connection; returns the rounds."""
    answers = {
        "pick_env": accept(environment=environment),
        "confirm_prod": accept(confirm=True),
    }
    sent = await drive_flow(
        url, "deploy", {"service": service}, lambda key, _params: answers[key], token=f"demo-{user}", max_rounds=4
    )
    return [rnd for _, rnd in sent]


async def deployments(cluster: Cluster) -> list[dict[str, Any]]:
    rnd = await call_round(cluster.nginx.url, "list_deployments", {}, token="demo-observer")
    assert isinstance(rnd.result, CallToolResult) and isinstance(rnd.result.structured_content, dict)
    return list(rnd.result.structured_content["deployments"])


async def test_fifty_concurrent_flows_through_nginx_land_on_different_instances(cluster: Cluster) -> None:
    results: dict[str, list[Round]] = {}
    limiter = anyio.CapacityLimiter(10)

    async def one(n: int) -> None:
        async with limiter:
            results[f"fifty-{n}"] = await drive(cluster.nginx.url, f"fifty-{n}", "carol")

    async with anyio.create_task_group() as tg:
        for n in range(50):
            tg.start_soon(one, n)

    for service, rounds in results.items():
        assert text(rounds[-1].result) == f"Deployed {service} to production."
    recorded = [d["service"] for d in await deployments(cluster) if d["service"].startswith("fifty-")]
    assert sorted(recorded) == sorted(results)

    # From the audit trail in PostgreSQL: which instance served each round of each flow.
    events = await audit(cluster.url, principal="carol", tool="deploy")
    by_flow: dict[str, set[str]] = {}
    for ev in events:
        if ev.flow_id and ev.instance:
            by_flow.setdefault(ev.flow_id, set()).add(ev.instance)
    assert len(by_flow) == 50
    assert len({i for s in by_flow.values() for i in s}) == 3, "every instance served rounds"
    assert sum(1 for s in by_flow.values() if len(s) > 1) >= 10, "rounds of one flow moved between instances"


async def test_an_instance_killed_between_rounds_loses_no_flow_and_doubles_no_effect(cluster: Cluster) -> None:
    answers = {"pick_env": accept(environment="staging")}
    firsts: dict[str, Round] = {}

    async def start(n: int) -> None:
        firsts[f"kill-{n}"] = await call_round(cluster.nginx.url, "deploy", {"service": f"kill-{n}"}, token="demo-dan")

    async with anyio.create_task_group() as tg:
        for n in range(20):
            tg.start_soon(start, n)
    assert all(isinstance(r.result, InputRequiredResult) for r in firsts.values())
    victim = cluster.instances[1]
    assert victim.proc is not None
    victim_pid = victim.proc.pid
    served_by_victim = sum(1 for r in firsts.values() if r.instance and r.instance.endswith(f":{victim_pid}"))

    victim.kill()  # SIGKILL: no shutdown, in-flight state only in the clients' hands
    try:
        finals: dict[str, Round] = {}

        async def finish(service: str, first: Round) -> None:
            finals[service] = await call_round(
                cluster.nginx.url,
                "deploy",
                {"service": service},
                token="demo-dan",
                responses=answers,
                request_state=state_of(first),
            )

        async with anyio.create_task_group() as tg:
            for service, first in firsts.items():
                tg.start_soon(finish, service, first)
        for service, final in finals.items():
            assert final.error is None, final.error
            assert text(final.result) == f"Deployed {service} to staging."
        recorded = [d["service"] for d in await deployments(cluster) if d["service"].startswith("kill-")]
        assert sorted(recorded) == sorted(firsts), "no effect lost, none doubled"
        # Round-robin sent some first rounds to the victim; no final round could be served by it.
        assert served_by_victim >= 1
        assert not any(f.instance and f.instance.endswith(f":{victim_pid}") for f in finals.values())
    finally:
        victim.start()


@pytest.mark.parametrize(
    ("tool", "args", "rounds", "expected"),
    [
        pytest.param(
            "delete_project",
            {"project_id": "prj_42"},
            [{"confirm_project": accept(project_name="web-frontend")}],
            "Deleted web-frontend.",
            id="delete",
        ),
        pytest.param(
            "deploy",
            {"service": "trio"},
            [
                {"pick_env": accept(environment="production")},
                {"confirm_prod": accept(confirm=True)},
            ],
            "Deployed trio to production.",
            id="deploy",
        ),
    ],
)
async def test_a_final_round_sent_thirty_times_at_once_through_nginx_answers_alike_and_acts_once(
    cluster: Cluster, tool: str, args: dict[str, str], rounds: list[dict[str, ElicitResult]], expected: str
) -> None:
    state: str | None = None
    for answers in [None, *rounds[:-1]]:
        step = await call_round(
            cluster.nginx.url, tool, args, token="demo-erin", responses=answers, request_state=state
        )
        state = state_of(step)
    replies: list[RawReply] = []
    async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_keepalive_connections=0)) as http:

        async def send() -> None:
            replies.append(
                await post_call(
                    http, cluster.nginx.url, tool, args, token="demo-erin", responses=rounds[-1], request_state=state
                )
            )

        with anyio.fail_after(120):
            async with anyio.create_task_group() as tg:
                for _ in range(30):
                    tg.start_soon(send)
    assert len(replies) == 30
    first = replies[0]
    assert first.status == 200 and text(CallToolResult.model_validate(first.message()["result"])) == expected
    assert [(r.status, r.body) for r in replies] == [(first.status, first.body)] * 30
    # nginx's round-robin spread the copies over the instances (one restarted by an earlier test may still be
    # benched by nginx's fail_timeout).
    assert len({r.instance for r in replies}) >= 2
    listing = await call_round(cluster.nginx.url, "list_deployments", {}, token="demo-observer")
    assert isinstance(listing.result, CallToolResult) and isinstance(listing.result.structured_content, dict)
    if tool == "delete_project":
        deleted = listing.result.structured_content["deletions"]
        assert [d for d in deleted if d["project_id"] == "prj_42"] == [
            {"project_id": "prj_42", "name": "web-frontend", "by": "erin"}
        ]
    else:
        assert [d["service"] for d in await deployments(cluster)].count("trio") == 1
    assert isinstance(state, str)
    trail = [e for e in await audit(cluster.url, principal="erin", tool=tool) if e.flow_id is not None]
    flows = {e.flow_id for e in trail}
    assert len(flows) == 1
    assert sorted(e.event for e in trail if e.event in ("completed", "replayed")) == ["completed"] + ["replayed"] * 29
    answered = [(e.round, e.keys) for e in trail if e.event == "answered"]
    assert sorted(answered) == sorted((n, (key,)) for n, answers in enumerate(rounds, 1) for key in answers)


async def test_with_the_database_down_calls_fail_cleanly_and_retries_complete_after(cluster: Cluster) -> None:
    firsts: dict[str, Round] = {}
    for n in range(5):
        firsts[f"outage-{n}"] = await call_round(
            cluster.nginx.url, "deploy", {"service": f"outage-{n}"}, token="demo-fay"
        )
    answers = {"pick_env": accept(environment="dev")}

    async def final(service: str) -> Round:
        return await call_round(
            cluster.nginx.url,
            "deploy",
            {"service": service},
            token="demo-fay",
            responses=answers,
            request_state=state_of(firsts[service]),
            timeout_seconds=30,
        )

    cluster.pg.stop("fast")
    try:
        async with httpx.AsyncClient() as http:
            ready = await http.get(f"{cluster.instances[0].base}/readyz")
            alive = await http.get(f"{cluster.instances[0].base}/healthz")
        assert ready.status_code == 503 and alive.status_code == 200
        assert any("unavailable" in p for p in ready.json()["problems"])
        assert cluster.pg.password not in ready.text and str(cluster.pg.port) not in ready.text
        # A first round cannot record what it asks: it fails too, rather than leave a gap in the audit trail.
        fresh = await call_round(cluster.nginx.url, "deploy", {"service": "outage-new"}, token="demo-fay")
        assert fresh.error is not None and (fresh.error.error.data or {}).get("retryable") is True
        for service in firsts:
            failed = await final(service)
            assert failed.error is not None, f"{service} completed without its database"
            assert failed.error.error.code == -32603
            assert (failed.error.error.data or {}).get("retryable") is True
            assert "unavailable" in failed.error.error.message and "Traceback" not in failed.error.error.message
    finally:
        cluster.pg.start()
    async with httpx.AsyncClient() as http:
        assert (await http.get(f"{cluster.instances[0].base}/readyz")).status_code == 200
    for service in firsts:
        done = await final(service)
        assert done.error is None, done.error
        assert text(done.result) == f"Deployed {service} to dev."
    recorded = [d["service"] for d in await deployments(cluster) if d["service"].startswith("outage-")]
    assert sorted(recorded) == sorted(firsts)


async def test_the_audit_trail_in_postgresql_answers_who_confirmed_a_deletion(cluster: Cluster) -> None:
    first = await call_round(cluster.nginx.url, "delete_project", {"project_id": "prj_99"}, token="demo-gus")
    done = await call_round(
        cluster.nginx.url,
        "delete_project",
        {"project_id": "prj_99"},
        token="demo-gus",
        responses={"confirm_project": accept(project_name="billing-legacy")},
        request_state=state_of(first),
    )
    assert text(done.result) == "Deleted billing-legacy."
    who = askback_cli(
        "audit",
        "--database",
        cluster.url,
        "--tool",
        "delete_project",
        "--event",
        "answered",
        "--contains",
        "billing-legacy",
        "--json",
        env={},
    )
    assert who.returncode == 0, who.stderr
    import json

    rows = [json.loads(line) for line in who.stdout.splitlines()]
    assert [(r["principal"], r["content"]) for r in rows] == [("gus", {"project_name": "billing-legacy"})]


async def test_an_instance_refuses_an_unmigrated_database_naming_the_command(cluster: Cluster) -> None:
    cluster.pg.create_database("fresh")
    result = askback_cli(
        "serve",
        DEMO,
        "--port",
        "1",
        env={"ASKBACK_DATABASE_URL": cluster.pg.url("fresh"), "ASKBACK_STATE_KEYS": cluster.keys},
    )
    assert result.returncode == 2
    assert "askback db upgrade" in result.stderr
    assert cluster.pg.password not in result.stderr


async def test_several_workers_without_keys_are_refused_on_postgresql_too(cluster: Cluster) -> None:
    result = askback_cli("serve", DEMO, "--workers", "2", "--port", "1", env={"ASKBACK_DATABASE_URL": cluster.url})
    assert result.returncode == 2 and "askback keys new" in result.stderr
