"""The approvers' listing counts toward `repository.LISTED_MOST` only the requests this approver may decide now:
requests past their time though still stored pending, already decided by them, or their own do not fill the window
and push an older request they could decide off the listing."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from _approvals import BOB, NOW, ONE_OF_THREE, ask, service_on
from askback.approvals.repository import LISTED_MOST
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio

# A tool bob approves whose requests are open for a minute only.
SHORT = Approval(key="restart", title="Restart", principals=frozenset({"bob"}), ttl=60.0)
PER_CALLER = 20


@pytest.fixture
async def clock() -> FrozenClock:
    return FrozenClock(at=NOW)


@pytest.fixture
async def service(tmp_path: Path, clock: FrozenClock) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, clock, pending=LISTED_MOST)
    finally:
        await store.close()


async def test_requests_past_their_time_do_not_push_a_live_one_off_the_listing(
    service: ApprovalService, clock: FrozenClock
) -> None:
    mine = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice"))
    clock.advance(1.0)
    for n in range(LISTED_MOST):
        caller = f"user{n // PER_CALLER}"
        flood = ask(SHORT, flow=f"f{n}", requester=caller, arguments={"n": n}, tool="restart")
        await service.request(caller, [], flood)
    clock.advance(61.0)  # the flood is past its time, still stored pending; alice's request is open for an hour
    assert mine.id in [r.id for r in await service.decidable_by(BOB)]


async def test_the_approvers_own_requests_do_not_push_anothers_off_the_listing(
    service: ApprovalService, clock: FrozenClock
) -> None:
    mine = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice"))
    clock.advance(1.0)
    for n in range(LISTED_MOST):
        await service.request("bob", [], ask(ONE_OF_THREE, flow=f"b{n}", requester="bob", arguments={"n": n}))
    assert [r.id for r in await service.decidable_by(BOB)] == [mine.id]
