"""The fixture tools of the conformance suite's `tasks-*` scenarios (the tasks extension, SEP-2663).

`register(server)` adds them to the fixture server (`tests/conformance/server.py`), after its other tools: the
suite's header scenario calls whichever tool `tools/list` names first with no arguments, and that must stay a tool
that needs none. What each scenario sends and expects (`interop/node_modules/@modelcontextprotocol/conformance`):

- `greet` never becomes a task: a `tools/call` answers `Hello, {name}!` at once, a legacy `params.task` hint
  included.
- `slow_compute` may become one: it sleeps `seconds` and answers. With the extension declared it is a task the
  suite polls, cancels while it sleeps (it must end `cancelled`) and reads after it ends; without it, it runs at
  once (`seconds: 0`).
- `failing_job` must become one (`required`): with the extension it ends `completed` with a result carrying
  `isError: true`; without it the call is refused with -32021 naming the extension, before the handler runs.
- `protocol_error_job` raises a JSON-RPC error: its task ends `failed`, with `error` and no `result`.
- `confirm_delete` asks one confirmation inside its task (`input_required`), answered `{"confirm": true}`.
- `multi_input` asks two questions at once, answered one by one (`{"name": ..., "confirm": true}` each): the task
  stays `input_required` with only the unanswered key until both are in.
- `test_tool_with_task` asks the user's name over MRTR on `tools/call` first (an `input_required` result with no
  `taskId`), then becomes a task on the retry that carries the answer; the task's result names the user.
"""

from __future__ import annotations

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import BaseModel

from askback import Askback, Confirm, Flow, Form, ToolError

__all__ = ["register"]


class Name(BaseModel):
    name: str


delete_confirmation = Confirm(key="confirm_delete", message="Delete the file?", field="confirm", title="Delete")
first_name = Form(key="multi_name", model=Name, message="What is your name?")
go_ahead = Confirm(key="multi_confirm", message="Go ahead?", field="confirm", title="Go ahead")
user_name = Form(key="user_name", model=Name, message="What is your name?")


async def greet(name: str) -> str:
    """Greets `name`, at once."""
    return f"Hello, {name}!"


async def slow_compute(seconds: float = 0, label: str = "") -> str:
    """Sleeps `seconds`, then says it is done."""
    await anyio.sleep(seconds)
    return f"Computed {label or 'result'} after {seconds:g} s."


async def failing_job() -> str:
    """Works for a second, then fails with a tool error the model can read."""
    await anyio.sleep(1)
    raise ToolError("failing_job failed, as it always does")


async def protocol_error_job() -> str:
    """Fails with a JSON-RPC error, not a tool result."""
    raise MCPError(code=INTERNAL_ERROR, message="protocol_error_job failed with an internal error")


async def confirm_delete(filename: str, flow: Flow) -> str:
    """Asks before it deletes `filename` (nothing is deleted)."""
    if not flow.ask(delete_confirmation, message=f"Delete {filename}?"):
        return f"Kept {filename}."
    return f"Deleted {filename}."


async def multi_input(flow: Flow) -> str:
    """Asks a name and a confirmation in the same round."""
    who, ok = flow.ask_all(first_name, go_ahead)
    return f"{who.name} {'went ahead' if ok else 'held back'}."


async def test_tool_with_task(flow: Flow) -> str:
    """Asks the user's name before the task starts, then greets them from inside it."""
    return f"Hello, {flow.ask(user_name).name}, from inside the task!"


def register(server: Askback) -> None:
    """Adds the task fixture tools to `server`."""
    server.tool()(greet)
    server.tool(task="optional")(slow_compute)
    server.tool(task="required")(failing_job)
    server.tool(task="optional")(protocol_error_job)
    server.tool(task="optional", asks=[delete_confirmation])(confirm_delete)
    server.tool(task="optional", asks=[first_name, go_ahead])(multi_input)
    server.tool(task="required", asks=[user_name], ask_first=[user_name])(test_tool_with_task)
