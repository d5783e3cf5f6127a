"""The META exposure: five meta-tools over the app's catalogue, instead of (or beside) the catalogue's own tools.

An agent that reaches many connector tools through one MCP server, or a client that cannot show an elicitation at
all, uses a connector tool this way:

    execute_tool(name, arguments)  ->  {"status": "not_connected" | "reauth_needed", "connection": c}
    connect_account(connection=c)  ->  {"connection": c, "url": ..., "host": ...}   (the person opens the link)
    check_readiness(name=...)      ->  each connection ready | needs_connection | needs_reauth
    execute_tool(name, arguments)  ->  exactly what the tool answers

`search_tools` and `get_tool` find the tools and their input schemas. `execute_tool` runs the catalogue tool's
handler through the same round driver as a direct call, with `flow.connect` in its `report` mode: an account that
is not ready ends the run with an ordinary result instead of a URL question. The tool's own form questions still
come back as `input_required` of `execute_tool`, whose round state then binds to `execute_tool` and its arguments.
Every result carries `structuredContent` matching its tool's `outputSchema`; none carries a credential: the accounts
port gives statuses and links only.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from typing import Annotated, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from askback.core.connecting import checked_label
from askback.core.flow import AccountsPort, NotReady, Readiness, readiness
from askback.errors import AskbackError, ConfigurationError, DefinitionError
from askback.server._catalogue import Catalogue, CatalogueTool, arguments_error, checked_connections
from askback.server._tools import at_mcp_boundary
from askback.server.auth import caller_of
from askback.server.round import Handler, RoundConfig
from askback.server.tasks import TasksExtension

__all__ = [
    "META_TOOLS",
    "CheckReadinessResult",
    "ConnectAccountResult",
    "ConnectionReadiness",
    "ExecuteToolResult",
    "GetToolResult",
    "SearchToolsResult",
    "ToolHit",
    "install_meta",
    "refuse_meta_name",
]

T = TypeVar("T")

META_TOOLS = ("search_tools", "get_tool", "check_readiness", "connect_account", "execute_tool")
# How many connections one check_readiness may name (each is read from the store).
_MAX_CONNECTIONS = 64


# --- what the meta-tools answer (their output schemas) -----------------------------------------------------------


class ConnectionReadiness(BaseModel):
    """A connection a tool needs, and whether this caller can use it now."""

    connection: str
    readiness: Readiness


class ToolHit(BaseModel):
    name: str
    description: str
    connections: list[ConnectionReadiness]


class SearchToolsResult(BaseModel):
    tools: list[ToolHit]


class GetToolResult(BaseModel):
    model_config = ConfigDict(populate_by_name=True)

    name: str
    description: str
    input_schema: dict[str, Any] = Field(alias="inputSchema")
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")
    connections: list[str]


class CheckReadinessResult(BaseModel):
    ready: bool = Field(description="Every connection is ready.")
    connections: list[ConnectionReadiness]


class ConnectAccountResult(BaseModel):
    connection: str
    url: str = Field(description="The caller's own authorization page: show it to the person, who opens it.")
    host: str = Field(description="Where the link leads, to show beside it.")


class ExecuteToolResult(BaseModel):
    """What the tool answered (its own structured content), or a status naming a connection that is not ready."""

    model_config = ConfigDict(extra="allow", title="ExecuteToolResult")


def refuse_meta_name(name: str) -> None:
    """A catalogue tool may not take a meta-tool's name while the meta-tools are served."""
    if name in META_TOOLS:
        raise DefinitionError(
            f"tool {name!r} has the name of a meta-tool of the META exposure ({', '.join(META_TOOLS)}): name it "
            "otherwise, or serve the app with ASKBACK_EXPOSE=direct"
        )


# --- the meta-tools ------------------------------------------------------------------------------------------------


Call = Callable[
    [Handler, dict[str, Any], Context[Any, Any], RoundConfig], Awaitable[CallToolResult | InputRequiredResult]
]
AuditRefusal = Callable[[Mapping[str, Any], str, str], Awaitable[None]]


