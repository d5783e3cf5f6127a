"""A call parked on an approval is sent back when the server signs `approval.decided` for exactly that request: its
status link left unanswered, so that the server reads the decision itself. Which question waits on which request,
and how the receiver reads the event, as plain data; the resume itself, against a real server, is in
test_runtime_webhooks.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from askback.runtime import ApprovalDecided
from askback.runtime.questions import ParkedQuestion, approval_question
from askback.runtime.webhooks import AccountReady, Ignored, Unreadable, account_event


def decided(approval_id: str = "apr_one", requester: Any = "ada", status: str = "approved") -> dict[str, Any]:
    return {
        "type": "approval.decided",
        "timestamp": "2030-03-17T17:46:40Z",
        "data": {"id": approval_id, "requester": requester, "status": status, "digest": "d" * 64},
    }


def question(key: str, url: str | None, mode: str = "url") -> ParkedQuestion:
    return ParkedQuestion("call_1", 1, key, "elicitation/create", mode, "m", url=url)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("key", "url", "found"),
    [
        ("askback.approval.deploy", "https://tools.example.com/approvals/requests/apr_one/status", True),
        ("askback.approval.deploy", "https://tools.example.com/x/approvals/requests/apr_one/status", True),
        ("askback.approval.deploy", "https://tools.example.com/approvals/requests/apr_two/status", False),
        ("askback.approval.deploy", "https://tools.example.com/approvals/requests/apr_one", False),
        ("askback.approval.deploy", "https://tools.example.com/approvals/requests/apr_one/status/x", False),
        ("connect.mail", "https://tools.example.com/approvals/requests/apr_one/status", False),
        ("askback.approval.deploy", None, False),
        ("askback.approval.deploy", "not a url", False),
    ],
)
def test_the_question_waiting_on_an_approval_is_its_link_under_the_approval_key_to_exactly_that_status_page(
    key: str, url: str | None, found: bool
) -> None:
    asked = question(key, url)
    assert (approval_question((asked,), approval_id="apr_one") is asked) is found


def test_a_form_question_and_an_empty_or_huge_id_wait_on_no_approval() -> None:
    url = "https://tools.example.com/approvals/requests/apr_one/status"
    assert approval_question((question("askback.approval.deploy", url, mode="form"),), approval_id="apr_one") is None
    assert approval_question((question("askback.approval.deploy", url),), approval_id="") is None
    assert approval_question((question("askback.approval.deploy", url),), approval_id="a" * 65) is None


def test_an_approval_decided_event_is_read_as_a_hint_for_its_requester_and_request() -> None:
    assert account_event(json.dumps(decided()).encode()) == AccountReady(
        "approval.decided", ApprovalDecided("ada", "apr_one")
    )
    assert account_event(json.dumps(decided(requester=None)).encode()) == Ignored("approval.decided")
    assert isinstance(account_event(json.dumps(decided(requester=7)).encode()), Unreadable)
    assert isinstance(account_event(json.dumps(decided(approval_id="")).encode()), Unreadable)
    assert isinstance(account_event(json.dumps(decided(approval_id="x" * 65)).encode()), Unreadable)
    assert account_event(json.dumps({**decided(), "type": "approval.requested"}).encode()) == Ignored(
        "approval.requested"
    )
