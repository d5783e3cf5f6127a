"""The approvals service on a real SQLite file and a real PostgreSQL: requests made, reused and capped; decisions
counted once, by the people the policy names; expiry on read; consumption by one flow; the audit rows on the chain
and one event per change."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace

import anyio
import pytest

from _approvals import BOB, CAROL, DAVE, NOW, ONE_OF_THREE, TWO_OF_THREE, ask, service_on, status_url
from askback.approvals.service import ApprovalService, Approver, Decided
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.errors import InvalidParamsError, LimitReachedError, ToolError
from askback.store import Store

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(at=NOW)


@pytest.fixture
async def store(any_database: str) -> AsyncIterator[Store]:
    opened = await Store.open(any_database, migrate=True, components=all_components())
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def service(store: Store, clock: FrozenClock) -> ApprovalService:
    return service_on(store, clock, pending=3)


async def event_types(store: Store) -> list[str]:
    return [event.type for event in await store.events.events_after(0)]


async def audit_kinds(store: Store) -> list[str]:
    return [event.event for event in await store.audit_log.query(AuditFilter()) if event.event.startswith("approval.")]


# --- making a request ------------------------------------------------------------------------------------------


async def test_a_request_is_pending_with_its_hidden_arguments_stored_as_null(service: ApprovalService) -> None:
    masked = Approval(key="pay", title="Pay an invoice", principals=frozenset({"bob"}), hidden=frozenset({"iban"}))
    record = await service.request("alice", ["agent-7"], ask(masked, arguments={"iban": "DE89 3704", "amount": 5}))

    assert record.id.startswith("apr_") and record.status == "pending"
    assert record.arguments == {"iban": None, "amount": 5}
    assert record.requester == "alice" and record.actors == ("agent-7",)
    assert record.expires_at == NOW + masked.ttl
    assert await service.get(record.id) == record
    state = service.state(record)
    assert (state.id, state.status, state.required, state.status_url) == (
        record.id,
        "pending",
        1,
        status_url(record.id),
    )


async def test_asking_again_for_the_same_call_reuses_the_pending_request_from_any_flow(
    service: ApprovalService, store: Store
) -> None:
    first = await service.request("alice", [], ask(flow="flow-1"))
    again = await service.request("alice", [], ask(flow="flow-1"))
    other_flow = await service.request("alice", [], ask(flow="flow-2"))

    assert again.id == first.id == other_flow.id
    assert other_flow.flows == ("flow-1", "flow-2")
    assert await event_types(store) == ["approval.requested"]


async def test_another_call_or_another_requester_is_another_request(service: ApprovalService) -> None:
    first = await service.request("alice", [], ask())
    other_call = await service.request("alice", [], ask(arguments={"env": "staging"}))
    other_requester = await service.request("erin", [], ask(requester="erin"))

    assert len({first.id, other_call.id, other_requester.id}) == 3


async def test_past_the_pending_cap_a_new_request_is_refused_but_a_pending_one_is_still_reused(
    service: ApprovalService,
) -> None:
    made = [await service.request("alice", [], ask(arguments={"n": n})) for n in range(3)]

    with pytest.raises(LimitReachedError) as refused:
        await service.request("alice", [], ask(arguments={"n": 3}))
    assert refused.value.limit == 3 and refused.value.tool_error
    assert (await service.request("alice", [], ask(arguments={"n": 0}))).id == made[0].id
    # Another person's cap is their own.
    await service.request("erin", [], ask(requester="erin"))


async def test_a_decided_request_frees_its_place_under_the_cap(service: ApprovalService) -> None:
    made = [await service.request("alice", [], ask(ONE_OF_THREE, arguments={"n": n})) for n in range(3)]
    await service.decide(BOB, made[0].id, "deny", "no", digest=made[0].digest)

    assert (await service.request("alice", [], ask(ONE_OF_THREE, arguments={"n": 3}))).status == "pending"


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"summary": "x" * 1001}, ToolError),
        ({"summary": "Deploy \u202eotcudorp"}, ToolError),
        ({"arguments": {"blob": "x" * 70_000}}, ToolError),
        ({"requester": "alice\nbob"}, InvalidParamsError),
    ],
    ids=["summary too long", "bidi in the summary", "arguments too large", "control in the requester"],
)
async def test_what_a_request_cannot_store_is_refused_and_nothing_is_written(
    service: ApprovalService, store: Store, change: dict[str, object], error: type[Exception]
) -> None:
    requester = change.get("requester", "alice")
    assert requester is None or isinstance(requester, str)
    with pytest.raises(error):
        await service.request(requester, [], ask(**change))  # type: ignore[arg-type]
    assert await service.listing() == [] and await event_types(store) == []


async def test_a_digest_that_is_not_the_calls_is_refused(service: ApprovalService) -> None:
    forged = ask(arguments={"env": "staging"})
    with pytest.raises(InvalidParamsError):
        await service.request("alice", [], ask().__class__(**{**forged.__dict__, "digest": ask().digest}))


# --- deciding ----------------------------------------------------------------------------------------------------


async def test_two_of_three_approvals_approve_and_only_the_second_decides(
    service: ApprovalService, store: Store, clock: FrozenClock
) -> None:
    record = await service.request("alice", [], ask())
    first = await service.decide(BOB, record.id, "approve", "looks right", digest=record.digest)
    assert first.counted and first.record.status == "pending" and first.record.approvers == ("bob",)
    clock.advance(5)
    second = await service.decide(CAROL, record.id, "approve", "", digest=record.digest)

    assert second.counted and second.record.status == "approved"
    assert second.record.approvers == ("bob", "carol") and second.record.decided_at == NOW + 5
    late = await service.decide(DAVE, record.id, "approve", "", digest=record.digest)
    assert late == Decided(second.record, counted=False, refusal="not_pending")
    assert await event_types(store) == ["approval.requested", "approval.decided"]
    decided = (await store.events.events_after(0))[1].data
    assert decided["status"] == "approved" and decided["approvers"] == ["bob", "carol"]
    assert "arguments" not in decided and "answers" not in decided


async def test_the_first_denial_denies_whatever_approvals_came_before(service: ApprovalService) -> None:
    record = await service.request("alice", [], ask())
    await service.decide(BOB, record.id, "approve", "", digest=record.digest)
    denied = await service.decide(CAROL, record.id, "deny", "not on a Friday", digest=record.digest)

    assert denied.counted and denied.record.status == "denied"
    assert denied.record.denied_by == "carol" and denied.record.reason == "not on a Friday"
    state = service.state(denied.record)
    assert (state.status, state.denied_by, state.reason, state.approvers) == (
        "denied",
        "carol",
        "not on a Friday",
        ("bob",),
    )


async def test_the_requester_may_not_approve_their_own_request_unless_the_policy_says_so(
    service: ApprovalService,
) -> None:
    policy = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob"}))
    record = await service.request("alice", [], ask(policy))
    refused = await service.decide(Approver("alice"), record.id, "approve", "", digest=record.digest)
    assert (refused.counted, refused.refusal, refused.record.status) == (False, "requester", "pending")

    selfish = Approval(key="deploy", title="Deploy", principals=frozenset({"alice"}), self_approval=True)
    own = await service.request("alice", [], ask(selfish))
    assert (await service.decide(Approver("alice"), own.id, "approve", "", digest=own.digest)).counted


async def test_an_actor_of_the_requesters_token_is_refused_even_when_the_policy_names_them(
    service: ApprovalService,
) -> None:
    record = await service.request("alice", ["bob"], ask(ONE_OF_THREE))
    refused = await service.decide(BOB, record.id, "approve", "", digest=record.digest)

    assert (refused.counted, refused.refusal) == (False, "actor")
    assert [r.id for r in await service.decidable_by(BOB)] == []
    assert [r.id for r in await service.decidable_by(CAROL)] == [record.id]


async def test_a_second_decision_by_the_same_person_is_refused(service: ApprovalService) -> None:
    record = await service.request("alice", [], ask())
    await service.decide(BOB, record.id, "approve", "", digest=record.digest)
    again = await service.decide(BOB, record.id, "approve", "", digest=record.digest)

    assert (again.counted, again.refusal, again.record.approvers) == (False, "already_decided", ("bob",))


async def test_someone_the_policy_does_not_name_is_refused_and_a_group_member_is_not(service: ApprovalService) -> None:
    policy = Approval(key="deploy", title="Deploy", groups=frozenset({"ops"}))
    record = await service.request("alice", [], ask(policy))
    outsider = await service.decide(
        Approver("mallory", frozenset({"dev"})), record.id, "approve", "", digest=record.digest
    )
    member = await service.decide(Approver("olga", frozenset({"ops"})), record.id, "approve", "", digest=record.digest)

    assert (outsider.counted, outsider.refusal) == (False, "not_allowed")
    assert member.counted and member.record.status == "approved"


async def test_a_decision_on_another_digest_than_the_stored_one_is_refused(service: ApprovalService) -> None:
    record = await service.request("alice", [], ask())
    refused = await service.decide(BOB, record.id, "approve", "", digest="0" * 64)

    assert (refused.counted, refused.refusal, refused.record.votes) == (False, "digest_changed", ())


async def test_a_decision_on_an_unknown_request_or_with_a_reason_that_cannot_be_stored_is_refused(
    service: ApprovalService,
) -> None:
    record = await service.request("alice", [], ask())
    with pytest.raises(InvalidParamsError):
        await service.decide(BOB, "apr_unknown", "approve", "", digest=record.digest)
    with pytest.raises(InvalidParamsError):
        await service.decide(BOB, record.id, "approve", "ok\x1b[2J", digest=record.digest)
    with pytest.raises(InvalidParamsError):
        await service.decide(BOB, record.id, "maybe", "", digest=record.digest)  # type: ignore[arg-type]
    assert (await service.get(record.id)) == record


@pytest.mark.parametrize("policy", [ONE_OF_THREE, TWO_OF_THREE], ids=["one of three", "two of three"])
async def test_concurrent_decisions_on_two_instances_complete_the_quorum_exactly_once(
    store: Store, any_database: str, clock: FrozenClock, policy: Approval
) -> None:
    other = await Store.open(any_database, migrate=False, components=all_components())
    try:
        services = [service_on(store, clock), service_on(other, clock)]
        record = await services[0].request("alice", [], ask(policy))
        results: list[Decided] = []

        async def decide(service: ApprovalService, approver: Approver) -> None:
            results.append(await service.decide(approver, record.id, "approve", "", digest=record.digest))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for n, approver in enumerate((BOB, CAROL, DAVE)):
                    group.start_soon(decide, services[n % 2], approver)
    finally:
        await other.close()

    assert sum(r.counted for r in results) == policy.required
    assert {r.refusal for r in results if not r.counted} == {"not_pending"}
    assert [r.record.status for r in results].count("approved") == 3 - policy.required + 1
    assert await event_types(store) == ["approval.requested", "approval.decided"]
    final = await services[0].get(record.id)
    assert final is not None and final.status == "approved" and len(final.votes) == policy.required
    assert (await audit_kinds(store)).count("approval.approved") == policy.required
    assert (await store.audit_log.verify()).ok


# --- expiry, withdrawal, consumption -----------------------------------------------------------------------------


async def test_a_pending_request_past_its_time_expires_on_read_once(
    service: ApprovalService, store: Store, clock: FrozenClock
) -> None:
    record = await service.request("alice", [], ask())
    clock.advance(TWO_OF_THREE.ttl)

    assert (got := await service.get(record.id)) is not None and got.status == "expired"
    assert (await service.get(record.id)) == got
    refused = await service.decide(BOB, record.id, "approve", "", digest=record.digest)
    assert (refused.counted, refused.refusal) == (False, "expired")
    assert await event_types(store) == ["approval.requested", "approval.expired"]


async def test_a_decision_after_the_time_expires_the_request_instead(
    service: ApprovalService, store: Store, clock: FrozenClock
) -> None:
    record = await service.request("alice", [], ask())
    clock.advance(TWO_OF_THREE.ttl + 1)
    refused = await service.decide(BOB, record.id, "approve", "", digest=record.digest)

    assert (refused.counted, refused.refusal, refused.record.status) == (False, "expired", "expired")
    assert await event_types(store) == ["approval.requested", "approval.expired"]
    assert await service.decidable_by(BOB) == []


async def test_the_flow_that_waited_on_an_expired_request_reads_it_and_a_new_flow_asks_anew(
    service: ApprovalService, clock: FrozenClock
) -> None:
    record = await service.request("alice", [], ask(flow="flow-1"))
    clock.advance(TWO_OF_THREE.ttl)

    assert (await service.request("alice", [], ask(flow="flow-1"))).status == "expired"
    fresh = await service.request("alice", [], ask(flow="flow-2"))
    assert fresh.status == "pending" and fresh.id != record.id


async def test_the_requester_withdraws_a_pending_request_and_nobody_else_can(
    service: ApprovalService, store: Store
) -> None:
    record = await service.request("alice", [], ask())

    assert await service.withdraw("erin", record.id) is None
    assert await service.of_requester("erin", record.id) is None
    withdrawn = await service.withdraw("alice", record.id)
    assert withdrawn is not None and withdrawn.status == "withdrawn"
    assert (await service.withdraw("alice", record.id)) == withdrawn
    assert (await service.decide(BOB, record.id, "approve", "", digest=record.digest)).refusal == "not_pending"
    assert await event_types(store) == ["approval.requested", "approval.withdrawn"]


async def test_an_approved_request_is_consumed_by_the_flow_that_asks_then_another_flow_gets_a_new_one(
    service: ApprovalService, store: Store
) -> None:
    record = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    await service.decide(BOB, record.id, "approve", "", digest=record.digest)

    consumed = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1"))
    assert (consumed.id, consumed.status, consumed.consumed_by_flow) == (record.id, "consumed", "flow-1")
    assert await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-1")) == consumed
    other = await service.request("alice", [], ask(ONE_OF_THREE, flow="flow-2"))
    assert other.id != record.id and other.status == "pending"
    assert await event_types(store) == [
        "approval.requested",
        "approval.decided",
        "approval.consumed",
        "approval.requested",
    ]


async def test_a_denial_reaches_every_flow_that_waited_on_the_request(service: ApprovalService) -> None:
    record = await service.request("alice", [], ask(flow="flow-1"))
    await service.request("alice", [], ask(flow="flow-2"))
    await service.decide(BOB, record.id, "deny", "no", digest=record.digest)

    for flow in ("flow-1", "flow-2"):
        assert (await service.request("alice", [], ask(flow=flow))).status == "denied"
    assert (await service.request("alice", [], ask(flow="flow-3"))).status == "pending"


# --- the audit trail -----------------------------------------------------------------------------------------------


async def test_every_change_is_an_audit_row_on_the_chain_and_the_chain_verifies(
    service: ApprovalService, store: Store, clock: FrozenClock
) -> None:
    record = await service.request("alice", [], ask(flow="flow-1"))
    await service.decide(BOB, record.id, "approve", "fine", digest=record.digest)
    await service.decide(CAROL, record.id, "approve", "", digest=record.digest)
    await service.request("alice", [], ask(flow="flow-1"))
    denied = await service.request("alice", [], ask(arguments={"env": "staging"}))
    await service.decide(DAVE, denied.id, "deny", "wrong target", digest=denied.digest)
    withdrawn = await service.request("alice", [], ask(arguments={"env": "qa"}))
    await service.withdraw("alice", withdrawn.id)
    expiring = await service.request("alice", [], ask(arguments={"env": "dev"}))
    clock.advance(TWO_OF_THREE.ttl)
    await service.get(expiring.id)

    assert await audit_kinds(store) == [
        "approval.requested",
        "approval.approved",
        "approval.approved",
        "approval.consumed",
        "approval.requested",
        "approval.denied",
        "approval.requested",
        "approval.withdrawn",
        "approval.requested",
        "approval.expired",
    ]
    rows = [e for e in await store.audit_log.query(AuditFilter()) if e.event == "approval.approved"]
    assert [(e.principal, e.action, e.detail, e.tool) for e in rows] == [
        ("bob", "approve", "fine", "deploy"),
        ("carol", "approve", None, "deploy"),
    ]
    assert rows[0].content == {
        "approval": record.id,
        "digest": record.digest,
        "requester": "alice",
        "approver": "bob",
        "method": "development",
        "status": "pending",
    }
    verdict = await store.audit_log.verify()
    assert verdict.ok


async def test_concurrent_requests_for_one_call_on_two_instances_make_one_request(
    store: Store, any_database: str, clock: FrozenClock
) -> None:
    other = await Store.open(any_database, migrate=False, components=all_components())
    try:
        services = [service_on(store, clock), service_on(other, clock)]
        made: list[str] = []

        async def request(service: ApprovalService, flow: str) -> None:
            made.append((await service.request("alice", [], ask(flow=flow))).id)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for n in range(4):
                    group.start_soon(request, services[n % 2], f"flow-{n}")
    finally:
        await other.close()

    assert len(set(made)) == 1
    assert await event_types(store) == ["approval.requested"]
    record = await services[0].get(made[0])
    assert record is not None and sorted(record.flows) == ["flow-0", "flow-1", "flow-2", "flow-3"]


async def test_an_unauthenticated_callers_requests_are_reused_and_capped_together(service: ApprovalService) -> None:
    first = await service.request(None, [], ask(requester=None))
    assert (await service.request(None, [], ask(requester=None, flow="flow-2"))).id == first.id
    for n in range(2):
        await service.request(None, [], ask(requester=None, arguments={"n": n}))
    with pytest.raises(LimitReachedError):
        await service.request(None, [], ask(requester=None, arguments={"n": 9}))
    # Nobody's request is no one's to approve as its requester, and anyone named may.
    assert (await service.decide(BOB, first.id, "approve", "", digest=first.digest)).counted


async def test_requests_past_their_time_no_longer_count_toward_the_cap(
    service: ApprovalService, store: Store, clock: FrozenClock
) -> None:
    for n in range(3):
        await service.request("alice", [], ask(arguments={"n": n}))
    clock.advance(TWO_OF_THREE.ttl)

    assert (await service.request("alice", [], ask(arguments={"n": 3}))).status == "pending"
    assert (await event_types(store)).count("approval.expired") == 3


async def test_the_request_a_status_link_showed_is_followed_when_it_is_the_callers_and_for_this_call(
    service: ApprovalService,
) -> None:
    shown = await service.request("alice", [], ask(flow="flow-1"))
    await service.decide(BOB, shown.id, "deny", "no", digest=shown.digest)

    # A flow the request never saw, following it (the id came from its sealed state): the denial, not a new request.
    followed = await service.request("alice", [], replace(ask(flow="flow-9"), following=shown.id))
    assert (followed.id, followed.status) == (shown.id, "denied")
    # Another caller's id, or one for another call, is ignored.
    erins = await service.request("erin", [], ask(requester="erin"))
    ignored = await service.request("alice", [], replace(ask(flow="flow-8"), following=erins.id))
    assert ignored.id not in (erins.id, shown.id) and ignored.status == "pending"
    other_call = await service.request("alice", [], replace(ask(arguments={"x": 1}), following=shown.id))
    assert other_call.id != shown.id and other_call.status == "pending"
