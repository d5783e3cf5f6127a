"""Drive one MRTR round at a time against a server over Streamable HTTP, with the official SDK client.

Each round is a brand-new HTTP connection (as a real client hours later would open), so behind several workers or a
load balancer consecutive rounds of one flow can land on different instances. `Round.instance` says which one
served it (from the `X-Askback-Instance` header). The demo and the tests use this; it is also a small example of
driving rounds by hand with `allow_input_required=True`.

The loop that takes a call from its first round to completion is written once, without I/O: `flow_plan` yields the
next request to send (`Next`) and receives the `Round` that came back. `drive_flow` runs it with `call_round`; the
demo runs it one event loop per round, so that a person can be asked between rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

__all__ = ["Answer", "Next", "Round", "call_round", "drive_flow", "flow_plan"]


@dataclass(frozen=True)
class Round:
    result: CallToolResult | InputRequiredResult | None
    error: MCPError | None
    instance: str | None
    http_status: int | None


async def _no_answer(context: Any, params: Any) -> ElicitResult:
    # Never called: rounds are answered by the caller through `responses=`. Its presence declares elicitation.
    raise RuntimeError("call_round answers questions through responses=, not a callback")


async def call_round(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    token: str | None = None,
    responses: Mapping[str, ElicitResult] | None = None,
    request_state: str | None = None,
    elicitation: bool = True,
    timeout_seconds: float = 30.0,
) -> Round:
    """One `tools/call` on a fresh connection. `elicitation=False` declares no capabilities."""
    seen: dict[str, Any] = {}

    async def on_response(response: httpx2.Response) -> None:
        # The client may send other requests too (a tools/list to check the output schema): keep the call's.
        if response.request.method == "POST" and b'"tools/call"' in response.request.content:
            seen["instance"] = response.headers.get("x-askback-instance")
            seen["status"] = response.status_code

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(timeout_seconds),
        limits=httpx2.Limits(max_keepalive_connections=0),
        event_hooks={"response": [on_response]},
    ) as http:
        transport = streamable_http_client(url, http_client=http)
        client = Client(transport, mode="2026-07-28", elicitation_callback=_no_answer if elicitation else None)
        async with client:
            try:
                result = await client.session.call_tool(
                    tool,
                    dict(arguments or {}),
                    input_responses=dict(responses) if responses else None,
                    request_state=request_state,
                    allow_input_required=True,
                )
            except MCPError as exc:
                return Round(None, exc, seen.get("instance"), seen.get("status"))
    assert isinstance(result, CallToolResult | InputRequiredResult)
    return Round(result, None, seen.get("instance"), seen.get("status"))


@dataclass(frozen=True)
class Next:
    """The next request of a flow: the answers to send and the state to echo (both `None` for the first round)."""

    responses: dict[str, ElicitResult] | None = None
    request_state: str | None = None


Answer = Callable[[str, dict[str, Any]], ElicitResult]
"""Answers one question: its key and the `params` of its `elicitation/create`."""


def flow_plan(answer: Answer, *, start: Next | None = None, max_rounds: int = 8) -> Generator[Next, Round, list[Round]]:
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


async def drive_flow(
    url: str,
    tool: str,
    arguments: Mapping[str, Any],
    answer: Answer,
    *,
    token: str | None = None,
    start: Next | None = None,
    max_rounds: int = 8,
) -> list[tuple[Next, Round]]:
    """Call `tool` round by round (each on a new connection) until it completes or fails, answering every question
    with `answer`; every request sent with the round that came back."""
    plan = flow_plan(answer, start=start, max_rounds=max_rounds)
    sent: list[tuple[Next, Round]] = []
    request = next(plan)
    while True:
        rnd = await call_round(
            url, tool, arguments, token=token, responses=request.responses, request_state=request.request_state
        )
        sent.append((request, rnd))
        try:
            request = plan.send(rnd)
        except StopIteration:
            return sent
