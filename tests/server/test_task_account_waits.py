"""Which waiting task an account that became ACTIVE moves back to `working`: the pure decision, from plain data (the
end-to-end behaviour, with real processes, is in test_tasks_accounts.py)."""

from __future__ import annotations

from typing import Any

from askback.core.questions import connect_key
from askback.core.round import Limits
from askback.core.state import FlowState
from askback.server.tasks._account_waits import ActiveAccount, active_account, asked_after, resumed
from askback.server.tasks.rows import TaskRecord
from askback.server.tasks.status import TaskStatus
from askback.store import StoredEvent

LIMITS = Limits(flow_deadline=600.0, max_rounds=8)
NOW = 1_000.0


def link(key: str) -> dict[str, Any]:
    return {"key": key, "request": {"method": "elicitation/create", "params": {"mode": "url", "url": "https://x/"}}}


def waiting(**outstanding: dict[str, Any]) -> TaskRecord:
    return TaskRecord(
        task_id="task_x",
        principal="alice",
        scopes=(),
        tool="read_mail",
        arguments={},
        capabilities={},
        status=TaskStatus.INPUT_REQUIRED,
        status_message="Waiting for your answer.",
        created_at=NOW - 10,
        updated_at=NOW - 10,
        expires_at=NOW + 3600,
        ttl_ms=3_600_000,
        poll_ms=1000,
        flow=FlowState(flow_id="flow_x", started=NOW - 10, round=1),
        outstanding=outstanding,
        responses={},
    )


def decide(record: TaskRecord, account: ActiveAccount, *, now: float = NOW) -> TaskRecord | None:
    return resumed(record, [account], owner="here:1", lease=30.0, now=now, limits=LIMITS)


WORK = connect_key("heldmail", "work")
HERE: dict[str, Any] = {"owner": "here:1", "lease": 30.0, "now": NOW, "limits": LIMITS}


def test_a_task_waiting_only_for_the_account_goes_back_to_working_under_the_lease_with_the_link_unanswered() -> None:
    after = decide(waiting(**{f"{WORK}.1": link(WORK)}), ActiveAccount("alice", "heldmail", "work"))

    assert after is not None
    assert (after.status, after.outstanding, after.responses) == (TaskStatus.WORKING, {}, {})
    assert (after.lease_owner, after.lease_until, after.status_message) == ("here:1", NOW + 30.0, None)


def test_a_task_is_never_resumed_for_another_persons_another_labels_or_another_connections_account() -> None:
    record = waiting(**{f"{WORK}.1": link(WORK)})

    assert decide(record, ActiveAccount("bob", "heldmail", "work")) is None
    assert decide(record, ActiveAccount("alice", "heldmail", "")) is None
    assert decide(record, ActiveAccount("alice", "othermail", "work")) is None


def test_a_task_also_waiting_for_another_answer_or_past_its_deadline_stays_as_it_is() -> None:
    account = ActiveAccount("alice", "heldmail", "work")
    other = {"key": "ok", "request": {"method": "elicitation/create", "params": {"mode": "form"}}}

    assert decide(waiting(**{f"{WORK}.1": link(WORK), "ok.1": other}), account) is None
    assert decide(waiting(**{f"{WORK}.1": link(WORK)}), account, now=NOW + LIMITS.flow_deadline) is None


def test_only_connected_and_recovered_events_name_an_account_that_became_active() -> None:
    data = {"principal": "alice", "connection": "heldmail", "label": "work", "new_status": "ACTIVE"}

    assert active_account(StoredEvent(1, "account.connected", NOW, data)) == ActiveAccount("alice", "heldmail", "work")
    assert active_account(StoredEvent(2, "account.recovered", NOW, data)) is not None
    assert active_account(StoredEvent(3, "account.refreshed", NOW, data)) is None
    assert active_account(StoredEvent(4, "account.connected", NOW, {"principal": "alice"})) is None


def test_a_task_waiting_for_two_accounts_goes_back_to_working_only_once_both_are_connected() -> None:
    other = connect_key("othermail", "work")
    record = waiting(**{f"{WORK}.1": link(WORK), f"{other}.1": link(other)})
    held, more = ActiveAccount("alice", "heldmail", "work"), ActiveAccount("alice", "othermail", "work")

    assert resumed(record, [held], **HERE) is None
    assert resumed(record, [held, ActiveAccount("bob", "othermail", "work")], **HERE) is None
    after = resumed(record, [held, more], **HERE)
    assert after is not None and after.status == TaskStatus.WORKING


def test_the_questions_of_a_round_remember_where_the_event_log_was_when_their_run_started() -> None:
    asked = {**link(WORK), "events_after": 7}

    assert asked_after(waiting(**{f"{WORK}.1": asked, "ok.1": {**link("ok"), "events_after": 9}})) == 7
    assert asked_after(waiting(**{f"{WORK}.1": link(WORK)})) is None
