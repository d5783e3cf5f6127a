"""A request's time to live bounds its approval too: an approval that no call used before the request's time is not
used after it, by the flow that waited nor by a new call; a decision exactly at that time is refused."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from _approvals import BOB, NOW, ONE_OF_THREE, ask, service_on
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(at=NOW)


@pytest.fixture
async def service(tmp_path: object, clock: FrozenClock) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, clock)
    finally:
        await store.close()


async def test_an_approval_not_used_before_the_requests_time_is_not_used_after_it(
    service: ApprovalService, clock: FrozenClock
) -> None:
    made = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    assert (await service.decide(BOB, made.id, "approve", "", digest=made.digest)).counted
    clock.at = made.expires_at + 30 * 86400.0

    waited = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    assert (waited.id, waited.status, waited.consumed_by_flow) == (made.id, "expired", None)
    fresh = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-2"))
    assert fresh.id != made.id and fresh.status == "pending"
    stored = await service.get(made.id)
    assert stored is not None and stored.status == "expired"


async def test_an_approval_used_before_its_time_stays_its_flows_after_it(
    service: ApprovalService, clock: FrozenClock
) -> None:
    made = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    await service.decide(BOB, made.id, "approve", "", digest=made.digest)
    used = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    clock.at = made.expires_at + 1
    replayed = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    assert used.status == replayed.status == "consumed" and replayed.id == made.id


async def test_a_decision_exactly_at_the_requests_time_is_refused(service: ApprovalService, clock: FrozenClock) -> None:
    made = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    clock.at = made.expires_at
    refused = await service.decide(BOB, made.id, "approve", "", digest=made.digest)
    assert (refused.counted, refused.refusal) == (False, "expired")