class MetaHost(Protocol):
    """What the meta-tools read of the app they serve (an `Askback`), each when called."""

    @property
    def name(self) -> str: ...

    @property
    def mcp(self) -> MCPServer[Any]: ...

    @property
    def catalogue(self) -> Catalogue: ...

    @property
    def new_id(self) -> Callable[[], str]: ...

    @property
    def tasks(self) -> TasksExtension: ...

    @property
    def round_config(self) -> RoundConfig: ...

    @property
    def accounts_port(self) -> Callable[[str | None], AccountsPort] | None: ...

    def end_result(self, tool: str, text: str) -> CallToolResult: ...


def install_meta(app: MetaHost, *, call: Call, audit_refusal: AuditRefusal) -> None:
    """Register the five meta-tools of `app` with its SDK server; they read `app.catalogue` when called. `call` runs
    one round of a handler with a round config (the app's own call), `audit_refusal` audits a refused call."""
    meta = _Meta(app, call, audit_refusal)
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    tools: Sequence[tuple[Callable[..., Awaitable[Any]], str, ToolAnnotations | None]] = (
        (meta.search_tools, "Find tools by text over their names and descriptions; each hit names the "
         "connected accounts it needs and whether they are ready for you.", read_only),
        (meta.get_tool, "A tool's description, input schema and the connected accounts it needs.", read_only),
        (meta.check_readiness, "Whether the connected accounts a tool needs (name) or these connections are "
         "ready for you: ready, needs_connection or needs_reauth.", read_only),
        (meta.connect_account, "Your authorization link for a connection (and the account's label, when "
         "execute_tool named one): show it to the person, who opens it and signs in; then call check_readiness or "
         "the tool again.", None),
        (meta.execute_tool, "Run a tool with its arguments. It answers what the tool answers, or "
         '{"status": "not_connected" | "reauth_needed", "connection": ...} when an account it needs is not ready '
         "(then call connect_account).", None),
    )  # fmt: skip
    for fn, description, hints in tools:
        app.mcp.add_tool(fn, name=fn.__name__, description=description, annotations=hints)


