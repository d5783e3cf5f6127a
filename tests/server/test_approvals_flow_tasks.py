"""`flow.approve` in a task, against the real approvals product: the task waits `working`, its status message naming
who must approve, nobody answers anything, and it ends by itself once the request is decided. Two app instances
(each with its own `ApprovalsSetup`) share one store, a real SQLite file or a real PostgreSQL database, each served
under uvicorn on loopback and driven with raw 2026-07-28 JSON-RPC with the tasks extension declared; the requests
are decided through `ApprovalService.decide`, as the approvers' pages decide them."""

from __future__ import annotations

import secrets
import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import pytest
from tests.infra import run_askback, serving_asgi
from tests.server._tasks import call, get, rpc, until, until_status

from askback import Approval, Askback, Flow, load_settings
from askback.approvals.records import ApprovalRecord
from askback.approvals.service import ApprovalService, Approver
from askback.approvals.setup import ApprovalsSetup
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.server.http import build_app
from askback.store import Store

pytestmark = [pytest.mark.http, pytest.mark.anyio]

DROP = Approval(key="db.drop", title="Drop a database", groups=frozenset({"sre"}), ttl=600)
BOB = Approver("bob", groups=frozenset({"sre"}), method="development")
BASE = "http://127.0.0.1:8000"
WAITING = "Waiting for approval: Drop a database — 1 more approval from sre, until 2027-01-15 08:10 UTC"


async def nobody(request: Any) -> None:
    return None


@dataclass
class Served:
    """Two instances of one app on one store: their /mcp URLs, the approvals service, what the handler did."""

    urls: tuple[str, str]
    service: ApprovalService
    clock: FrozenClock
    database: str = ""
    runs: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    effect: anyio.Event = field(default_factory=anyio.Event)

    async def request(self) -> ApprovalRecord:
        """The one approval request there is."""
        (record,) = await self.service.listing(expire=False)
        return record

    async def decide(self, decision: str, reason: str = "") -> None:
        record = await self.request()
        decided = await self.service.decide(BOB, record.id, decision, reason, digest=record.digest)
        assert decided.counted, decided


def instance(served: Served, settings: Any) -> tuple[Askback, ApprovalsSetup]:
    setup = ApprovalsSetup(sign_in=nobody, base_url=BASE)
    app = Askback("approvals-tasks", settings=settings, clock=served.clock, extensions=[setup])

    @app.tool(task="optional")
    async def drop(database: str, flow: Flow) -> str:
        served.runs.append(database)
        approved = await flow.approve(DROP, summary=f"Drop {database}")

        async def run() -> str:
            served.dropped.append(database)
            served.effect.set()
            return database

        await flow.once("drop", run)
        return f"Dropped {database}, approved by {', '.join(approved.approvers)}."

    return app, setup


@pytest.fixture
async def served(any_database: str) -> AsyncIterator[Served]:
    settings = load_settings(
        database_url=any_database,
        state_keys=secrets.token_urlsafe(32),
        demo_auth=True,
        task_poll_interval=250,
        flow_deadline=1800,
        task_ttl=7200,
    )
    clock = FrozenClock(at=1_800_000_000.0)
    await (await Store.open(any_database, migrate=True, components=all_components())).close()
    async with AsyncExitStack() as stack:
        urls: list[str] = []
        first: ApprovalsSetup | None = None
        found = Served(("", ""), service=None, clock=clock, database=any_database)
        for _ in range(2):
            app, setup = instance(found, settings)
            first = first or setup
            listener = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            listener.bind(("127.0.0.1", 0))
            listener.listen(16)
            base = await stack.enter_async_context(serving_asgi(build_app(app), listener))
            urls.append(f"{base}/mcp")
        assert first is not None
        found.urls = (urls[0], urls[1])
        found.service = await first.service()
        yield found


async def waiting(http: httpx.AsyncClient, url: str, task_id: str) -> dict[str, Any]:
    """`tasks/get` until the task waits for its approval (`working`, with its status message)."""

    def asks_for_approval(task: dict[str, Any]) -> bool:
        assert task["status"] == "working", task
        return str(task.get("statusMessage", "")).startswith("Waiting for approval")

    return await until(http, url, task_id, asks_for_approval)


