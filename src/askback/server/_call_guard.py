"""The guard around every request an `Askback` app's SDK server takes, outside the SDK's sealing boundary: it refuses
arguments no tool may take before the SDK hashes them into the state binding, and audits the calls refused before any
round ran (a `requestState` that fails verification, arguments that do not fit the tool's input schema).

It is a piece of the SDK's middleware chain (`MCPServer.middleware`, `(ctx, call_next)`), the SDK's counterpart of an
ASGI middleware: an ASGI piece would see only HTTP requests, and the same refusals happen over stdio and in memory.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError

from askback.audit import AuditEvent
from askback.audit.emit import emit, instance_id
from askback.clock import Clock
from askback.core.text import unstorable_text
from askback.errors import AskbackError, InvalidParamsError
from askback.server._catalogue import Catalogue, refused_call
from askback.server._tools import at_mcp_boundary
from askback.server.auth import caller_of

__all__ = ["CallGuard", "RefusalAudit", "current_principal", "round_ran"]

logger = logging.getLogger("askback")

# The rounds a tool call ran (their tools), seen by the guard around it: a call that ran none was refused before.
_ROUNDS_SEEN: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("askback_rounds", default=None)


def current_principal() -> str | None:
    """Who is calling: the authenticated subject (or client id), `None` on an unauthenticated transport."""
    caller = caller_of(get_access_token())
    return caller.principal if caller is not None else None


def round_ran(tool: str) -> None:
    """Tell the guard around this call that a round of `tool` ran (it was not refused before one)."""
    seen = _ROUNDS_SEEN.get()
    if seen is not None:
        seen.append(tool)


class RefusalAudit:
    """Writes a `rejected` audit event for a call refused before it ran: emitted, then stored."""

    def __init__(self, *, clock: Clock, write: Callable[[list[AuditEvent]], Awaitable[None]]) -> None:
        self.clock = clock
        self.write = write

    async def __call__(self, params: Mapping[str, Any], outcome: str, detail: str) -> None:
        event = AuditEvent(
            event="rejected",
            at=self.clock.now(),
            tool=str(params.get("name")),
            principal=current_principal(),
            outcome=outcome,
            detail=detail,
            instance=instance_id(),
        )
        emit(event)
        try:
            await self.write([event])
        except AskbackError:
            logger.exception("askback could not write %d audit event(s)", 1)


class CallGuard(ServerMiddleware[Any]):
    """Refuses arguments no database can store (text with a lone surrogate or a NUL) before the SDK binds them into
    `requestState`, and audits the calls the SDK refuses before a round runs: an invalid state, or arguments that do
    not fit a tool's input schema (told and audited without the values given)."""

    def __init__(self, *, tools: Mapping[str, object], catalogue: Catalogue, audit: RefusalAudit) -> None:
        self.tools = tools
        self.catalogue = catalogue
        self.audit = audit

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if ctx.method == "tools/call":
            problem = unstorable_text(params.get("arguments"), "arguments")
            if problem is not None:
                error = InvalidParamsError(
                    f"Invalid params: {problem}. Send text as valid Unicode without NUL characters."
                )
                await self.audit(params, "invalid_params", str(error))
                raise at_mcp_boundary(error)
        rounds: list[str] = []
        token = _ROUNDS_SEEN.set(rounds)
        try:
            result = await call_next(ctx)
            name = params.get("name")
            refused = not rounds and not (isinstance(result, dict) and result.get("resultType") != "complete")
            if ctx.method == "tools/call" and refused and isinstance(name, str) and name in self.tools:
                result, detail = refused_call(self.catalogue.get(name), params.get("arguments"), result)
                await self.audit(params, "invalid_arguments", detail[:500])
            return result
        except MCPError as exc:
            data = exc.error.data if isinstance(exc.error.data, Mapping) else {}
            if ctx.method == "tools/call" and data.get("reason") == "invalid_request_state":
                await self.audit(
                    params,
                    "invalid_state",
                    "requestState failed verification (tampered, expired, another user's or another call's)",
                )
            raise
        finally:
            _ROUNDS_SEEN.reset(token)
