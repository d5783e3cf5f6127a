"""Answers: validated on the server, re-asked when wrong, ignored when unknown; links never taken as proof; flows
end politely when out of time or rounds. Through the official SDK client, in memory."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Literal

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field

from askback import Askback, Choice, Default, Flow, Form, Link
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.testing import accept, answered_by_hand, text
from infra import BOTH_ANSWER_MODES

pytestmark = [pytest.mark.anyio, BOTH_ANSWER_MODES]


class Order(BaseModel):
    quantity: int = Field(title="Quantity", ge=1, le=10)
    size: Literal["S", "M", "L"] = Field(title="Size")
    gift: bool = Field(default=False, title="Gift wrap")


order_form = Form(key="order", model=Order, message="How many, and which size?")
connect = Link(key="connect", message="Connect your calendar.")
colour = Choice(key="colour", message="Which colour?", options=["red", "blue"], fallback=Default("red"))
ACCOUNTS: dict[str, bool] = {}
ORDERS: list[dict[str, Any]] = []


def build(settings: Any, clock: FrozenClock) -> Askback:
    app = Askback("answers-test", settings=settings, clock=clock)

    @app.tool(asks=[order_form])
    async def order(item: str, flow: Flow) -> str:
        answer = flow.ask(order_form)

        async def write() -> dict[str, Any]:
            ORDERS.append({"item": item, **answer.model_dump()})
            return answer.model_dump()

        placed = await flow.once("order", write)
        return f"Ordered {placed['quantity']} x {item} size {placed['size']}."

    @app.tool(asks=[connect])
    async def calendar(user: str, flow: Flow) -> str:
        flow.link(connect, url=f"https://accounts.example.com/connect?flow={user}", done=ACCOUNTS.get(user, False))
        return f"Calendar of {user} is connected."

    @app.tool(asks=[colour])
    async def paint(flow: Flow) -> str:
        return f"Painted {flow.ask(colour)}."

    return app


@pytest.fixture
async def app(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Askback]:
    ORDERS.clear()
    ACCOUNTS.clear()
    server = build(make_settings(max_rounds=4), clock)
    async with server.running():
        yield server


async def call(
    client: Client, tool: str, args: dict[str, Any], responses: dict[str, ElicitResult] | None = None, state: Any = None
) -> CallToolResult | InputRequiredResult:
    result = await client.session.call_tool(
        tool, args, input_responses=responses, request_state=state, allow_input_required=True
    )
    assert isinstance(result, CallToolResult | InputRequiredResult)
    return result


def message(result: CallToolResult | InputRequiredResult, key: str) -> str:
    assert isinstance(result, InputRequiredResult) and result.input_requests
    params = result.input_requests[key].params
    assert params is not None
    return str(params.message)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ({"quantity": "many", "size": "M"}, "Quantity"),  # wrong type
        ({"quantity": 11, "size": "M"}, "Quantity"),  # out of bounds
        ({"size": "M"}, "Quantity"),  # missing field
        ({"quantity": 2, "size": "XXL"}, "Size"),  # unknown enum value
    ],
)
async def test_invalid_form_content_is_asked_again_saying_what_was_wrong(
    app: Askback, content: dict[str, Any], why: str
) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "shirt"})
        second = await call(client, "order", {"item": "shirt"}, {"order": accept(**content)}, first.request_state)  # type: ignore[union-attr]
        assert isinstance(second, InputRequiredResult)
        assert set(second.input_requests or {}) == {"order"}
        assert "not accepted" in message(second, "order") and why in message(second, "order")
        assert ORDERS == []
        third = await call(
            client, "order", {"item": "shirt"}, {"order": accept(quantity=2, size="M")}, second.request_state
        )
    assert isinstance(third, CallToolResult) and not third.is_error
    assert ORDERS == [{"item": "shirt", "quantity": 2, "size": "M", "gift": False}]
    rejected = await (await app.store()).audit_log.query(AuditFilter(event="rejected"))
    assert [e.outcome for e in rejected] == ["invalid_answer"] and why in (rejected[0].detail or "")


async def test_unknown_keys_and_extra_fields_are_ignored(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "hat"})
        done = await call(
            client,
            "order",
            {"item": "hat"},
            {"order": accept(quantity=1, size="S", colour="green"), "stranger": accept(x=1)},
            first.request_state,  # type: ignore[union-attr]
        )
    assert isinstance(done, CallToolResult) and "Ordered 1 x hat size S." in text(done)
    answered = await (await app.store()).audit_log.query(AuditFilter(event="answered"))
    assert [e.content for e in answered] == [{"quantity": 1, "size": "S"}]  # the extra field is not kept


async def test_an_accepted_link_alone_never_completes(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "calendar", {"user": "ada"})
        assert isinstance(first, InputRequiredResult)
        params = first.input_requests["connect"].params  # type: ignore[index]
        assert params.mode == "url" and params.url.startswith("https://accounts.example.com/")  # type: ignore[union-attr]
        # The user says they opened it, but the account is not connected: ask again.
        second = await call(client, "calendar", {"user": "ada"}, {"connect": accept()}, first.request_state)
        assert isinstance(second, InputRequiredResult)
        assert "not seem to be finished" in message(second, "connect")
        ACCOUNTS["ada"] = True  # the real state changes (the hosted page did its work)
        third = await call(client, "calendar", {"user": "ada"}, {"connect": accept()}, second.request_state)
    assert isinstance(third, CallToolResult) and text(third) == "Calendar of ada is connected."


async def test_a_link_needs_url_mode_declared_explicitly(app: Askback) -> None:
    from mcp.shared.exceptions import MCPError

    async with Client(app.mcp) as client:
        with pytest.raises(MCPError) as err:
            await call(client, "calendar", {"user": "ada"})
    assert err.value.error.code == -32021
    assert err.value.error.data == {"requiredCapabilities": {"elicitation": {"url": {}}}}


async def test_a_default_fallback_answers_for_a_client_that_cannot_ask(app: Askback) -> None:
    async with Client(app.mcp) as client:
        result = await call(client, "paint", {})
    assert isinstance(result, CallToolResult) and text(result) == "Painted red."


async def test_answers_without_askback_state_are_asked_again_before_an_effect(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        # A client that answers without ever having received askback's state (or drops it).
        unsealed = await call(client, "order", {"item": "mug"}, {"order": accept(quantity=1, size="L")})
        assert isinstance(unsealed, InputRequiredResult) and set(unsealed.input_requests or {}) == {"order"}
        assert unsealed.request_state
        assert ORDERS == []
        done = await call(
            client, "order", {"item": "mug"}, {"order": accept(quantity=1, size="L")}, unsealed.request_state
        )
    assert isinstance(done, CallToolResult)
    assert len(ORDERS) == 1


async def test_a_tool_without_effects_completes_on_answers_alone(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await call(client, "paint", {}, {"colour": accept(choice="blue")})
    assert isinstance(result, CallToolResult) and text(result) == "Painted blue."


async def test_the_round_cap_ends_the_flow_with_a_clear_message(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await call(client, "order", {"item": "sock"})
        rounds = 1
        while isinstance(result, InputRequiredResult):
            assert rounds <= 5, "the cap of 4 rounds did not stop the flow"
            result = await call(
                client, "order", {"item": "sock"}, {"order": accept(quantity=0, size="M")}, result.request_state
            )
            rounds += 1
    assert not result.is_error
    assert text(result).startswith("Stopped: this request asked 4 rounds")
    assert ORDERS == []


async def test_past_the_flow_deadline_the_person_is_told_it_took_too_long(app: Askback, clock: FrozenClock) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "cap"})
        clock.advance(app.settings.flow_deadline + 1)
        late = await call(
            client, "order", {"item": "cap"}, {"order": accept(quantity=1, size="M")}, first.request_state
        )  # type: ignore[union-attr]
    assert isinstance(late, CallToolResult) and not late.is_error
    assert text(late).startswith("Expired: this request waited more than 15 minutes")
    assert ORDERS == []


async def test_within_the_deadline_a_slow_answer_still_completes(app: Askback, clock: FrozenClock) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "cap"})
        clock.advance(app.settings.flow_deadline - 1)
        done = await call(
            client, "order", {"item": "cap"}, {"order": accept(quantity=1, size="M")}, first.request_state
        )  # type: ignore[union-attr]
    assert isinstance(done, CallToolResult) and text(done).startswith("Ordered")


async def test_a_replayed_final_round_returns_the_first_outcome_and_runs_nothing_again(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "bag"})
        final = ({"order": accept(quantity=3, size="L")}, first.request_state)  # type: ignore[union-attr]
        results = [await call(client, "order", {"item": "bag"}, *final) for _ in range(4)]
        # Even different answers on a replay of a finished flow change nothing.
        results.append(await call(client, "order", {"item": "bag"}, {"order": accept(quantity=9, size="S")}, final[1]))
    texts = {text(r) for r in results}
    assert texts == {"Ordered 3 x bag size L."}
    assert len(ORDERS) == 1
    trail = await (await app.store()).audit_log.query(AuditFilter(tool="order"))
    ends = [(e.event, e.outcome) for e in trail if e.event in ("completed", "replayed")]
    assert ends == [("completed", "completed")] + [("replayed", "completed")] * 4
    # The replays answered nothing: the trail counts the person's answer once.
    assert [e.event for e in trail].count("answered") == 1


async def _logged_order(server: Askback, caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The audit log's records of one two-round order, and its trail in the database (unchanged by the log)."""
    caplog.clear()
    async with server.running(), Client(server.mcp, elicitation_callback=answered_by_hand) as client:
        first = await call(client, "order", {"item": "pen"})
        await call(client, "order", {"item": "pen"}, {"order": accept(quantity=1, size="S")}, first.request_state)  # type: ignore[union-attr]
        trail = await (await server.store()).audit_log.query(AuditFilter(tool="order"))
    assert [e.event for e in trail][-3:] == ["asked", "answered", "completed"]
    return [r for r in caplog.records if r.name == "askback.audit"]


