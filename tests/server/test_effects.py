"""Effects after the input point: once per flow, recorded outcomes, failures released, dead claims taken over."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from askback import Askback, Confirm, DefinitionError, Flow, Link
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.testing import accept, answered_by_hand, text

pytestmark = pytest.mark.anyio

go = Confirm(key="go", message="Go?")
RUNS: list[str] = []


def build(settings: Any, clock: FrozenClock) -> Askback:
    app = Askback("effects-test", settings=settings, clock=clock)

    @app.tool(asks=[go])
    async def launch(name: str, flow: Flow) -> str:
        if not flow.ask(go):
            return "Not launched."

        async def fire() -> Any:
            RUNS.append(name)
            if name == "boom":
                raise RuntimeError("the launcher failed")
            if name == "object":
                return object()
            return {"launched": name}

        outcome = await flow.once("launch", fire)
        return f"Launched {outcome['launched']}."

    return app


@pytest.fixture
async def app(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Askback]:
    RUNS.clear()
    server = build(make_settings(effect_wait=0.3, effect_lease=60), clock)
    async with server.running():
        yield server


async def final_round(client: Client, name: str) -> tuple[str, dict[str, ElicitResult]]:
    first = await client.session.call_tool("launch", {"name": name}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult) and first.request_state
    return first.request_state, {"go": accept(confirm=True)}


async def send(client: Client, name: str, state: str, answers: dict[str, ElicitResult]) -> Any:
    return await client.session.call_tool(
        "launch", {"name": name}, input_responses=answers, request_state=state, allow_input_required=True
    )


async def test_a_failed_effect_releases_its_claim_so_a_retry_runs_it(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        state, answers = await final_round(client, "boom")
        failed = await send(client, "boom", state, answers)
        assert isinstance(failed, CallToolResult) and failed.is_error
        again = await send(client, "boom", state, answers)
        assert isinstance(again, CallToolResult) and again.is_error
    assert RUNS == ["boom", "boom"]  # ran again because the first run failed, and recorded nothing


async def test_an_outcome_that_is_not_json_is_refused_but_the_effect_is_not_repeated(app: Askback) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        state, answers = await final_round(client, "object")
        with pytest.raises(MCPError, match="JSON-serialisable"):
            await send(client, "object", state, answers)
        # The replay gets the recorded (empty) outcome; this tool cannot use it, but nothing ran twice.
        replay = await send(client, "object", state, answers)
        assert isinstance(replay, CallToolResult) and replay.is_error
    assert RUNS == ["object"]


async def test_a_claim_whose_process_died_is_waited_for_on_the_injected_clock_then_taken_over_after_the_lease(
    app: Askback, clock: FrozenClock
) -> None:
    async with Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        state, answers = await final_round(client, "apollo")
        # Another instance claimed this effect and died before recording an outcome.
        store = await app.store()
        flow_id = (await store.audit_log.query(AuditFilter(event="asked")))[-1].flow_id
        assert flow_id is not None
        claim = await store.flows.claim_effect(flow_id, "launch", instance="dead:1", at=clock.now())
        assert claim.status == "won"

        refused: list[BaseException] = []

        async def replay() -> None:
            try:
                await send(client, "apollo", state, answers)
            except MCPError as exc:
                refused.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(replay)
            # The replay waits for the other attempt on the app's clock: it is still waiting until the clock moves.
            await clock.until_sleeping()
            assert refused == []
            clock.advance(0.3)  # ASKBACK_EFFECT_WAIT
        assert len(refused) == 1 and "still running on another instance" in str(refused[0])
        assert RUNS == []

        clock.advance(61)  # past the lease: the dead claim is taken over
        done = await send(client, "apollo", state, answers)
    assert isinstance(done, CallToolResult) and text(done) == "Launched apollo."
    assert RUNS == ["apollo"]


async def test_a_replay_waiting_for_an_effect_in_the_same_process_wakes_when_it_finishes_without_the_clock_moving(
    make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    release = anyio.Event()
    runs: list[str] = []
    app = Askback("slow", settings=make_settings(effect_wait=30, effect_lease=60), clock=clock)

    @app.tool()
    async def launch(name: str, flow: Flow) -> str:
        flow.ask(Confirm(key="go", message=f"Launch {name}?"))

        async def fire() -> str:
            runs.append(name)
            await release.wait()
            return name

        return f"Launched {await flow.once('launch', fire)}."

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        state, answers = await final_round(client, "apollo")
        results: list[Any] = []

        async def copy() -> None:
            results.append(await send(client, "apollo", state, answers))

        async with anyio.create_task_group() as tg:
            tg.start_soon(copy)
            tg.start_soon(copy)
            await clock.until_sleeping()  # one copy runs the effect, the other waits for it
            release.set()
    texts = [text(r) for r in results]
    assert texts == ["Launched apollo.", "Launched apollo."]
    assert runs == ["apollo"]


async def test_an_answer_to_a_question_not_yet_asked_is_ignored_and_audited(demo: Askback) -> None:
    async with Client(demo.mcp, elicitation_callback=answered_by_hand) as client:
        first = await client.session.call_tool("deploy", {"service": "web"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and set(first.input_requests or {}) == {"pick_env"}
        eager = {
            "pick_env": accept(environment="production"),
            "confirm_prod": accept(confirm=True),  # never shown to the user
        }
        second = await client.session.call_tool(
            "deploy",
            {"service": "web"},
            input_responses=eager,
            request_state=first.request_state,
            allow_input_required=True,
        )
    assert isinstance(second, InputRequiredResult) and set(second.input_requests or {}) == {"confirm_prod"}
    ignored = await (await demo.store()).audit_log.query(AuditFilter(event="rejected"))
    assert [(e.keys, e.outcome) for e in ignored] == [(("confirm_prod",), "ignored_answer")]


def test_a_link_cannot_have_a_fallback() -> None:
    from askback import Default

    with pytest.raises(DefinitionError, match="no fallback"):
        Link(key="pay", message="Pay.", fallback=Default(None))


async def test_asking_a_link_with_ask_is_refused(make_settings: Callable[..., Any], clock: FrozenClock) -> None:
    app = Askback("link-ask", settings=make_settings(), clock=clock)
    pay = Link(key="pay", message="Pay.", url="https://pay.example.com/x")
    typed = Confirm(key="typed", message="Type it.", typed=True, field="name")

    @app.tool(asks=[pay])
    async def wrong(flow: Flow) -> str:
        flow.ask(pay)
        return "paid"

    @app.tool(asks=[typed])
    async def batch(flow: Flow) -> str:
        flow.ask_all(typed)
        return "ok"

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        for tool, hint in (("wrong", "flow.link"), ("batch", "expect=")):
            with pytest.raises(MCPError, match=hint):
                await client.session.call_tool(tool, {}, allow_input_required=True)
