"""The approvers' listing keeps `repository.LISTED_MOST` requests by policy alone, and only then drops those this
approver may not decide now (`refusal`: past their time though still stored pending, already decided by them, their
own). Requests of a short-lived tool that expired unread, made by callers after an older request this approver could
decide, fill the window and push that request off the listing."""

from __future__ import annotations

import pytest

from _approvals import BOB, NOW, ONE_OF_THREE, ask, service_on
from askback.approvals.repository import LISTED_MOST
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio

# A tool bob approves whose requests are open for a minute only.
SHORT = Approval(key="restart", title="Restart", principals=frozenset({"bob"}), ttl=60.0)
PER_CALLER = 20


@pytest.mark.xfail(
    strict=True,
    reason="pending_for cuts at LISTED_MOST before refusal() drops requests past their time: stale ones hide live ones",
)
async def test_requests_past_their_time_do_not_push_a_live_one_off_the_listing(tmp_path: object) -> None:
    clock = FrozenClock(at=NOW)
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        service = service_on(store, clock, pending=PER_CALLER)
        mine = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice"))
        clock.advance(1.0)
        for n in range(LISTED_MOST):
            caller = f"user{n // PER_CALLER}"
            flood = ask(SHORT, flow=f"f{n}", requester=caller, arguments={"n": n}, tool="restart")
            await service.request(caller, [], flood)
        clock.advance(61.0)  # the flood is past its time, still stored pending; alice's request is open for an hour
        listed = [r.id for r in await service.decidable_by(BOB)]
    finally:
        await store.close()
    assert mine.id in listed
