"""`Askback`: an MCP server (the official SDK's `MCPServer`) whose tools can ask the human.

The SDK does the protocol: transports, JSON-RPC, wire types, and sealing `requestState` (AES-256-GCM, bound to the
method, tool, arguments, server name and principal). askback adds, around each tool:

- a `Flow` the handler asks through (`askback.core.flow`), with capability gates and fallbacks;
- a key ring from configuration shared by every instance, and a sealed-state lifetime that outlives the flow
  deadline by a grace period, so a late answer gets a clear "too late" message rather than a protocol error;
- flows that complete once: the first complete result of a flow is recorded and a replayed final round gets it back;
  effects that run once (`flow.once`);
- the audit trail (`askback.audit`), including requests refused for an invalid state;
- the extensions it is given (`askback.extension`: connected accounts, ...): their migrations, start and close
  hooks, mounts and ports, wired here and nowhere else;
- the catalogue of its tools (`askback.server._catalogue`), exposed as MCP tools (`ASKBACK_EXPOSE=direct`), through
  five meta-tools (`meta`, `askback.server._meta`, docs/meta.md) or both.

Each call is a round's plan (`askback.core.round_plan`), driven by `round.py` with the app's `RoundConfig`. The app's
parts are private modules: its life (`_lifecycle`: the store, the extensions' start and close, the hooks), its tools
(`_registry`: `@app.tool()`, the catalogue) and the guard around every request (`_call_guard`: refusals, audited).
"""

from __future__ import annotations

import logging
import secrets
import typing
from collections.abc import Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations

from askback.audit import AuditEvent
from askback.audit.emit import configure as configure_audit_log
from askback.clock import Clock, SystemClock, new_flow_id
from askback.core.approving import Approval, gate_for
from askback.core.caller import missing_scopes
from askback.core.flow import AccountsPort
from askback.core.questions import Question
from askback.core.round import Limits
from askback.core.round_plan import Policy
from askback.db.migrate import Component
from askback.errors import AskbackError, ConfigurationError, InsufficientScopeError
from askback.extension import Extension, Mounted, Ports, merge_ports
from askback.server._call_guard import CallGuard, RefusalAudit, current_principal, round_ran
from askback.server._catalogue import Catalogue
from askback.server._lifecycle import Lifecycle
from askback.server._meta import install_meta
from askback.server._registry import ToolRegistry
from askback.server._tools import at_mcp_boundary
from askback.server.auth import caller_of
from askback.server.held import AnswerSeal
from askback.server.legacy import PendingPushes
from askback.server.round import Handler, RoundConfig, run_round
from askback.server.tasks import TasksExtension, TaskSupport
from askback.settings import Settings, load_settings
from askback.store import MIGRATIONS, Store

__all__ = ["Askback", "current_principal"]

