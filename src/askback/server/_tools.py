"""How a handler becomes an SDK tool: the checks made when it is defined, the function the SDK calls, what an
askback error becomes at the SDK's boundary, and the server's log line for a call that failed there with -32603.

The SDK builds a tool's input schema from the function it is given. `sdk_function` gives it one with the handler's
own parameters, minus the `Flow` and the SDK `Context` askback passes itself, plus a keyword-only context through
which the call reaches askback. A task tool's handler may not take the SDK `Context` (`check_task_tool`): it reruns
in the background, after the request that created the task has ended.
"""

from __future__ import annotations

import inspect
import logging
import re
import typing
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError

from askback.core.flow import Flow
from askback.core.questions import Confirm, Question
from askback.errors import INTERNAL_ERROR, AskbackError, DefinitionError
from askback.server.round import Handler

__all__ = [
    "at_mcp_boundary",
    "check_questions",
    "check_task_tool",
    "checked_scopes",
    "log_failure",
    "sdk_function",
]

logger = logging.getLogger("askback")

_CTX = "askback_context"
# RFC 6749 section 3.3: a scope token is printable ASCII without space, `"` or `\`.
_SCOPE = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]{1,128}")


def check_questions(tool: str, asks: Sequence[Question[Any]]) -> tuple[Question[Any], ...]:
    """`asks` as given, when they are questions with distinct keys."""
    for q in asks:
        if not isinstance(q, Question):
            raise DefinitionError(f"tool {tool!r}: asks= takes Question objects, got {type(q).__name__}")
    keys = [q.key for q in asks]
    if len(set(keys)) != len(keys):
        dupes = sorted({k for k in keys if keys.count(k) > 1})
        raise DefinitionError(f"tool {tool!r} lists two questions with the key(s) {dupes}; keys must differ")
    return tuple(asks)


def check_task_tool(
    tool: str, fn: Callable[..., Awaitable[Any]], ask_first: Sequence[Question[Any]]
) -> tuple[Question[Any], ...]:
    """The questions task tool `tool` asks before its task exists (`ask_first`, checked as `check_questions` checks
    them), once its handler `fn` is one a task can run: one that takes no SDK `Context`."""
    ctx_param = _context_param(fn, typing.get_type_hints(fn, include_extras=True))
    if ctx_param is not None:
        raise DefinitionError(
            f"tool {tool!r} runs as a task (task=...) but its handler takes the SDK Context ({ctx_param!r}): a task's "
            "handler reruns in the background, after the request that created the task has ended, so there is no "
            "Context to give it. Take a Flow parameter instead (flow.caller: who is calling and their scopes; "
            "flow.ask: ask the user; flow.once: run an effect once), or register the tool without task=..."
        )
    for question in ask_first:
        if isinstance(question, Confirm) and question.typed:
            raise DefinitionError(
                f"tool {tool!r}: the typed confirmation {question.key!r} cannot be asked first (ask_first=): it is "
                "asked before the handler runs, so there is no expect= to check the typed value against. Ask it in "
                "the handler with flow.ask(question, expect=...)"
            )
    return check_questions(tool, ask_first)


def _context_param(fn: Callable[..., Awaitable[Any]], hints: dict[str, Any]) -> str | None:
    """The name of `fn`'s parameter annotated with the SDK `Context` (or a subclass), if it has one."""
    return next(
        (
            p
            for p in inspect.signature(fn).parameters
            if isinstance(hints.get(p), type) and issubclass(hints[p], Context)
        ),
        None,
    )


def checked_scopes(tool: str, scopes: Sequence[str]) -> tuple[str, ...]:
    """The OAuth scopes a tool needs, as given, each a valid scope token (RFC 6749 section 3.3), none twice."""
    if isinstance(scopes, str):
        raise DefinitionError(f"tool {tool!r}: scopes= takes a list of scopes, e.g. scopes=[{scopes!r}]")
    found: list[str] = []
    for scope in scopes:
        if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
            raise DefinitionError(
                f"tool {tool!r}: {scope!r} is not an OAuth scope (1 to 128 printable ASCII characters, no space, "
                "quote or backslash)"
            )
        if scope not in found:
            found.append(scope)
    return tuple(found)


def sdk_function(
    tool: str,
    fn: Callable[..., Awaitable[Any]],
    call: Callable[[Handler, dict[str, Any], Context[Any, Any]], Awaitable[Any]],
) -> tuple[Callable[..., Awaitable[Any]], Handler]:
    """The function the SDK registers for handler `fn` (the handler's signature without its `Flow` and `Context`
    parameters; calling it runs `call(handler, arguments, ctx)`), and the handler."""
    if not inspect.iscoroutinefunction(fn):
        raise DefinitionError(f"tool {tool!r} must be an async function")
    hints = typing.get_type_hints(fn, include_extras=True)
    sig = inspect.signature(fn)
    flow_param = next((p for p in sig.parameters if hints.get(p) is Flow), None)
    ctx_param = _context_param(fn, hints)
    params = [
        p.replace(annotation=hints.get(p.name, p.annotation))
        for p in sig.parameters.values()
        if p.name not in (flow_param, ctx_param)
    ]
    params.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=Context))
    returns = hints.get("return", sig.return_annotation)
    handler = Handler(tool, fn, flow_param, ctx_param)

    async def run_tool(**kwargs: Any) -> Any:
        ctx: Context[Any, Any] = kwargs.pop(_CTX)
        return await call(handler, kwargs, ctx)

    run_tool.__signature__ = sig.replace(parameters=params, return_annotation=returns)  # type: ignore[attr-defined]
    run_tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
    run_tool.__name__ = fn.__name__
    run_tool.__qualname__ = fn.__qualname__
    run_tool.__module__ = fn.__module__
    run_tool.__doc__ = fn.__doc__
    return run_tool, handler


def at_mcp_boundary(exc: AskbackError, *, tool: str | None = None) -> Exception:
    """The one place an askback error becomes what the SDK answers: a tool result flagged `isError` for what the
    model should read and fix (`tool_error`), a JSON-RPC error for the rest. A call of `tool` that fails with
    -32603 (which nobody but the server's operator can act on) is logged (`log_failure`)."""
    if exc.tool_error:
        return ToolError(str(exc))
    if tool is not None:
        log_failure(tool, exc)
    return exc.to_mcp_error()


def log_failure(tool: str, error: BaseException) -> None:
    """One line in the server's log for a call of `tool` that failed with what neither the caller nor the model can
    act on: askback's own -32603 errors (a question asked wrongly, a database that cannot be reached) and a crash of
    the handler or of askback's round. At ERROR with the traceback; a condition a retry gets past (`retryable`: a
    copy of the round still running elsewhere) at WARNING without it. The line names the tool and the exception's
    type, never the call's arguments (the traceback shows the exception's own text)."""
    if isinstance(error, AskbackError):
        if error.tool_error or error.code != INTERNAL_ERROR:
            return
        if (error.wire_data() or {}).get("retryable") is True:
            logger.warning(
                "askback: a call of %r failed with %s; the client may retry: %s",
                tool,
                type(error).__name__,
                error,
                extra={"tool": tool, "error": type(error).__name__},
            )
            return
    elif isinstance(error, ToolError | ResourceError | MCPError) or not isinstance(error, Exception):
        return
    logger.error(
        "askback: a call of %r failed with %s",
        tool,
        type(error).__name__,
        exc_info=error,
        extra={"tool": tool, "error": type(error).__name__},
    )
