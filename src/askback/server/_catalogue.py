"""The catalogue: every tool of an app, whichever way the app exposes it.

`Askback.tool` registers a handler once, as a `CatalogueTool`: its name, description, input and output schemas (the
SDK's own, built from the handler's signature, so both exposures publish and validate exactly the same), the
connections it needs (`tool(connections=["gmail"])`), and the handler itself. The direct exposure gives each one to
the SDK as an MCP tool; the META exposure (`askback.server._meta`) reaches them through its meta-tools.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from mcp.server.context import HandlerResult
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.tools import Tool
from mcp_types import CallToolResult, TextContent
from pydantic import BaseModel, ValidationError

from askback.errors import DefinitionError
from askback.server._tools import sdk_function
from askback.server.round import Handler

__all__ = [
    "Catalogue",
    "CatalogueTool",
    "argument_problems",
    "arguments_error",
    "catalogue_tool",
    "checked_connections",
    "refused_call",
]

# The accounts' own rule for a connection name (it appears in URLs and question keys).
_CONNECTION = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def arguments_error(tool: str, exc: ValidationError) -> str:
    """What a call whose arguments do not fit the tool's input schema is told, and what its audit row keeps: where
    and what is wrong, by pydantic, but never the value given (an argument may be anything, a secret included)."""
    return f"Error executing tool {tool}: {argument_problems(exc)}"


def argument_problems(exc: ValidationError) -> str:
    """Where and what is wrong with a call's arguments, by pydantic, never the value given."""
    problems = exc.errors(include_input=False, include_url=False, include_context=False)
    parts = [f"{'.'.join(map(str, p['loc'])) or 'arguments'}: {p['msg']}" for p in problems]
    return f"the arguments do not fit its input schema: {'; '.join(parts)}"


def refused_call(tool: CatalogueTool | None, given: object, result: HandlerResult) -> tuple[HandlerResult, str]:
    """A `tools/call` the SDK answered before the tool ran: its result and the audit detail, both telling arguments
    that do not fit `tool`'s input schema as `arguments_error` does (the SDK's own text quotes the values)."""
    detail = None
    if tool is not None:
        try:
            tool.arguments(given if isinstance(given, Mapping) else {})
        except ValidationError as exc:
            detail = arguments_error(tool.name, exc)
    if detail is None:
        return result, _first_text(result)
    content = [{"type": "text", "text": detail}]
    if isinstance(result, BaseModel):
        return result.model_copy(update={"content": [TextContent(type="text", text=detail)]}), detail
    return ({**result, "content": content} if isinstance(result, dict) else result), detail


def _first_text(result: HandlerResult) -> str:
    content = result.get("content") if isinstance(result, dict) else getattr(result, "content", None)
    for item in content or ():
        text = item.get("text") if isinstance(item, dict) else getattr(item, "text", None)
        if isinstance(text, str):
            return text[:500]
    return ""


def checked_connections(tool: str, connections: Sequence[str]) -> tuple[str, ...]:
    """The connections a tool needs, as given, each a valid connection name, none twice."""
    if isinstance(connections, str):
        raise DefinitionError(
            f"tool {tool!r}: connections= takes a list of connection names, e.g. connections=[{connections!r}]"
        )
    found: list[str] = []
    for name in connections:
        if not isinstance(name, str) or not _CONNECTION.fullmatch(name):
            raise DefinitionError(
                f"tool {tool!r}: {name!r} is not a connection name (1 to 64 lowercase letters, digits, '-' or '_', "
                "starting with a letter or digit, as in connections.toml)"
            )
        if name not in found:
            found.append(name)
    return tuple(found)


@dataclass(frozen=True)
class CatalogueTool:
    """One tool of the catalogue. `function` is what the SDK registers for it (direct exposure); `sdk` is the SDK's
    view of that function, which validates arguments and converts results the same way for both exposures."""

    name: str
    description: str
    connections: tuple[str, ...]
    handler: Handler
    function: Callable[..., Awaitable[Any]]
    sdk: Tool

    @property
    def input_schema(self) -> dict[str, Any]:
        return self.sdk.parameters

    @property
    def output_schema(self) -> dict[str, Any] | None:
        return self.sdk.output_schema

    def arguments(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """`given` validated against the input schema as the SDK validates a direct call (pydantic's
        `ValidationError` when they do not fit): the handler's keyword arguments."""
        return self.sdk.fn_metadata.validate_arguments(dict(given))

    def result(self, value: Any) -> CallToolResult:
        """The handler's return value as the SDK puts it on the wire (structured output included)."""
        converted = self.sdk.fn_metadata.convert_result(value)
        assert isinstance(converted, CallToolResult)
        return converted


def catalogue_tool(
    fn: Callable[..., Awaitable[Any]],
    name: str | None,
    *,
    description: str | None,
    structured_output: bool | None,
    connections: Sequence[str],
    call: Callable[[Handler, dict[str, Any], Context[Any, Any]], Awaitable[Any]],
) -> CatalogueTool:
    """The catalogue entry of handler `fn`, run through `call` when the SDK calls it directly."""
    tool_name = name or fn.__name__
    needs = checked_connections(tool_name, connections)
    function, handler = sdk_function(tool_name, fn, call)
    sdk = Tool.from_function(function, name=tool_name, description=description, structured_output=structured_output)
    return CatalogueTool(tool_name, sdk.description, needs, handler, function, sdk)


class Catalogue(Mapping[str, CatalogueTool]):
    """Every tool of one app by name, in the order they were registered (the first of a name stays, as in the
    SDK)."""

    def __init__(self) -> None:
        self._tools: dict[str, CatalogueTool] = {}

    def add(self, tool: CatalogueTool) -> CatalogueTool:
        """Add `tool` unless one of its name is there; the entry kept."""
        return self._tools.setdefault(tool.name, tool)

    def __getitem__(self, name: str) -> CatalogueTool:
        return self._tools[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)

    def search(self, query: str, *, limit: int) -> list[CatalogueTool]:
        """The tools whose name or description contains every word of `query` (case-insensitive), those with more
        of the words in their name first, then by name; every tool for an empty query. At most `limit`."""
        words = query.lower().split()
        hits: list[tuple[int, str, CatalogueTool]] = []
        for tool in self._tools.values():
            name = tool.name.lower().replace("_", " ").replace("-", " ")
            text = f"{tool.name.lower()} {name} {tool.description.lower()}"
            if all(word in text for word in words):
                hits.append((-sum(word in tool.name.lower() or word in name for word in words), tool.name, tool))
        hits.sort(key=lambda hit: hit[:2])
        return [tool for _, _, tool in hits[:limit]]
