"""Tasks waiting for approvals, the pure parts: which questions are approvals' status links (`approval_links`), the
status message a waiting task shows (`waiting_text`), which events say a request ended (`ended_request`) and what a
waiting task becomes when one did (`resumed`), from plain data (the end-to-end behaviour, on real servers, is in
test_approvals_flow_tasks.py)."""

from __future__ import annotations

from typing import Any

import pytest

from askback import Approval
from askback.core.approving import ApprovalState, approval_key, approval_links
from askback.core.round import Limits
from askback.core.state import FlowState
from askback.server.tasks._approval_waits import ENDING_EVENTS, ended_request, resumed, waiting_text
from askback.server.tasks.rows import TaskRecord
from askback.server.tasks.status import TaskStatus
from askback.store import StoredEvent

NOW = 1_800_000_000.0  # 2027-01-15 08:00 UTC
LIMITS = Limits(flow_deadline=1800.0, max_rounds=8)
DROP = Approval(key="db.drop", title="Drop a database", groups=frozenset({"sre"}), ttl=600)
LINK = approval_key("db.drop")


def state(approval: Approval | None = DROP, *, required: int = 1, approvers: tuple[str, ...] = ()) -> ApprovalState:
    return ApprovalState(
        id="apr_1", status="pending", expires_at=NOW + 600, required=required, approvers=approvers, approval=approval
    )


def flow(**asked: str) -> FlowState:
    return FlowState(flow_id="flow_x", started=NOW - 10, round=1, asked=asked)


# -- approval_links --


def test_questions_that_are_all_status_links_naming_their_request_wait_on_those_requests() -> None:
    other = approval_key("pay")
    found = approval_links({LINK: {}, other: {}}, flow(**{LINK: "approval:apr_1", other: "approval:apr_2"}))

    assert found == {LINK: "apr_1", other: "apr_2"}


def test_no_questions_wait_on_no_approval() -> None:
    assert approval_links({}, flow(**{LINK: "approval:apr_1"})) is None


def test_a_question_that_is_not_a_status_link_makes_the_task_wait_for_answers() -> None:
    asked = {LINK: {}, "confirm": {}}

    assert approval_links(asked, flow(**{LINK: "approval:apr_1", "confirm": "approval:apr_2"})) is None


def test_a_status_link_whose_request_the_state_does_not_name_makes_the_task_wait_for_answers() -> None:
    assert approval_links({LINK: {}}, flow()) is None
    assert approval_links({LINK: {}}, flow(**{LINK: "form"})) is None
    assert approval_links({LINK: {}}, flow(**{LINK: "approval:"})) is None


# -- waiting_text --


def test_a_request_names_its_title_how_many_more_approvals_from_whom_and_until_when() -> None:
    assert waiting_text([state()]) == (
        "Waiting for approval: Drop a database — 1 more approval from sre, until 2027-01-15 08:10 UTC"
    )


def test_the_approvals_still_needed_count_those_given_and_never_go_below_zero() -> None:
    assert "— 2 more approvals from" in waiting_text([state(required=3, approvers=("bob",))])
    assert "— 0 more approvals from" in waiting_text([state(required=1, approvers=("bob", "erin"))])


def test_who_may_approve_names_groups_then_people_each_sorted() -> None:
    approval = Approval(key="pay", title="Pay", groups=frozenset({"sre", "dba"}), principals=frozenset({"zoe", "amy"}))
    # Four names: three are named, the rest counted.
    assert "from dba, sre, amy or 1 more," in waiting_text([state(approval)])
    two = Approval(key="pay", title="Pay", groups=frozenset({"sre"}), principals=frozenset({"amy"}))
    assert "from sre or amy," in waiting_text([state(two)])
    three = Approval(key="pay", title="Pay", principals=frozenset({"c", "a", "b"}))
    assert "from a or b or c," in waiting_text([state(three)])


def test_a_request_without_its_policy_is_the_request() -> None:
    assert waiting_text([state(None)]) == (
        "Waiting for approval: the request — 1 more approval, until 2027-01-15 08:10 UTC"
    )