logger = logging.getLogger("askback")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class Askback:
    """An MCP server whose tools ask the user through a `Flow`.

    ```python
    app = Askback("ops")

    @app.tool()
    async def delete_project(project_id: str, flow: Flow) -> str:
        project = await projects.get(project_id)            # reads: rerun every round
        if not flow.ask(confirm_project, expect=project.name):
            return "Cancelled: name did not match."
        await flow.once("delete", lambda: projects.delete(project_id))   # writes: after the answers, once
        return f"Deleted {project.name}."
    ```
    """

    def __init__(
        self,
        name: str,
        *,
        settings: Settings | None = None,
        clock: Clock | None = None,
        new_id: Callable[[], str] = new_flow_id,
        instructions: str | None = None,
        extensions: Sequence[Extension] = (),
        mounts: Sequence[Mounted] = (),
        **mcp_options: Any,
    ) -> None:
        self.settings = settings if settings is not None else load_settings()
        self.clock: Clock = clock or SystemClock()
        self.new_id = new_id
        keys = self.settings.key_ring()
        self.ephemeral_keys = not keys
        if not keys:
            keys = [secrets.token_urlsafe(32)]
        # The sealed state must stay readable a little past the flow deadline, so that a person who took too long
        # is told so instead of getting a protocol error.
        security = RequestStateSecurity(
            keys=keys,
            ttl=self.settings.flow_deadline + self.settings.state_grace,
            audience=self.settings.server_name or name,
        )
        # The SDK would otherwise install a console log handler at INFO on the root logger, whose per-line cost
        # is larger than a round's own; applications (and `askback serve`) configure logging themselves.
        mcp_options.setdefault("log_level", "WARNING")
        configure_audit_log(shape=self.settings.audit_log, level=self.settings.audit_log_level)
        # `ASKBACK_ANSWERS=server`: answers wait in the store between rounds, sealed with keys derived from the ring
        # (opened in either mode, so that flows begun before a switch still finish).
        self.answer_seal = AnswerSeal(keys)
        self.hold_answers = self.settings.answers == "server"
        self.tasks = TasksExtension(self)
        self.mcp: MCPServer[Any] = MCPServer(
            name, instructions=instructions, request_state_security=security, extensions=[self.tasks], **mcp_options
        )
        self._extensions: tuple[Extension, ...] = ()
        self._ports = Ports()
        self._round_config: RoundConfig | None = None
        self.lifecycle = Lifecycle(
            name,
            settings=self.settings,
            clock=self.clock,
            components=lambda: self.components,
            extensions=lambda: self._extensions,
        )
        self.lifecycle.on_start.append(self.tasks.start)
        self.lifecycle.on_close.append(self.tasks.aclose)
        self.expose = self.settings.expose
        self.registry = ToolRegistry(self.mcp, expose=self.expose, call=self._call)
        self.tools = self.registry.tools
        self.tool_scopes = self.registry.tool_scopes
        self.task_tools = self.registry.task_tools
        self.catalogue: Catalogue = self.registry.catalogue
        self.refusal_audit = RefusalAudit(clock=self.clock, write=self._write_audit)
        # Outside the sealing boundary (index 0 is the SDK's OpenTelemetry middleware), to see its rejections.
        self.mcp.middleware.insert(1, CallGuard(tools=self.tools, catalogue=self.catalogue, audit=self.refusal_audit))
        if self.expose != "direct":
            install_meta(self, call=self._call, audit_refusal=self.refusal_audit)
        # Routes the app itself serves beside `/mcp` (hosted pages, callbacks, webhooks), each with its auth policy.
        self._mounts = tuple(mounts)
        for extension in extensions:
            self.extend(extension)
        self.pushes = PendingPushes(self.settings.max_pending_pushes, self.settings.max_pending_pushes_per_session)
        self.limits = Limits(
            flow_deadline=self.settings.flow_deadline,
            max_rounds=self.settings.max_rounds,
            max_pending_pushes=self.settings.max_pending_pushes,
            max_pending_pushes_per_session=self.settings.max_pending_pushes_per_session,
        )

    @property
    def name(self) -> str:
        return self.mcp.name

    # -- extensions --

    def extend(self, extension: Extension) -> None:
        """Add an extension after the app is made, before it starts (what `enable_accounts` does); prefer
        `Askback(..., extensions=[...])`. A port another extension already provides is a `ConfigurationError`."""
        if self.lifecycle.opened is not None or self._round_config is not None:
            raise ConfigurationError(
                f"the extension {extension.name!r} came after the app {self.name!r} started: give it to "
                "`Askback(..., extensions=[...])`, or add it before the first call and before the store opens"
            )
        extensions = (*self._extensions, extension)
        self._ports = merge_ports(extensions)
        self._extensions = extensions

    @property
    def extensions(self) -> tuple[Extension, ...]:
        return self._extensions

    @property
    def components(self) -> tuple[Component, ...]:
        """The schema histories the app's store needs: the server kit's, then each extension's (once each)."""
        found = [MIGRATIONS]
        for extension in self._extensions:
            found += [c for c in extension.migrations if c not in found]
        return tuple(found)

    @property
    def mounts(self) -> tuple[Mounted, ...]:
        """The routes the app serves beside `/mcp`: its `mounts=`, then its extensions'. `build_app` serves them
        before the `mounts=` it is given, so `askback serve MODULE:APP` serves them too."""
        return (*self._mounts, *(m for extension in self._extensions for m in extension.mounts))

    @property
    def ports(self) -> Ports:
        """What the core reaches through the extensions, each port from the one extension that provides it."""
        return self._ports

    @property
    def accounts_port(self) -> Callable[[str | None], AccountsPort] | None:
        return self._ports.accounts

    @property
    def round_config(self) -> RoundConfig:
        """What every round of this app is carried out with, built once, on the first round."""
        config = self._round_config
        if config is None:
            settings = self.settings
            config = self._round_config = RoundConfig(
                policy=Policy(self.limits, hold_answers=self.hold_answers, state_grace=settings.state_grace),
                store=self.store,
                clock=self.clock,
                new_id=self.new_id,
                answer_seal=self.answer_seal,
                tool_result=self.tool_result,
                end_result=self.end_result,
                accounts=self._ports.accounts,
                approvals=self._ports.approvals,
                gate=self._gate(),
                pushes=self.pushes,
                effect_wait=settings.effect_wait,
                effect_lease=settings.effect_lease,
            )
        return config

    def _gate(self) -> Callable[[str], Approval | None] | None:
        """The approval the app's gates (`Ports.approval_gates`) ask of a tool, or `None` without gates."""
        gates = self._ports.approval_gates
        if not gates:
            return None
        destructive = self.registry.destructive
        return lambda tool: gate_for(gates, tool, destructive=tool in destructive)

    # -- storage --

    async def store(self) -> Store:
        """The store, opened (and for SQLite created and migrated) on first use."""
        return await self.lifecycle.store()

    def on_start(self, fn: Callable[[Store], Awaitable[None]]) -> Callable[[Store], Awaitable[None]]:
        """Register an application set-up (create its tables, seed rows) run when the store opens, in every
        process; `askback serve` runs it once before starting workers. It must be idempotent; run its writes in
        `store.database.exclusive()` so that processes starting together take turns."""
        self.lifecycle.on_start.append(fn)
        return fn

    def on_close(self, fn: Callable[[], Awaitable[None]]) -> Callable[[], Awaitable[None]]:
        """Register a clean-up run when the app closes, before its store does (HTTP clients, background work)."""
        self.lifecycle.on_close.append(fn)
        return fn

    async def aclose(self) -> None:
        await self.lifecycle.aclose()

    @asynccontextmanager
    async def running(self) -> typing.AsyncIterator[Askback]:
        """Open the store now and close it at the end (tests, embedding)."""
        await self.store()
        try:
            yield self
        finally:
            await self.aclose()

    # -- tools --

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
        """Register a tool. A parameter annotated `Flow` receives the flow; `asks` lists the questions the tool
        may ask, so their keys are checked for clashes when the tool is defined. `scopes`: the OAuth scopes a
        caller's token must grant for the tool to run (otherwise 403 `insufficient_scope` naming them).
        `connections`: the connected accounts it uses (`flow.connect(name)`), shown in the META exposure. `task`: run
        as a durable task when the request declares the tasks extension (docs/tasks.md), `ask_first` asked before."""
        return self.registry.tool(
            name,
            title=title,
            description=description,
            annotations=annotations,
            asks=asks,
            structured_output=structured_output,
            scopes=scopes,
            connections=connections,
            task=task,
            ask_first=ask_first,
        )

    def tool_result(self, tool: str, value: Any) -> CallToolResult:
        """The tool's return value as the SDK would put it on the wire (structured output included)."""
        return self.registry.tool_result(tool, value)

    def end_result(self, tool: str, text: str) -> CallToolResult:
        """A flow that ends without the handler's value (declined, expired...): `text` for the model to read."""
        return self.registry.end_result(tool, text)

    # -- one call --

    async def _call(
        self, handler: Handler, arguments: dict[str, Any], ctx: Context[Any, Any], config: RoundConfig | None = None
    ) -> CallToolResult | InputRequiredResult:
        """One round of `handler`, carried out with the app's `round_config` (or `config`: `execute_tool`'s)."""
        round_ran(handler.tool)
        try:
            caller = caller_of(get_access_token())
            needed = self.tool_scopes.get(handler.tool, ())
            lacking = missing_scopes(caller.scopes if caller is not None else frozenset(), needed)
            if lacking:
                # The HTTP endpoint refuses such a call with 403 before it gets here; this covers every other
                # transport (stdio, an app of one's own), where no token can grant a scope.
                raise InsufficientScopeError(
                    f"the tool {handler.tool!r} needs the scope(s) {' '.join(needed)}, which this caller's token "
                    "does not grant",
                    scopes=needed,
                )
            return await run_round(config or self.round_config, handler, arguments, ctx, caller)
        except AskbackError as exc:
            raise at_mcp_boundary(exc, tool=handler.tool) from exc

    async def _write_audit(self, events: list[AuditEvent]) -> None:
        store = await self.store()
        await store.audit_log.add_many(events)

    # -- serving --

    def check_workers(self, workers: int) -> None:
        """Refuse several workers with no shared key ring; warn about one."""
        if self.ephemeral_keys and workers > 1:
            raise ConfigurationError(
                f"{workers} workers need one shared state key ring, or an answer that lands on another worker is "
                "refused. Make a key with `askback keys new` and set ASKBACK_STATE_KEYS=<key> for every worker "
                "(comma-separate several keys to rotate: the first one seals)."
            )
        if self.ephemeral_keys:
            logger.warning(
                "askback: no ASKBACK_STATE_KEYS set; using a key made at start-up. Pending questions are lost on "
                "restart and no second worker or instance can take the answers. Set ASKBACK_STATE_KEYS (see "
                "`askback keys new`)."
            )
