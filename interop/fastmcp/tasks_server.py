"""A FastMCP server whose tools run as tasks (fastmcp-tasks, the io.modelcontextprotocol/tasks extension), for the
agent runtime's interop tests (tests/interop/test_runtime_fastmcp_tasks.py). Run with the python of
interop/fastmcp.sh's virtualenv:

    python tasks_server.py --port PORT --redis redis://127.0.0.1:6379/0 --effects DIR

It serves Streamable HTTP on 127.0.0.1:PORT/mcp; the tasks live in Redis (pydocket), run by the worker this process
starts. A task asks its questions the way fastmcp-tasks has a task tool ask: the tool returns an
`InputRequiredResult`, the task shows `input_required` with those `inputRequests` (under keys the extension mints),
and once `tasks/update` answers them the tool runs again from the top with the answers on `ctx.input_responses`
and what it carried on `ctx.request_state`.

Tools:
- `approve_refund(order, amount)`: asks "Refund AMOUNT on ORDER?" ({"approve": boolean}); above 100 it then asks
  for a reason ({"reason": string}). Once approved (and given a reason where one is asked), it appends one line to
  DIR/ORDER.log and completes with "Refunded ORDER". Declined, cancelled or not approved, it completes with a text
  saying so, and writes nothing.
- `held_refund(order, gate)`: works until the file `gate` exists (at most 60 s), then completes with "Refunded
  ORDER"; its tasks ask to be polled every `HELD_POLL_MS` milliseconds.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from pathlib import Path

import anyio
import mcp_types
from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

REFUND_POLL_MS = 300
HELD_POLL_MS = 750
REASON_ABOVE = 100
_ENDED = {"decline": "declined", "cancel": "cancelled"}


def _form(message: str, field: str, kind: str) -> mcp_types.ElicitRequest:
    schema = {"type": "object", "properties": {field: {"type": kind}}, "required": [field]}
    params = mcp_types.ElicitRequestFormParams(mode="form", message=message, requested_schema=schema)
    return mcp_types.ElicitRequest(method="elicitation/create", params=params)


def _asking(key: str, request: mcp_types.ElicitRequest, state: str | None = None) -> mcp_types.InputRequiredResult:
    return mcp_types.InputRequiredResult(input_requests={key: request}, request_state=state)


def _answer(ctx: Context, key: str) -> mcp_types.ElicitResult | None:
    found = (ctx.input_responses or {}).get(key)
    return found if isinstance(found, mcp_types.ElicitResult) else None


def build(effects: Path, redis_url: str) -> FastMCP:
    server = FastMCP("fastmcp-tasks-peer")
    server.add_extension(TasksExtension(url=redis_url, name="askback-interop"))

    @server.tool(task=TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=REFUND_POLL_MS)))
    async def approve_refund(order: str, amount: int, ctx: Context) -> str | mcp_types.InputRequiredResult:
        """Refund `amount` on `order` once a person approves it (and, above 100, says why)."""
        approved = ctx.request_state == "approved"
        if not approved:
            answer = _answer(ctx, "approve")
            if answer is None:
                return _asking("approve", _form(f"Refund {amount} on {order}?", "approve", "boolean"))
            if answer.action != "accept":
                return f"Not refunded: {order} was {_ENDED[answer.action]}."
            if not (answer.content or {}).get("approve"):
                return f"Not refunded: {order} was not approved."
        reason = ""
        if amount > REASON_ABOVE:
            said = _answer(ctx, "reason") if approved else None
            if said is None:
                return _asking("reason", _form(f"Why refund {amount} on {order}?", "reason", "string"), "approved")
            if said.action != "accept":
                return f"Not refunded: the reason for {order} was {_ENDED[said.action]}."
            reason = str((said.content or {}).get("reason", ""))
        async with await anyio.open_file(effects / f"{order}.log", "a") as log:
            await log.write(f"refund {order} {amount} {reason}".rstrip() + "\n")
        return f"Refunded {order}"

    @server.tool(task=TaskConfig(mode="optional", poll_interval=timedelta(milliseconds=HELD_POLL_MS)))
    async def held_refund(order: str, gate: str) -> str:
        """Refund `order` once the file `gate` exists."""
        until = time.monotonic() + 60
        while not await anyio.Path(gate).exists():
            if time.monotonic() > until:
                return f"Not refunded: {gate} never appeared."
            await anyio.sleep(0.02)
        return f"Refunded {order}"

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--redis", required=True, help="the Redis URL the tasks live in")
    parser.add_argument("--effects", type=Path, required=True, help="the folder refunds are written to")
    args = parser.parse_args()
    args.effects.mkdir(parents=True, exist_ok=True)
    build(args.effects, args.redis).run(
        transport="http", host="127.0.0.1", port=args.port, path="/mcp", show_banner=False, log_level="warning"
    )


if __name__ == "__main__":
    main()