def test_several_requests_are_joined_and_none_is_a_request() -> None:
    pay = Approval(key="pay", title="Pay", principals=frozenset({"amy"}))

    assert waiting_text([state(), state(pay)]) == (
        "Waiting for approval: Drop a database — 1 more approval from sre, until 2027-01-15 08:10 UTC; "
        "Pay — 1 more approval from amy, until 2027-01-15 08:10 UTC"
    )
    assert waiting_text([]) == "Waiting for approval: a request"


# -- ended_request --


def event(type: str, **data: Any) -> StoredEvent:
    return StoredEvent(id=7, type=type, at=NOW, data=data)


@pytest.mark.parametrize("kind", sorted(ENDING_EVENTS))
def test_a_decided_expired_or_withdrawn_request_names_its_requester_and_id(kind: str) -> None:
    assert ended_request(event(kind, requester="alice", id="apr_1")) == ("alice", "apr_1")


def test_a_request_made_without_a_token_has_no_requester() -> None:
    assert ended_request(event("approval.decided", requester=None, id="apr_1")) == (None, "apr_1")
    assert ended_request(event("approval.decided", id="apr_1")) == (None, "apr_1")


def test_other_events_end_no_request() -> None:
    assert ended_request(event("approval.requested", requester="alice", id="apr_1")) is None
    assert ended_request(event("account.connected", requester="alice", id="apr_1")) is None


@pytest.mark.parametrize("data", [{}, {"id": ""}, {"id": 7}, {"id": "apr_1", "requester": 7}])
def test_an_event_whose_data_names_no_request_ends_none(data: dict[str, Any]) -> None:
    assert ended_request(event("approval.decided", **data)) is None


# -- resumed --


def waiting(**changes: Any) -> TaskRecord:
    fields: dict[str, Any] = {
        "task_id": "task_x",
        "principal": "alice",
        "scopes": (),
        "tool": "drop",
        "arguments": {},
        "capabilities": {},
        "status": TaskStatus.WORKING,
        "status_message": "Waiting for approval: Drop a database",
        "created_at": NOW - 10,
        "updated_at": NOW - 10,
        "expires_at": NOW + 3600,
        "ttl_ms": 3_600_000,
        "poll_ms": 1000,
        "flow": flow(**{LINK: "approval:apr_1"}),
        "outstanding": {f"{LINK}.1": {"key": LINK, "request": {}, "approval": "apr_1"}},
        "responses": {},
    }
    return TaskRecord(**(fields | changes))


def resume(record: TaskRecord, ended: list[str], *, now: float = NOW) -> TaskRecord | None:
    return resumed(record, ended, owner="here:1", lease=30.0, now=now, limits=LIMITS)


def test_a_task_waiting_on_an_ended_request_goes_back_to_working_under_the_lease_asking_nothing() -> None:
    after = resume(waiting(), ["apr_9", "apr_1"])

    assert after is not None
    assert (after.status, after.outstanding, after.status_message) == (TaskStatus.WORKING, {}, None)
    assert (after.lease_owner, after.lease_until, after.updated_at) == ("here:1", NOW + 30.0, NOW)


def test_a_task_waiting_on_other_requests_stays() -> None:
    assert resume(waiting(), ["apr_9"]) is None
    assert resume(waiting(), []) is None


def test_a_task_not_waiting_for_approvals_stays() -> None:
    assert resume(waiting(lease_owner="there:1", lease_until=NOW + 5), ["apr_1"]) is None
    assert resume(waiting(outstanding={f"{LINK}.1": {"key": LINK, "request": {}}}), ["apr_1"]) is None


def test_a_task_past_its_flow_deadline_stays_for_tasks_get_to_end_it() -> None:
    assert resume(waiting(), ["apr_1"], now=NOW - 10 + 1800) is not None
    assert resume(waiting(), ["apr_1"], now=NOW - 10 + 1801) is None
