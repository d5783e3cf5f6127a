"""The approvers' listing reads every pending request's policy, page by page (`repository.PENDING_SCAN` at a time),
before it keeps those this approver may decide: callers each holding their allowed pending requests of a tool whose
approvers are other people cannot push an older request off this approver's listing. The listing shows
`repository.LISTED_MOST` requests at most, the newest."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from _approvals import BOB, NOW, ONE_OF_THREE, ask, service_on
from askback.approvals.repository import LISTED_MOST
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio

# A policy bob is not on: the flood is of requests he could never decide.
ELSEWHERE = Approval(key="other", title="Something else", principals=frozenset({"zoe"}))
PER_CALLER = 20
CALLERS = 51  # 1020 pending requests, past the 1000 the listing reads
CLOCK = FrozenClock(at=NOW)


@pytest.fixture
async def service(tmp_path: object) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, CLOCK, pending=PER_CALLER)
    finally:
        await store.close()


async def test_requests_an_approver_cannot_decide_do_not_push_theirs_off_the_listing(service: ApprovalService) -> None:
    mine = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice"))
    CLOCK.advance(1.0)  # the flood comes a second later, well within the hour alice's request is open
    for caller in range(CALLERS):
        for n in range(PER_CALLER):
            await service.request(
                f"user{caller}",
                [],
                ask(ELSEWHERE, flow=f"f{caller}-{n}", requester=f"user{caller}", arguments={"n": n}, tool="other"),
            )
    assert mine.id in [r.id for r in await service.decidable_by(BOB)]


async def test_the_listing_shows_the_newest_requests_up_to_its_most(tmp_path: object) -> None:
    clock = FrozenClock(at=NOW)
    store = await Store.open(f"sqlite:///{tmp_path}/many.db", migrate=True, components=all_components())
    try:
        service = service_on(store, clock, pending=PER_CALLER)
        made: list[str] = []
        for n in range(LISTED_MOST + 20):
            clock.advance(1.0)
            caller = f"user{n // PER_CALLER}"
            made.append((await service.request(caller, [], ask(requester=caller, flow=f"f{n}", arguments={"n": n}))).id)
        listed = [r.id for r in await service.decidable_by(BOB)]
    finally:
        await store.close()
    assert listed == made[::-1][:LISTED_MOST]
