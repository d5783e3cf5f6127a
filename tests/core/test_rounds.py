"""The round loop without I/O: driven here by a plain function standing in for the server."""

from __future__ import annotations

from typing import Any

import pytest
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, TextContent

from askback.core.plan import Next, Round, flow_plan


def asking(key: str, state: str) -> Round:
    result = InputRequiredResult.model_validate(
        {
            "inputRequests": {
                key: {
                    "method": "elicitation/create",
                    "params": {"message": f"{key}?", "requestedSchema": {"type": "object", "properties": {}}},
                }
            },
            "requestState": state,
        }
    )
    return Round(result, None, "host:1", 200)


DONE = Round(CallToolResult(content=[TextContent(type="text", text="done")]), None, "host:2", 200)


def test_the_plan_answers_each_round_and_echoes_its_state_until_the_call_completes() -> None:
    server = iter([asking("pick", "s1"), asking("sure", "s2"), DONE])
    asked: list[tuple[str, Any]] = []

    def answer(key: str, params: dict[str, Any]) -> ElicitResult:
        asked.append((key, params["message"]))
        return ElicitResult(action="accept", content={"v": key})

    plan = flow_plan(answer)
    sent = [next(plan)]
    with pytest.raises(StopIteration) as finished:
        while True:
            sent.append(plan.send(next(server)))
    assert finished.value.value[-1] is DONE and len(finished.value.value) == 3
    assert [s.request_state for s in sent] == [None, "s1", "s2"]
    assert sent[0] == Next() and sent[2].responses == {"sure": ElicitResult(action="accept", content={"v": "sure"})}
    assert asked == [("pick", "pick?"), ("sure", "sure?")]


def test_the_plan_gives_up_on_a_server_that_never_stops_asking() -> None:
    plan = flow_plan(lambda key, params: ElicitResult(action="decline"), max_rounds=2)
    next(plan)
    plan.send(asking("again", "s"))
    with pytest.raises(RuntimeError, match="after 2 rounds"):
        plan.send(asking("again", "s"))
