"""An answer's values must have the JSON type the form asked for: "yes" is not a tick, "3" is not a number. What
must stay lenient stays so: a date typed as text, a whole number for a number."""

from __future__ import annotations

import datetime
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field

from askback import Askback, Choice, Confirm, Flow, Form
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.core.questions import AnswerRejected
from askback.testing import accept, answered_by_hand, text
from infra import BOTH_ANSWER_MODES

pytestmark = [BOTH_ANSWER_MODES]


class Trip(BaseModel):
    day: datetime.date = Field(title="Day")
    budget: float = Field(title="Budget")
    nights: int = Field(title="Nights")
    tier: Literal["basic", "plus"] = Field(title="Tier")
    extras: list[Literal["bike", "boat"]] = Field(default_factory=list, title="Extras")
    note: str | None = Field(default=None, title="Note")


approve = Confirm(key="approve", message="Delete it?", field="ok", title="Approve")
typed = Confirm(key="typed", message="Type the name.", field="name", title="Name", typed=True)
trip = Form(key="trip", model=Trip, message="Plan the trip.")
pick = Choice(key="pick", message="Which one?", options={"a": "Option A", "b": "Option B"})
GOOD = {"day": "2026-05-01", "budget": 100.5, "nights": 2, "tier": "basic"}


@pytest.mark.parametrize(
    ("question", "content", "why"),
    [
        (approve, {"ok": "yes"}, "Approve: must be true or false"),
        (approve, {"ok": "true"}, "Approve: must be true or false"),
        (approve, {"ok": 1}, "Approve: must be true or false"),
        (approve, {"ok": None}, "Approve: must be true or false"),
        (typed, {"name": 42}, "Name: must be text"),
        (typed, {"name": True}, "Name: must be text"),
        (trip, {**GOOD, "nights": "2"}, "Nights: must be a whole number"),
        (trip, {**GOOD, "nights": 2.5}, "Nights: must be a whole number"),
        (trip, {**GOOD, "nights": True}, "Nights: must be a whole number"),
        (trip, {**GOOD, "budget": "100"}, "Budget: must be a number"),
        (trip, {**GOOD, "budget": False}, "Budget: must be a number"),
        (trip, {**GOOD, "day": 20260501}, "Day: must be text"),
        (trip, {**GOOD, "tier": "Basic"}, "Tier: must be one of the choices offered"),
        (trip, {**GOOD, "tier": ["basic"]}, "Tier: must be one of the choices offered"),
        (trip, {**GOOD, "extras": "bike"}, "Extras: must be a list of the choices offered"),
        (trip, {**GOOD, "extras": ["bike", "car"]}, "Extras: must be a list of the choices offered"),
        (trip, {**GOOD, "note": 7}, "Note: must be text"),
        (pick, {"choice": "A"}, "Choice: must be one of the choices offered"),
        (pick, {"choice": 0}, "Choice: must be one of the choices offered"),
    ],
)
def test_a_value_of_another_json_type_than_the_form_asked_is_rejected_naming_the_field_not_the_value(
    question: Any, content: dict[str, Any], why: str
) -> None:
    with pytest.raises(AnswerRejected) as rejected:
        question.read(content, expect="x")
    assert str(rejected.value) == why


def test_only_the_json_type_is_strict_a_date_as_text_and_a_whole_number_for_a_number_are_read() -> None:
    assert approve.read({"ok": True}) is True and approve.read({"ok": False}) is False
    assert typed.read({"name": "billing"}, expect="billing") is True
    read = trip.read({**GOOD, "budget": 100, "extras": ["boat"], "note": None})
    assert (read.day, read.budget, read.nights, read.extras) == (datetime.date(2026, 5, 1), 100.0, 2, ["boat"])
    assert pick.read({"choice": "b"}) == "b"
    with pytest.raises(AnswerRejected):
        trip.read({**GOOD, "budget": "100"})  # the same number, as text


DELETED: list[str] = []


@pytest.fixture
async def app(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Askback]:
    DELETED.clear()
    server = Askback("answer-types-test", settings=make_settings(max_rounds=4), clock=clock)

    @server.tool(asks=[approve])
    async def delete_project(project: str, flow: Flow) -> str:
        if not flow.ask(approve):
            return "Cancelled."
        await flow.once("delete", lambda: _delete(project))
        return f"Deleted {project}."

    async with server.running():
        yield server


async def _delete(project: str) -> None:
    DELETED.append(project)


@pytest.mark.anyio
async def test_a_string_yes_for_a_confirmation_is_asked_again_and_deletes_nothing(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        asked = await client.session.call_tool("delete_project", {"project": "p1"}, allow_input_required=True)
        assert isinstance(asked, InputRequiredResult)
        again = await client.session.call_tool(
            "delete_project",
            {"project": "p1"},
            input_responses={"approve": ElicitResult(action="accept", content={"ok": "yes"})},
            request_state=asked.request_state,
            allow_input_required=True,
        )
        assert isinstance(again, InputRequiredResult) and set(again.input_requests or {}) == {"approve"}
        assert DELETED == []
        done = await client.session.call_tool(
            "delete_project",
            {"project": "p1"},
            input_responses={"approve": accept(ok=True)},
            request_state=again.request_state,
            allow_input_required=True,
        )
    assert isinstance(done, CallToolResult) and text(done) == "Deleted p1." and DELETED == ["p1"]
    rejected = await (await app.store()).audit_log.query(AuditFilter(event="rejected"))
    assert [(e.outcome, e.detail) for e in rejected] == [("invalid_answer", "Approve: must be true or false")]