class _Meta:
    """The meta-tools of one app."""

    def __init__(self, app: MetaHost, call: Call, audit_refusal: AuditRefusal) -> None:
        self.app = app
        self.call = call
        self.audit_refusal = audit_refusal

    async def search_tools(self, query: str = "", limit: Annotated[int, Field(ge=1, le=100)] = 20) -> SearchToolsResult:
        hits = self.app.catalogue.search(query, limit=limit)
        ready = await self._readiness([c for tool in hits for c in tool.connections], tool="search_tools")
        return SearchToolsResult(
            tools=[
                ToolHit(name=t.name, description=t.description, connections=[ready[c] for c in t.connections])
                for t in hits
            ]
        )

    async def get_tool(self, name: str) -> GetToolResult:
        tool = self._tool(name)
        return GetToolResult(
            name=tool.name,
            description=tool.description,
            input_schema=tool.input_schema,
            output_schema=tool.output_schema,
            connections=list(tool.connections),
        )

    async def check_readiness(
        self, name: str | None = None, connections: list[str] | None = None
    ) -> CheckReadinessResult:
        if name is None and connections is None:
            raise ToolError("Give name (a tool: its connections) or connections (their names).")
        wanted = list(self._tool(name).connections) if name is not None else []
        wanted += self._names(connections or [])
        ready = await self._readiness(wanted, tool="check_readiness")
        found = [ready[c] for c in dict.fromkeys(wanted)]
        return CheckReadinessResult(ready=all(r.readiness == "ready" for r in found), connections=found)

    async def connect_account(
        self, connection: str, label: str = ""
    ) -> Annotated[CallToolResult, ConnectAccountResult]:
        [name] = self._names([connection])
        try:
            checked_label(label)
        except AskbackError as exc:
            raise ToolError(str(exc)) from None
        url = await self._with_port(lambda port: port.link(name, label, self.app.new_id()), tool="connect_account")
        host = urlsplit(url).hostname or ""
        found = ConnectAccountResult(connection=name, url=url, host=host)
        text = f"Connect your {name} account: open {url} (at {host}), sign in, then call the tool again."
        return CallToolResult(
            content=[TextContent(type="text", text=text)], structured_content=found.model_dump(mode="json")
        )

    async def execute_tool(
        self, name: str, ctx: Context[Any, Any], arguments: dict[str, Any] | None = None
    ) -> Annotated[CallToolResult, ExecuteToolResult] | InputRequiredResult:
        app = self.app
        tool = self._tool(name)
        # A required task tool answers here what its direct call answers (the tasks extension decides).
        app.tasks.refuse_without_extension(tool.name, ctx.request_context)
        try:
            kwargs = tool.arguments(arguments or {})
        except ValidationError as exc:
            # What the SDK answers a direct call whose arguments do not fit, audited as that refusal is.
            detail = arguments_error(tool.name, exc)
            await self.audit_refusal({"name": name}, "invalid_arguments", detail[:500])
            raise ToolError(detail) from exc
        reports: list[NotReady] = []

        async def run(**given: Any) -> Any:
            try:
                return await tool.handler.fn(**given)
            except NotReady as report:
                reports.append(report)
                raise

        def end_result(tool_name: str, text: str) -> CallToolResult:
            if reports:
                report = reports[-1].report()
                return CallToolResult(
                    content=[TextContent(type="text", text=json.dumps(report)), TextContent(type="text", text=text)],
                    structured_content=report,
                )
            return app.end_result(tool_name, text)

        config = replace(app.round_config, connect_mode="report", end_result=end_result)
        result = await self.call(replace(tool.handler, fn=run), kwargs, ctx, config)
        if isinstance(result, CallToolResult) and result.structured_content is None and not result.is_error:
            # A tool without structured output: its text is carried as the SDK carries a text return value.
            text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
            result = result.model_copy(update={"structured_content": {"result": text}})
        return result

    # -- helpers --

    def _tool(self, name: str) -> CatalogueTool:
        found = self.app.catalogue.get(name)
        if found is None:
            raise ToolError(f"There is no tool named {name!r}: search_tools(query) lists the tools there are.")
        return found

    @staticmethod
    def _names(connections: Sequence[str]) -> list[str]:
        if len(connections) > _MAX_CONNECTIONS:
            raise ToolError(f"Name at most {_MAX_CONNECTIONS} connections at once.")
        try:
            return list(checked_connections("check_readiness", connections))
        except DefinitionError as exc:
            raise ToolError(exc.message.removeprefix("tool 'check_readiness': ")) from None

    async def _readiness(self, connections: Sequence[str], *, tool: str) -> dict[str, ConnectionReadiness]:
        """Each distinct connection's readiness for this caller, read for real (statuses only, never a credential)."""
        wanted = list(dict.fromkeys(connections))
        if not wanted:
            return {}

        async def read(port: AccountsPort) -> dict[str, ConnectionReadiness]:
            found: dict[str, ConnectionReadiness] = {}
            for name in wanted:
                statuses = [a.status for a in await port.accounts(name)]
                found[name] = ConnectionReadiness(connection=name, readiness=readiness(statuses))
            return found

        return await self._with_port(read, tool=tool)

    async def _with_port(self, use: Callable[[AccountsPort], Awaitable[T]], *, tool: str) -> T:
        """`use` run with this caller's connected accounts, closed after; askback's errors as the app answers them."""
        factory = self.app.accounts_port
        try:
            if factory is None:
                raise ConfigurationError(
                    f"the server {self.app.name!r} has no connected accounts: enable them with "
                    "askback.accounts.enable_accounts(app, ...) (docs/accounts.md)"
                )
            caller = caller_of(get_access_token())
            port = factory(caller.principal if caller is not None else None)
            try:
                return await use(port)
            finally:
                await port.aclose()
        except AskbackError as exc:
            raise at_mcp_boundary(exc, tool=tool) from exc
