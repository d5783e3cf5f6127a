"""A client's round loop, without I/O: the one loop that takes a call from its first round to completion.

`flow_plan` yields the next request to send (`Next`) and receives the `Round` that came back, answering every
question with the caller's `answer`. Whoever owns the connection runs it: `askback.testing.drive_flow` with the
official SDK client, the demo one event loop per round (so that a person can be asked between rounds).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

if TYPE_CHECKING:
    from mcp.shared.exceptions import MCPError

__all__ = ["Answerer", "Next", "Round", "flow_plan"]


@dataclass(frozen=True)
class Round:
    """What one round came back with: a result or a JSON-RPC error, and which instance served it (from the
    `X-Askback-Instance` header) with which HTTP status."""

    result: CallToolResult | InputRequiredResult | None
    error: MCPError | None
    instance: str | None
    http_status: int | None


@dataclass(frozen=True)
class Next:
    """The next request of a flow: the answers to send and the state to echo (both `None` for the first round)."""

    responses: dict[str, ElicitResult] | None = None
    request_state: str | None = None


Answerer = Callable[[str, dict[str, Any]], ElicitResult]
"""Answers one question: its key and the `params` of its `elicitation/create`."""


def flow_plan(
    answer: Answerer, *, start: Next | None = None, max_rounds: int = 8
) -> Generator[Next, Round, list[Round]]:
    """The round loop without I/O: yields each request to send, receives the round that came back, and returns every
    round once one completes or fails. Raises `RuntimeError` when the server is still asking after `max_rounds`."""
    rounds: list[Round] = []
    request = start or Next()
    for _ in range(max_rounds):
        rnd = yield request
        rounds.append(rnd)
        if not isinstance(rnd.result, InputRequiredResult):
            return rounds
        responses = {}
        for key, asked in (rnd.result.input_requests or {}).items():
            params = asked.params.model_dump(by_alias=True, exclude_none=True) if asked.params else {}
            responses[key] = answer(key, params)
        request = Next(responses, rnd.result.request_state)
    raise RuntimeError(f"the server was still asking after {max_rounds} rounds")