async def started(http: httpx.AsyncClient, served: Served) -> dict[str, Any]:
    """A `drop` task made on the first instance, once it waits for its approval, read on the second."""
    task_id = (await call(http, served.urls[0], "drop", {"database": "orders"}))["result"]["taskId"]
    return await waiting(http, served.urls[1], task_id)


async def test_a_waiting_task_is_working_naming_who_must_approve_and_asks_nothing(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    assert (task["status"], task["statusMessage"]) == ("working", WAITING)
    assert "inputRequests" not in task
    again = (await get(http, served.urls[0], task["taskId"]))["result"]
    assert (again["status"], again["lastUpdatedAt"]) == ("working", task["lastUpdatedAt"])
    assert (await served.request()).status == "pending"
    assert served.runs == ["orders"] and served.dropped == []


async def test_an_approved_request_lets_the_task_complete_by_itself_on_one_instance_running_the_effect_once(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    await served.decide("approve")
    # Nobody reads the task: the instances' readers of the event log see the decision, and one of them reruns it.
    with anyio.fail_after(20):
        await served.effect.wait()
    done = await until_status(http, served.urls[1], task["taskId"], "completed")

    assert done["result"]["content"][0]["text"] == "Dropped orders, approved by bob."
    assert not done["result"].get("isError")
    assert served.dropped == ["orders"] and served.runs == ["orders", "orders"]
    assert (await served.request()).status == "consumed"


async def test_a_denied_request_completes_the_task_with_the_denial_and_runs_nothing(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    await served.decide("deny", "not during the freeze")
    done = await until_status(http, served.urls[0], task["taskId"], "completed")

    assert done["result"]["content"][0]["text"] == (
        "Denied: bob denied Drop a database (not during the freeze), so nothing was done."
    )
    assert served.dropped == []
    outcomes = [e.outcome for e in await served.service.audit_log.query(AuditFilter(tool="drop", event="completed"))]
    assert outcomes == ["denied"]


async def test_an_expired_request_completes_the_task_when_tasks_get_reads_it(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    served.clock.advance(DROP.ttl + 1)
    done = await until_status(http, served.urls[1], task["taskId"], "completed")

    assert done["result"]["content"][0]["text"] == (
        "Expired: the approval request for Drop a database expired before it was approved and used, so nothing was done. "
        "Call the tool again for a new request."
    )
    assert served.dropped == [] and (await served.request()).status == "expired"


async def test_cancelling_a_waiting_task_withdraws_its_request_and_nothing_runs(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    told = (await rpc(http, served.urls[0], "tasks/cancel", {"taskId": task["taskId"]}))["result"]
    assert told["_meta"]["askback/cancel"] == {"status": "cancelled"}
    assert (await served.request()).status == "withdrawn"
    # The withdrawal's event reaches both instances' readers: a cancelled task stays cancelled.
    await until_status(http, served.urls[1], task["taskId"], "cancelled")
    assert (await get(http, served.urls[0], task["taskId"]))["result"]["status"] == "cancelled"
    assert served.dropped == [] and served.runs == ["orders"]


async def test_cancelling_a_waiting_task_from_the_command_line_withdraws_its_request_too(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    told = await anyio.to_thread.run_sync(
        lambda: run_askback("tasks", "cancel", task["taskId"], "--database", served.database, timeout=60)
    )
    assert told.returncode == 0, told.stderr
    assert told.stdout.startswith(f"{task['taskId']}: cancelled")
    assert (await served.request()).status == "withdrawn"
    await until_status(http, served.urls[1], task["taskId"], "cancelled")
    assert served.dropped == [] and served.runs == ["orders"]


async def test_a_task_waiting_past_its_flow_deadline_ends_expired_without_running_again(
    http: httpx.AsyncClient, served: Served
) -> None:
    task = await started(http, served)

    served.clock.advance(1801)
    done = await until_status(http, served.urls[0], task["taskId"], "completed")

    assert done["result"]["content"][0]["text"].startswith("Expired: this request waited more than")
    assert served.dropped == [] and served.runs == ["orders"]
