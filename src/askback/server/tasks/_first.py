"""The questions a task tool asks before its task exists (`tool(task=..., ask_first=[...])`), on `tools/call`.

They are an MRTR round like any other, driven through the same round plan (`askback.server.round.run_ask_first`):
asked under a `requestState` this server seals for this call and this person, their answers validated and re-asked
as MRTR validates them (text no database can store included), audited `asked`, `answered`, `rejected`. The round's
handler asks them, then opens the task as the flow's effect (`core.flow.ask_first`), so:

- answers that came without this server's sealed state open nothing: they are asked again, audited
  `ignored_answer`, exactly as an MRTR call's would be before its effect;
- the round that opens the task is claimed and recorded as any final round: sent again, on any instance, it answers
  the same task, never a second one;
- the task goes on as the same flow (its id, its round, its answers), so its trail continues the round's.

A flow begun here is told from one an MRTR call began by its id's prefix (`FIRST`): the id is sealed in the state,
so a client cannot make one pass for the other.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from mcp_types import CallToolResult, ClientCapabilities, InputRequiredResult

from askback.core import flow as core_flow
from askback.core.caller import Caller
from askback.core.flow import Flow
from askback.core.questions import Question
from askback.core.state import FlowState
from askback.server.round import Handler, RoundConfig, run_ask_first

__all__ = ["FIRST", "began_first", "first_round"]

FIRST = "first-"
# The flow's effect that opens its task; its outcome is the task's view on the wire.
_OPEN = "askback.task"


def began_first(plaintext: str | None) -> bool:
    """Whether a verified `requestState` is of a flow whose questions were asked before its task (by its id)."""
    state = FlowState.decode(plaintext) if plaintext is not None else None
    return state is not None and state.flow_id.startswith(FIRST)


async def first_round(
    config: RoundConfig,
    tool: str,
    questions: Sequence[Question[Any]],
    caller: Caller | None,
    *,
    capabilities: ClientCapabilities | None,
    plaintext: str | None,
    responses: Any,
    open_task: Callable[[FlowState], Awaitable[dict[str, Any]]],
) -> dict[str, Any] | CallToolResult | InputRequiredResult:
    """One round of `tool`'s `ask_first` questions: the questions (`InputRequiredResult`, its state to be sealed by
    the SDK), the task's view once the answers open it (`open_task(state)`, run once for the flow; a replay of that
    round answers the same view), or the result the flow ended with instead (expired, too many rounds)."""

    async def ask(flow: Flow) -> dict[str, Any]:
        return await core_flow.ask_first(flow, questions, _OPEN, open_task)

    rounds = replace(config, tool_result=_carried, new_id=lambda: FIRST + config.new_id())
    answer = await run_ask_first(
        rounds,
        Handler(tool, ask, "flow", None),
        caller,
        capabilities=capabilities,
        plaintext=plaintext,
        responses=responses,
    )
    if isinstance(answer, CallToolResult) and answer.structured_content and _OPEN in answer.structured_content:
        view: dict[str, Any] = answer.structured_content[_OPEN]
        return view
    return answer


def _carried(tool: str, value: Any) -> CallToolResult:
    """The opened task's view, carried through the round (and recorded with it) as the result's structured content."""
    return CallToolResult(content=[], structured_content={_OPEN: value})
