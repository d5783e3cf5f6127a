"""Approvers deciding at once from separate processes on one SQLite file (as several workers of one server do): the
database's write lock, taken when each decision's transaction begins, makes the quorum complete exactly once."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from _approvals import ask, service_on
from askback.approvals.events import DECIDED
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = [pytest.mark.http, pytest.mark.anyio]

APPROVERS = ("bob", "carol", "dave", "erin")
POLICY = Approval(key="deploy", title="Deploy to production", principals=frozenset(APPROVERS), required=2)

# One approver's process: it opens the store, says it is ready, waits for the word, then decides.
DECIDER = """
import json, sys
import anyio
from askback.approvals.service import ApprovalService, Approver
from askback.clock import SystemClock
from askback.db.migrate import all_components
from askback.store import Store

async def main(url: str, approval_id: str, digest: str, who: str) -> None:
    store = await Store.open(url, components=all_components())
    try:
        service = ApprovalService(
            store.database, clock=SystemClock(), audit_log=store.audit_log, status_url=str, pending_per_requester=20
        )
        print("ready", flush=True)
        sys.stdin.readline()
        decided = await service.decide(Approver(who, method="test"), approval_id, "approve", "", digest=digest)
        print(json.dumps({"counted": decided.counted, "refusal": decided.refusal}), flush=True)
    finally:
        await store.close()

anyio.run(main, *sys.argv[1:])
"""


def decide_at_once(url: str, approval_id: str, digest: str) -> list[dict[str, Any]]:
    """Start one process per approver, wait until each is ready, then tell them all to decide; what each got."""
    with contextlib.ExitStack() as stack:
        deciders = []
        for who in APPROVERS:
            decider = subprocess.Popen(
                [sys.executable, "-c", DECIDER, url, approval_id, digest, who],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=os.environ.copy(),
            )
            stack.enter_context(decider)  # closes its pipes and waits for it
            stack.callback(lambda d=decider: d.poll() is None and d.kill())
            deciders.append(decider)
        for decider in deciders:
            assert decider.stdout is not None and decider.stdout.readline().strip() == "ready"
        for decider in deciders:  # as close to at once as four processes get
            assert decider.stdin is not None
            decider.stdin.write("go\n")
            decider.stdin.flush()
        results: list[dict[str, Any]] = []
        for decider in deciders:
            assert decider.stdout is not None
            results.append(json.loads(decider.stdout.readline()))
            assert decider.wait(timeout=60) == 0
        return results


async def test_approvers_in_separate_processes_complete_the_quorum_exactly_once(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    store = await Store.open(url, migrate=True, components=all_components())
    try:
        record = await service_on(store, FrozenClock(at=time.time())).request("alice", [], ask(POLICY))
    finally:
        await store.close()

    results = decide_at_once(url, record.id, record.digest)

    assert sum(r["counted"] for r in results) == POLICY.required
    assert {r["refusal"] for r in results if not r["counted"]} == {"not_pending"}
    store = await Store.open(url, components=all_components())
    try:
        assert [e.type for e in await store.events.events_after(0)].count(DECIDED) == 1
        assert (await store.audit_log.verify()).ok
    finally:
        await store.close()
