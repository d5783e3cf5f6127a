"""The tools of an `Askback` app: what `@app.tool()` records (the questions a tool may ask, the OAuth scopes it needs,
its task support), the catalogue every tool is in whichever way it is exposed, and the SDK tools of the direct
exposure. A tool's return value becomes a `CallToolResult` here, as the SDK would put it on the wire."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import ValidationError

from askback.core.approving import may_destroy
from askback.core.questions import Question
from askback.server._catalogue import Catalogue, catalogue_tool
from askback.server._meta import refuse_meta_name
from askback.server._tools import check_questions, check_task_tool, checked_scopes
from askback.server.round import Handler
from askback.server.tasks import TaskSupport

__all__ = ["ToolRegistry"]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
# One round of a tool's handler, as the SDK calls it.
ToolCall = Callable[[Handler, dict[str, Any], Context[Any, Any]], Awaitable[Any]]


class ToolRegistry:
    """Every tool of one app. `call` runs one round of a tool's handler (the app's own call)."""

    def __init__(self, mcp: MCPServer[Any], *, expose: Literal["direct", "meta", "both"], call: ToolCall) -> None:
        self.mcp = mcp
        self.expose = expose
        self.call = call
        self.tools: dict[str, tuple[Question[Any], ...]] = {}
        # The OAuth scopes of the tools that need some (`tool(scopes=...)`), checked before such a tool runs.
        self.tool_scopes: dict[str, tuple[str, ...]] = {}
        self.task_tools: dict[str, tuple[TaskSupport, tuple[Question[Any], ...]]] = {}
        # The tools that may destroy (`may_destroy`: MCP's annotations with their defaults), which a destructive
        # approval gate applies to.
        self.destructive: set[str] = set()
        # Every tool, whichever way it is exposed: each one an MCP tool (direct), or behind the meta-tools (meta).
        self.catalogue = Catalogue()

    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        annotations: ToolAnnotations | None = None,
        asks: Sequence[Question[Any]] = (),
        structured_output: bool | None = None,
        scopes: Sequence[str] = (),
        connections: Sequence[str] = (),
        task: TaskSupport | None = None,
        ask_first: Sequence[Question[Any]] = (),
    ) -> Callable[[F], F]:
        """`Askback.tool`: see there."""
        options = {
            "title": title,
            "description": description,
            "annotations": annotations,
            "structured_output": structured_output,
        }

        def decorator(fn: F) -> F:
            self.register(fn, name, options, asks, scopes, connections)
            if task is not None:
                self.task_tools[name or fn.__name__] = (task, check_task_tool(name or fn.__name__, fn, ask_first))
            return fn

        return decorator

    def register(
        self,
        fn: Callable[..., Awaitable[Any]],
        name: str | None,
        options: dict[str, Any],
        asks: Sequence[Question[Any]],
        scopes: Sequence[str],
        connections: Sequence[str],
    ) -> None:
        tool_name = name or fn.__name__
        if self.expose != "direct":
            refuse_meta_name(tool_name)
        questions = check_questions(tool_name, asks)
        needed = checked_scopes(tool_name, scopes)
        entry = self.catalogue.add(
            catalogue_tool(
                fn,
                tool_name,
                description=options.get("description"),
                structured_output=options.get("structured_output"),
                connections=connections,
                call=self.call,
            )
        )
        if self.expose != "meta":
            self.mcp.add_tool(entry.function, name=tool_name, **options)
        self.tools[tool_name] = questions
        if may_destroy(options.get("annotations")):
            self.destructive.add(tool_name)
        if needed:
            self.tool_scopes[tool_name] = needed

    def tool_result(self, tool: str, value: Any) -> CallToolResult:
        """The tool's return value as the SDK would put it on the wire (structured output included)."""
        return self.catalogue[tool].result(value)

    def end_result(self, tool: str, text: str) -> CallToolResult:
        """A flow that ends without the handler's value (declined, expired...): `text` for the model to read."""
        try:
            return self.tool_result(tool, text)
        except ValidationError:
            # A tool with a structured (non-text) output cannot carry the text there; report it as a tool result
            # the model reads, flagged so the output schema is not applied.
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