async def test_audit_events_are_logged_one_record_per_round_by_default(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    records = await _logged_order(build(make_settings(), clock), caplog)
    assert len(records) == 2 and all(r.levelno == logging.INFO for r in records)
    asked, second = records
    assert asked.askback_event == "asked" and asked.keys == ["order"] and asked.tool == "order"  # type: ignore[attr-defined]
    assert second.askback_events == ["answered", "completed"] and not hasattr(second, "askback_event")  # type: ignore[attr-defined]
    assert second.keys == ["order"] and second.action == "accept" and second.outcome == "completed"  # type: ignore[attr-defined]
    assert second.getMessage().startswith("askback answered,completed tool=order flow=")
    flow_ids = {r.flow_id for r in records}  # type: ignore[attr-defined]
    assert len(flow_ids) == 1 and None not in flow_ids
    for r in records:
        assert "requestState" not in r.getMessage() and "v1." not in r.getMessage()


async def test_the_audit_log_can_be_one_record_per_event_at_another_level_or_off(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="askback.audit")
    records = await _logged_order(build(make_settings(audit_log="event", audit_log_level="debug"), clock), caplog)
    assert [r.askback_event for r in records] == ["asked", "answered", "completed"]  # type: ignore[attr-defined]
    assert {r.levelno for r in records} == {logging.DEBUG}
    assert records[1].keys == ["order"] and records[2].outcome == "completed"  # type: ignore[attr-defined]
    assert await _logged_order(build(make_settings(audit_log="off"), clock), caplog) == []
    # At a level the logger leaves out, nothing is logged either; the database keeps the events (checked above).
    caplog.set_level(logging.INFO, logger="askback.audit")
    assert await _logged_order(build(make_settings(audit_log_level="debug"), clock), caplog) == []
