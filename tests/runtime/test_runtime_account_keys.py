"""Which parked round waits for which account, and what a look sends back: pure decisions, no I/O."""

from __future__ import annotations

from typing import Any

from askback.core.questions import connect_key
from askback.runtime.questions import Answer, Ready, account_question, look_decision, pending_questions


def _link(key: str) -> dict[str, Any]:
    params: dict[str, Any] = {"mode": "url", "message": "Connect.", "url": "https://tools.example.com/a/start?t=1"}
    return {"resultType": "input_required", "inputRequests": {key: {"method": "elicitation/create", "params": params}}}


def test_each_account_has_a_link_key_of_its_own_and_a_call_parked_under_the_plain_key_waits_for_the_default_one() -> (
    None
):
    keys = [connect_key("heldmail", label) for label in ("", "work", "Work", "work mail", "work mail ", "wörk")]
    assert keys[:3] == ["connect.heldmail", "connect.heldmail.work", "connect.heldmail.Work"]
    assert len(set(keys)) == len(keys) and all(len(k) <= 64 for k in keys)
    old = pending_questions("call_1", 1, _link("connect.heldmail"))
    work = pending_questions("call_2", 1, _link("connect.heldmail.work"))

    assert account_question(old, connection="heldmail", label="") == old[0]
    assert account_question(old, connection="heldmail", label="work") is None
    assert account_question(work, connection="heldmail", label="work") == work[0]
    assert account_question(work, connection="heldmail", label="") is None
    assert account_question(work, connection="heldmail", label="Work") is None


def test_a_look_sends_every_answer_but_the_links_and_waits_for_the_others() -> None:
    questions = pending_questions("call_1", 1, _link("connect.heldmail"))

    assert look_decision(questions, {}, open_key="connect.heldmail", now=0, deadline=None).responses == {}  # type: ignore[union-attr]
    ok = Answer("accept", {"ok": True})
    form = {"mode": "form", "message": "Ok?", "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}  # fmt: skip
    two = (*questions, *pending_questions("call_1", 1, {"inputRequests": {"ok": {"method": "elicitation/create", "params": form}}}))  # fmt: skip
    assert look_decision(two, {}, open_key="connect.heldmail", now=0, deadline=None).missing == ("ok",)  # type: ignore[union-attr]
    assert look_decision(two, {"ok": ok}, open_key="connect.heldmail", now=0, deadline=None).responses == {"ok": ok}  # type: ignore[union-attr]


def test_a_look_at_a_round_past_its_deadline_is_the_deadline_resume_with_the_link_cancelled() -> None:
    questions = pending_questions("call_1", 1, _link("connect.heldmail"))

    before = look_decision(questions, {}, open_key="connect.heldmail", now=99, deadline=100)
    after = look_decision(questions, {}, open_key="connect.heldmail", now=100, deadline=100)

    assert before == Ready({})
    assert after == Ready({"connect.heldmail": Answer("cancel")}, cancelled=("connect.heldmail",))
