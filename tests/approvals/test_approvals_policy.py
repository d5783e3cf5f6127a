"""Who may decide a request, and what the decisions add up to: tables of plain data through the pure policy."""

from __future__ import annotations

from dataclasses import replace

import pytest

from askback.approvals.policy import REFUSALS, TRANSITIONS, Refusal, outcome, refusal
from askback.approvals.records import ApprovalRecord, Approver, Vote
from askback.core.approving import Approval, ApprovalStatus

NOW = 1000.0
POLICY = Approval(
    key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}), groups=frozenset({"ops"}), required=2
)
RECORD = ApprovalRecord(
    id="apr_1",
    approval=POLICY,
    tool="deploy",
    arguments={},
    answers={},
    requester="alice",
    actors=("agent",),
    summary=None,
    digest="d" * 64,
    flow_id="f1",
    status="pending",
    created_at=NOW - 10,
    expires_at=NOW + 10,
    decided_at=None,
    votes=(),
)


def vote(approver: str, decision: str = "approve") -> Vote:
    return Vote(approver, decision, "", NOW - 1, "test")  # type: ignore[arg-type]


REFUSAL_CASES: list[tuple[str, ApprovalRecord, Approver, Refusal | None]] = [
    ("a listed principal may", RECORD, Approver("bob"), None),
    ("a member of a listed group may", RECORD, Approver("olga", frozenset({"ops"})), None),
    ("someone neither listed nor in a group may not", RECORD, Approver("mallory", frozenset({"dev"})), "not_allowed"),
    ("the requester may not", RECORD, Approver("alice"), "requester"),
    (
        "the requester may when the policy allows it",
        replace(RECORD, approval=replace(POLICY, self_approval=True)),
        Approver("alice"),
        None,
    ),
    ("an actor of the requester's token may not", replace(RECORD, actors=("bob",)), Approver("bob"), "actor"),
    (
        "an actor may not even with self-approval",
        replace(RECORD, actors=("bob",), approval=replace(POLICY, self_approval=True)),
        Approver("bob"),
        "actor",
    ),
    ("a second decision may not", replace(RECORD, votes=(vote("bob"),)), Approver("bob"), "already_decided"),
    ("another person after one vote may", replace(RECORD, votes=(vote("bob"),)), Approver("carol"), None),
    ("an approved request may not", replace(RECORD, status="approved"), Approver("bob"), "not_pending"),
    ("a withdrawn request may not", replace(RECORD, status="withdrawn"), Approver("bob"), "not_pending"),
    ("an expired request may not", replace(RECORD, status="expired"), Approver("bob"), "expired"),
    ("a pending request past its time may not", replace(RECORD, expires_at=NOW), Approver("bob"), "expired"),
    ("an outsider learns nothing of the status", replace(RECORD, status="denied"), Approver("x"), "not_allowed"),
]


@pytest.mark.parametrize(
    ("record", "approver", "expected"), [case[1:] for case in REFUSAL_CASES], ids=[case[0] for case in REFUSAL_CASES]
)
def test_who_may_decide(record: ApprovalRecord, approver: Approver, expected: Refusal | None) -> None:
    assert refusal(record, approver, NOW) == expected


OUTCOME_CASES: list[tuple[str, int, list[Vote], str | None]] = [
    ("no votes is pending", 2, [], None),
    ("one of two is pending", 2, [vote("bob")], None),
    ("two of two approve", 2, [vote("bob"), vote("carol")], "approved"),
    ("one of one approves", 1, [vote("bob")], "approved"),
    ("a denial denies at once", 2, [vote("bob", "deny")], "denied"),
    ("a denial after an approval denies", 2, [vote("bob"), vote("carol", "deny")], "denied"),
    ("a denial after the quorum still denies what is read", 1, [vote("bob"), vote("carol", "deny")], "denied"),
    ("the same person twice is one approver", 2, [vote("bob"), vote("bob")], None),
]


@pytest.mark.parametrize(
    ("required", "votes", "expected"), [case[1:] for case in OUTCOME_CASES], ids=[case[0] for case in OUTCOME_CASES]
)
def test_what_the_votes_add_up_to(required: int, votes: list[Vote], expected: str | None) -> None:
    assert outcome(replace(POLICY, required=required), votes) == expected


def test_every_refusal_has_its_words_and_every_status_its_row() -> None:
    assert {case[3] for case in REFUSAL_CASES} - {None} | {"digest_changed"} == set(REFUSALS)
    statuses: set[ApprovalStatus] = {"pending", "approved", "denied", "expired", "withdrawn", "consumed"}
    assert set(TRANSITIONS) == statuses
    assert {s for s, after in TRANSITIONS.items() if not after} == {"denied", "expired", "withdrawn", "consumed"}
