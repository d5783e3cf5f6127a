"""The `act` chain of every call that waits on a request, not only the first: an agent acting for the requester whose
call reuses a request made without it may not approve that request, nor have its call go on with an approval it gave
itself."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from _approvals import BOB, CAROL, NOW, ONE_OF_THREE, TWO_OF_THREE, ask, service_on
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.db.migrate import all_components
from askback.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
async def service(tmp_path: object) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, FrozenClock(at=NOW))
    finally:
        await store.close()


async def test_an_agent_whose_call_reuses_the_requesters_pending_request_may_not_approve_it(
    service: ApprovalService,
) -> None:
    made = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice-herself"))
    reused = await service.request("alice", ["bob"], ask(ONE_OF_THREE, flow="bob-for-alice"))
    assert reused.id == made.id and "bob" in reused.actors

    refused = await service.decide(BOB, made.id, "approve", "", digest=made.digest)
    assert (refused.counted, refused.refusal) == (False, "actor")
    assert [r.id for r in await service.decidable_by(BOB)] == []


async def test_an_approval_an_agent_gave_does_not_let_a_call_it_acts_in_go_on(service: ApprovalService) -> None:
    made = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice-herself"))
    assert (await service.decide(BOB, made.id, "approve", "", digest=made.digest)).counted

    agents = await service.request("alice", ["bob"], ask(ONE_OF_THREE, flow="bob-for-alice"))
    assert agents.id != made.id and agents.status == "pending"
    assert "bob" in agents.actors
    # alice's own flow still goes on with the approval bob gave her.
    mine = await service.request("alice", [], ask(ONE_OF_THREE, flow="alice-herself"))
    assert (mine.id, mine.status) == (made.id, "consumed")


async def test_a_partial_approval_by_an_agent_never_completes_a_quorum_for_a_call_it_acts_in(
    service: ApprovalService,
) -> None:
    made = await service.request("alice", [], ask(TWO_OF_THREE, flow="alice-herself"))
    assert (await service.decide(BOB, made.id, "approve", "", digest=made.digest)).counted

    agents = await service.request("alice", ["bob"], ask(TWO_OF_THREE, flow="bob-for-alice"))
    assert agents.id != made.id
    await service.decide(CAROL, made.id, "approve", "", digest=made.digest)
    again = await service.request("alice", ["bob"], ask(TWO_OF_THREE, flow="bob-for-alice"))
    assert again.id == agents.id and again.status == "pending"
