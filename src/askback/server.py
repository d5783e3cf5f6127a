"""`Askback`: an MCP server (the official SDK's `MCPServer`) whose tools can ask the human.

The SDK does the protocol: transports, JSON-RPC, wire types, and sealing `requestState` (AES-256-GCM, bound to the
method, tool, arguments, server name and principal). askback adds, around each tool:

- a `Flow` the handler asks through (see `flow.py`), with capability gates and fallbacks;
- a key ring from configuration shared by every instance, and a sealed-state lifetime that outlives the flow
  deadline by a grace period, so a late answer gets a clear "too late" message rather than a protocol error;
- flows that complete once: the first complete result of a flow is recorded and a replayed final round gets it back;
  effects that run once (`flow.once`);
- the audit trail (`audit.py`), including requests refused for an invalid state.

Each round reads the store once or twice (a finished flow? a recorded effect?) and writes its audit events in one
batch.
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import secrets
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import (
    CallToolResult,
    ElicitResult,
    InputRequiredResult,
    TextContent,
    ToolAnnotations,
)
from mcp_types.version import is_version_at_least
from pydantic import ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as SATimeoutError

from askback._text import unstorable_text
from askback.audit import emit, instance_id
from askback.clock import Clock, SystemClock, new_flow_id
from askback.effects import run_once, wait_until_settled
from askback.errors import (
    AskbackError,
    ConfigurationError,
    DefinitionError,
    InvalidParamsError,
    InvalidStateError,
    MissingCapabilityError,
    RoundInProgressError,
)
from askback.flow import Flow, FlowEnded, FlowEvent, FlowState, NeedInput, ToolArgumentRequired
from askback.questions import Question
from askback.settings import Settings, load_settings
from askback.store import AuditEvent, Store, unavailable_error

__all__ = ["Askback", "current_principal"]

logger = logging.getLogger("askback")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_CTX = "askback_context"
# The rounds an askback tool call ran, seen by the middleware around it (to audit calls refused before any round).
_ROUNDS_SEEN: contextvars.ContextVar[list[_Round] | None] = contextvars.ContextVar("askback_rounds", default=None)


def current_principal() -> str | None:
    """Who is calling: the authenticated subject (or client id), `None` on an unauthenticated transport."""
    token = get_access_token()
    if token is None:
        return None
    return token.subject or token.client_id


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
        **mcp_options: Any,
    ) -> None:
        self.settings = settings if settings is not None else load_settings()
        self.clock: Clock = clock or SystemClock()
        self._new_id = new_id
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
        self.mcp: MCPServer[Any] = MCPServer(
            name, instructions=instructions, request_state_security=security, **mcp_options
        )
        # Outside the sealing boundary (index 0 is the SDK's OpenTelemetry middleware), to see its rejections.
        self.mcp.middleware.insert(1, self._guard_calls)
        self._store: Store | None = None
        self._store_lock: anyio.Lock | None = None
        self._database_url = self.settings.database_url
        self.tools: dict[str, tuple[Question[Any], ...]] = {}
        self._converters: dict[str, Callable[[Any], CallToolResult | InputRequiredResult]] = {}
        self._on_start: list[Callable[[Store], Awaitable[None]]] = []
        self._pushes = _PendingPushes(self.settings.max_pending_pushes, self.settings.max_pending_pushes_per_session)

    @property
    def name(self) -> str:
        return self.mcp.name

    # -- storage --

    async def store(self) -> Store:
        """The store, opened (and for SQLite created and migrated) on first use."""
        if self._store is not None:
            return self._store
        if self._store_lock is None:
            self._store_lock = anyio.Lock()
        async with self._store_lock:
            if self._store is None:
                store = await Store.open(self._database_url)
                try:
                    for hook in self._on_start:
                        await hook(store)
                except BaseException:
                    await store.close()
                    raise
                self._store = store
        return self._store

    def on_start(self, fn: Callable[[Store], Awaitable[None]]) -> Callable[[Store], Awaitable[None]]:
        """Register an application set-up (create its tables, seed rows) run when the store opens, in every
        process; `askback serve` runs it once before starting workers. It must be idempotent; run its writes in
        `store.exclusive()` so that processes starting together take turns."""
        self._on_start.append(fn)
        return fn

    async def aclose(self) -> None:
        if self._store is not None:
            await self._store.close()
            self._store = None

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
    ) -> Callable[[F], F]:
        """Register a tool. A parameter annotated `Flow` receives the flow; `asks` lists the questions the tool
        may ask, so their keys are checked for clashes when the tool is defined."""

        def decorator(fn: F) -> F:
            self._register(fn, name, title, description, annotations, asks, structured_output)
            return fn

        return decorator

    def _register(
        self,
        fn: Callable[..., Awaitable[Any]],
        name: str | None,
        title: str | None,
        description: str | None,
        annotations: ToolAnnotations | None,
        asks: Sequence[Question[Any]],
        structured_output: bool | None,
    ) -> None:
        tool_name = name or fn.__name__
        if not inspect.iscoroutinefunction(fn):
            raise DefinitionError(f"tool {tool_name!r} must be an async function")
        keys = [q.key for q in asks]
        if len(set(keys)) != len(keys):
            dupes = sorted({k for k in keys if keys.count(k) > 1})
            raise DefinitionError(f"tool {tool_name!r} lists two questions with the key(s) {dupes}; keys must differ")
        for q in asks:
            if not isinstance(q, Question):
                raise DefinitionError(f"tool {tool_name!r}: asks= takes Question objects, got {type(q).__name__}")
        hints = typing.get_type_hints(fn, include_extras=True)
        sig = inspect.signature(fn)
        flow_param = next((p for p in sig.parameters if hints.get(p) is Flow), None)
        ctx_param = next(
            (p for p in sig.parameters if isinstance(hints.get(p), type) and issubclass(hints[p], Context)), None
        )
        params = [
            p.replace(annotation=hints.get(p.name, p.annotation))
            for p in sig.parameters.values()
            if p.name not in (flow_param, ctx_param)
        ]
        params.append(inspect.Parameter(_CTX, inspect.Parameter.KEYWORD_ONLY, annotation=Context))
        returns = hints.get("return", sig.return_annotation)

        async def run_tool(**kwargs: Any) -> Any:
            ctx: Context[Any, Any] = kwargs.pop(_CTX)
            return await self._call(_Handler(tool_name, fn, flow_param, ctx_param), kwargs, ctx)

        run_tool.__signature__ = sig.replace(parameters=params, return_annotation=returns)  # type: ignore[attr-defined]
        run_tool.__annotations__ = {p.name: p.annotation for p in params} | {"return": returns}
        run_tool.__name__ = fn.__name__
        run_tool.__qualname__ = fn.__qualname__
        run_tool.__module__ = fn.__module__
        run_tool.__doc__ = fn.__doc__
        self._converters[tool_name] = Tool.from_function(
            run_tool, name=tool_name, structured_output=structured_output
        ).fn_metadata.convert_result
        self.mcp.add_tool(
            run_tool,
            name=tool_name,
            title=title,
            description=description,
            annotations=annotations,
            structured_output=structured_output,
        )
        self.tools[tool_name] = tuple(asks)

    def _complete(self, tool: str, value: Any) -> CallToolResult:
        result = self._converters[tool](value)
        assert isinstance(result, CallToolResult)
        return result

    def _end(self, tool: str, text: str) -> CallToolResult:
        try:
            return self._complete(tool, text)
        except ValidationError:
            # A tool with a structured (non-text) output cannot carry the text there; report it as a tool result
            # the model reads, flagged so the output schema is not applied.
            return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    # -- one call --

    async def _call(
        self, handler: _Handler, arguments: dict[str, Any], ctx: Context[Any, Any]
    ) -> CallToolResult | InputRequiredResult:
        round_ = _Round(self, handler, arguments, ctx)
        seen = _ROUNDS_SEEN.get()
        if seen is not None:
            seen.append(round_)
        try:
            result = await round_.run()
        except AskbackError as exc:
            await round_.flush()
            raise exc.to_mcp_error() from exc
        except Exception as exc:
            if not round_.events:
                # The handler failed before it asked or answered anything: the trail still says the call happened.
                detail = str(exc) if isinstance(exc, ToolError) else f"the tool raised {type(exc).__name__}"
                round_.event("rejected", outcome="tool_error", detail=detail)
            await round_.flush()
            raise
        except BaseException:
            await round_.flush()
            raise
        try:
            # A round that cannot record what it asked or answered fails: the audit trail has no gaps.
            await round_.flush(strict=True)
        except AskbackError as exc:
            raise exc.to_mcp_error() from exc
        return result

    @staticmethod
    def _record_flow_events(flow_events: list[FlowEvent], event: Callable[..., None], round_: int) -> None:
        for fe in flow_events:
            if fe.kind == "answered":
                content = dict(fe.content) if fe.content is not None else None
                event("answered", round=round_, keys=(fe.key,), mode=fe.mode, action=fe.action, content=content)
            elif fe.kind == "invalid":
                event(
                    "rejected", round=round_, keys=(fe.key,), mode=fe.mode, outcome="invalid_answer", detail=fe.detail
                )
            elif fe.kind == "ignored":
                event(
                    "rejected", round=round_, keys=(fe.key,), mode=fe.mode, outcome="ignored_answer", detail=fe.detail
                )
            elif fe.kind == "fallback":
                event("answered", round=round_, keys=(fe.key,), mode=fe.mode, action="fallback", detail=fe.detail)

    async def _write_audit(self, events: list[AuditEvent]) -> None:
        try:
            store = await self.store()
            await store.add_audit_many(events)
        except AskbackError:
            logger.exception("askback could not write %d audit event(s)", len(events))

    async def _guard_calls(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Outside the SDK's sealing boundary: refuse arguments no tool may take (before the SDK hashes them into
        the state binding), and audit the requests the boundary refuses for an invalid state."""
        params = ctx.params if isinstance(ctx.params, Mapping) else {}
        if ctx.method == "tools/call":
            problem = unstorable_text(params.get("arguments"), "arguments")
            if problem is not None:
                error = InvalidParamsError(
                    f"Invalid params: {problem}. Send text as valid Unicode without NUL characters."
                )
                await self._audit_refusal(params, "invalid_params", str(error))
                raise error.to_mcp_error()
        rounds: list[_Round] = []
        token = _ROUNDS_SEEN.set(rounds)
        try:
            result = await call_next(ctx)
            name = params.get("name")
            if ctx.method == "tools/call" and not rounds and isinstance(name, str) and name in self.tools:
                # Refused by the SDK before the tool ran (arguments that do not fit its input schema).
                await self._audit_refusal(params, "invalid_arguments", _first_text(result))
            return result
        except MCPError as exc:
            data = exc.error.data if isinstance(exc.error.data, Mapping) else {}
            if ctx.method == "tools/call" and data.get("reason") == "invalid_request_state":
                await self._audit_refusal(
                    params,
                    "invalid_state",
                    "requestState failed verification (tampered, expired, another user's or another call's)",
                )
            raise
        finally:
            _ROUNDS_SEEN.reset(token)

    async def _audit_refusal(self, params: Mapping[str, Any], outcome: str, detail: str) -> None:
        ev = AuditEvent(
            event="rejected",
            at=self.clock.now(),
            tool=str(params.get("name")),
            principal=current_principal(),
            outcome=outcome,
            detail=detail,
            instance=instance_id(),
        )
        emit(ev)
        await self._write_audit([ev])

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


def _first_text(result: HandlerResult) -> str:
    content = result.get("content") if isinstance(result, dict) else getattr(result, "content", None)
    for item in content or ():
        text = item.get("text") if isinstance(item, dict) else getattr(item, "text", None)
        if isinstance(text, str):
            return text[:500]
    return ""


def _modern(version: str | None) -> bool:
    """True for requests of 2026-07-28 or later (and in-process calls with no version), which take questions in
    `input_required` results; older sessions get them pushed."""
    return version is None or is_version_at_least(version, "2026-07-28")


class _PendingPushes:
    """How many 2025-11-25 questions are pushed and waiting for an answer, in this process and per session; each
    holds a call open, so both are capped."""

    def __init__(self, total: int, per_session: int) -> None:
        self.total_cap = total
        self.session_cap = per_session
        self.total = 0
        self.by_session: dict[int, int] = {}

    @contextmanager
    def slot(self, session: object) -> typing.Iterator[bool]:
        """A place for one more pending question (`True`), or `False` when a cap is reached."""
        key = id(session)
        if self.total >= self.total_cap or self.by_session.get(key, 0) >= self.session_cap:
            yield False
            return
        self.total += 1
        self.by_session[key] = self.by_session.get(key, 0) + 1
        try:
            yield True
        finally:
            self.total -= 1
            left = self.by_session[key] - 1
            if left:
                self.by_session[key] = left
            else:
                del self.by_session[key]


@dataclass(frozen=True)
class _Handler:
    """A registered tool function, and which of its parameters receive the flow and the SDK context."""

    tool: str
    fn: Callable[..., Awaitable[Any]]
    flow_param: str | None
    ctx_param: str | None


class _Round:
    """One `tools/call` of an askback tool: runs the handler through a `Flow`, and writes everything the round did
    (effect outcomes, the flow's result, audit events) in one transaction at the end."""

    def __init__(self, app: Askback, handler: _Handler, arguments: dict[str, Any], ctx: Context[Any, Any]) -> None:
        self.app = app
        self.handler = handler
        self.tool = handler.tool
        self.arguments = arguments
        self.ctx = ctx
        self.now = app.clock.now()
        self.principal = current_principal()
        self.instance = instance_id()
        self.plaintext = ctx.request_state
        self.state = FlowState.decode(self.plaintext) if self.plaintext is not None else None
        self.events: list[AuditEvent] = []
        self.effects: list[tuple[str, Any]] = []
        self.written = False
        self._store: Store | None = None
        # The round of the flow this copy claimed (it alone runs the handler), and what it answered, if it asked.
        self.claimed_round: int | None = None
        self.round_outcome: dict[str, Any] | None = None

    def event(self, kind: str, **fields: Any) -> None:
        self.events.append(
            AuditEvent(
                event=kind,  # type: ignore[arg-type]
                at=self.now,
                tool=self.tool,
                flow_id=fields.pop("flow_id", self.state.flow_id if self.state else None),
                principal=self.principal,
                instance=self.instance,
                **fields,
            )
        )

    async def run(self) -> CallToolResult | InputRequiredResult:
        app, state = self.app, self.state
        store = self._store = await app.store()
        if self.plaintext is not None and state is None:
            self.event("rejected", outcome="invalid_state", detail="requestState not minted by askback")
            raise InvalidStateError
        if state is not None:
            answered = await self._claim_round(store, state)
            if answered is not None:
                return answered
            if self.now > state.started + app.settings.flow_deadline:
                return await self.expire(state)

        if not _modern(self.ctx.protocol_version):
            return await self._run_pushing()
        return await self._attempt(state, self.ctx.input_responses)

    async def _claim_round(self, store: Store, state: FlowState) -> CallToolResult | InputRequiredResult | None:
        """Become the one copy of this round that runs the handler (`None`), or answer what that copy answered.

        A round can arrive several times (a client's retry, a double click, a load balancer's replay), at the same
        moment on several instances. Only one copy runs the handler; the others wait for its outcome and answer it.
        Rerunning the handler instead would rerun its reads before the input point after the effect changed what
        they read (a deleted project is no longer found), and answer differently."""
        settings = self.app.settings
        claim = await store.claim_round(
            state.flow_id, state.round, instance=self.instance, at=self.now, lease=settings.effect_lease
        )
        if claim.status == "running":
            try:
                seen = await wait_until_settled(
                    lambda: store.round_outcome(state.flow_id, state.round),
                    lambda c: c is None or c.status in ("done", "completed"),
                    settings.effect_wait,
                )
            except TimeoutError:
                self.event("rejected", round=state.round, outcome="round_in_progress")
                raise RoundInProgressError(
                    "This round of the request is still being answered by another copy of it (on this instance or "
                    "another), or the instance answering it stopped. Nothing was done twice; send the same request "
                    "again in a moment to get its outcome."
                ) from None
            if seen is None:
                # That copy failed and released the round: this one may run it.
                return await self._claim_round(store, state)
            claim = seen
        if claim.status == "won":
            self.claimed_round = state.round
            return None
        if claim.status == "completed":
            self.event("replayed", round=state.round, outcome="completed")
            return CallToolResult.model_validate(claim.outcome)
        self.event("replayed", round=state.round, outcome="asked")
        return InputRequiredResult.model_validate(claim.outcome)

    async def _run_pushing(self) -> CallToolResult | InputRequiredResult:
        """A 2025-11-25 session: the same handler, the same rounds, but each round's questions are pushed to the
        client as `elicitation/create` requests on the open session and the handler reruns here, in this process,
        with the answers. The flow state never leaves the server.

        A pushed question holds this call (and its memory) until the client answers, so the wait ends at the flow
        deadline like any other, and the questions waiting at once are capped per session and per process."""
        state: FlowState | None = None
        responses: dict[str, Any] | None = None
        session = self.ctx.request_context.session
        while True:
            outcome = await self._attempt(state, responses)
            if not isinstance(outcome, InputRequiredResult):
                return outcome
            plaintext = outcome.request_state
            state = FlowState.decode(plaintext) if plaintext else None
            assert state is not None
            self.state = state
            responses = {}
            for key, request in (outcome.input_requests or {}).items():
                params = request.params.model_dump(by_alias=True, exclude_none=True) if request.params else {}
                # The SDK's `session` is a per-request proxy; the `initialize` params it exposes belong to the
                # connection, so they identify the session across its requests.
                with self.app._pushes.slot(session.client_params or session) as free:
                    if not free:
                        return await self._too_many_pending(state)
                    answer = await self._push_until_deadline(session, state, key, params)
                if answer is None:
                    self.now = self.app.clock.now()
                    return await self.expire(state)
                responses[key] = answer
            # The answers came in now: the next run's events carry this time, and the deadline applies here too.
            self.now = self.app.clock.now()
            if self.now > state.started + self.app.settings.flow_deadline:
                return await self.expire(state)

    async def _push_until_deadline(
        self, session: Any, state: FlowState, key: str, params: dict[str, Any]
    ) -> ElicitResult | None:
        """Push one question and wait for its answer until the flow deadline; `None` when the deadline came first
        (the pushed request is then abandoned: its waiter and the call's memory are released)."""
        answer: ElicitResult | None = None
        async with anyio.create_task_group() as tg:  # noqa: ABK105 - the 2025-11-25 bridge itself

            async def deadline() -> None:
                await self.app.clock.sleep_until(state.started + self.app.settings.flow_deadline)
                tg.cancel_scope.cancel()

            tg.start_soon(deadline)
            if params.get("mode") == "url":
                # 2025-11-25 URL mode needs an elicitationId; the flow's own id keeps it unique per question.
                answer = await session.elicit_url(  # noqa: ABK101 - the 2025-11-25 bridge itself
                    message=params["message"],
                    url=params["url"],
                    elicitation_id=f"{state.flow_id}.{key}.{state.round}",  # noqa: ABK103
                    related_request_id=self.ctx.request_id,
                )
            else:
                answer = await session.elicit_form(  # noqa: ABK101 - the 2025-11-25 bridge itself
                    message=params["message"],
                    requested_schema=params["requestedSchema"],
                    related_request_id=self.ctx.request_id,
                )
            tg.cancel_scope.cancel()
        return answer

    async def _too_many_pending(self, state: FlowState) -> CallToolResult:
        settings = self.app.settings
        text = (
            "Not asked: too many questions are already waiting for an answer (at most "
            f"{settings.max_pending_pushes_per_session} per session and {settings.max_pending_pushes} per server "
            "process), so nothing was done. Answer the questions already shown, then call the tool again."
        )
        return await self.complete(state.flow_id, self.app._end(self.tool, text), "too_many_pending", state.round)

    async def _attempt(
        self, state: FlowState | None, responses: Mapping[str, Any] | None
    ) -> CallToolResult | InputRequiredResult:
        """One run of the handler, from the top."""
        app = self.app
        flow = Flow(
            tool=self.tool,
            arguments=self.arguments,
            capabilities=self.ctx.client_capabilities,
            state=state,
            responses=responses,
            now=self.now,
            run_effect=self.run_effect,
        )
        kwargs = dict(self.arguments)
        if self.handler.flow_param is not None:
            kwargs[self.handler.flow_param] = flow
        if self.handler.ctx_param is not None:
            kwargs[self.handler.ctx_param] = self.ctx
        try:
            try:
                value = await self.handler.fn(**kwargs)
            except (DBAPIError, SATimeoutError, OSError) as exc:
                down = unavailable_error(exc, doing=f"run the tool {self.tool!r}")
                if down is None:
                    raise
                self.event("rejected", outcome="store_unavailable", detail=str(down))
                raise down from exc
            finally:
                app._record_flow_events(flow.events, self.event, flow.round)
        except NeedInput:
            if flow.round >= app.settings.max_rounds:
                text = (
                    f"Stopped: this request asked {flow.round} rounds of questions without getting what it needs, "
                    "so nothing was done. Call the tool again to start over."
                )
                assert state is not None
                return await self.complete(state.flow_id, app._end(self.tool, text), "too_many_rounds", flow.round)
            nxt = flow.next_state(new_id=app._new_id())
            modes = sorted(set(flow.pending_modes.values()))
            self.event("asked", flow_id=nxt.flow_id, round=nxt.round, keys=tuple(flow.pending), mode=",".join(modes))
            asked = {"inputRequests": flow.input_requests(), "requestState": nxt.encode()}
            self.round_outcome = asked
            return InputRequiredResult.model_validate(asked)
        except FlowEnded as ended:
            result = app._end(self.tool, ended.text)
            if flow.flow_id is None:
                self.event("completed", round=flow.round, outcome=ended.reason)
                return result
            return await self.complete(flow.flow_id, result, ended.reason, flow.round)
        except ToolArgumentRequired as exc:
            self.event("rejected", outcome="missing_capability_fallback", detail=str(exc))
            raise ToolError(str(exc)) from None
        except MissingCapabilityError as exc:
            self.event("rejected", outcome="missing_capability", detail=str(exc))
            raise
        result = app._complete(self.tool, value)
        if flow.flow_id is None:
            if flow.events:
                self.event("completed", round=0, outcome="completed")
            return result
        return await self.complete(flow.flow_id, result, "completed", flow.round)

    async def expire(self, state: FlowState) -> CallToolResult:
        minutes = self.app.settings.flow_deadline / 60
        text = (
            f"Expired: this request waited more than {minutes:g} minutes for an answer, so nothing was done. "
            "Call the tool again to start over."
        )
        return await self.complete(state.flow_id, self.app._end(self.tool, text), "expired", state.round)

    async def run_effect(self, flow_id: str, name: str, effect: Callable[[], Awaitable[Any]]) -> Any:
        assert self._store is not None
        settings = self.app.settings
        return await run_once(
            self._store,
            flow_id,
            name,
            effect,
            clock=self.app.clock,
            wait=settings.effect_wait,
            lease=settings.effect_lease,
            finished=self.effects,
        )

    async def complete(self, flow_id: str, result: CallToolResult, outcome: str, round_: int) -> CallToolResult:
        """Record the flow's result (the first one recorded wins, so a concurrent replay answers the same)."""
        assert self._store is not None
        wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        self.event("completed", flow_id=flow_id, round=round_, outcome=outcome)
        completion = await self._store.finish_flow(
            flow_id,
            effects=self.effects,
            tool=self.tool,
            principal=self.principal,
            result=wire,
            events=self.events,
            at=self.now,
            round_=self.claimed_round,
        )
        self.written = True
        assert completion is not None
        if not completion.first:
            self.events = [
                replace(e, event="replayed", outcome="completed")
                if e.event == "completed" and e.flow_id == flow_id
                else e
                for e in self.events
            ]
            return CallToolResult.model_validate(completion.result)
        return result

    async def flush(self, *, strict: bool = False) -> None:
        """Write what was not written yet (a round that asked, failed or was refused), then log and trace it.
        `strict` lets a failed write raise; otherwise it is logged, as the round is failing anyway."""
        if not self.written and (self.events or self.effects or self.claimed_round is not None):
            try:
                store = self._store or await self.app.store()
                # A round that asked records what it asked, for its copies; one that failed gives the round up.
                await store.finish_flow(
                    self.state.flow_id if self.state else None,
                    effects=self.effects,
                    events=self.events,
                    at=self.now,
                    round_=self.claimed_round,
                    round_outcome=self.round_outcome,
                )
                self.written = True
            except AskbackError:
                if strict:
                    for ev in self.events:
                        emit(ev)
                    raise
                logger.exception(
                    "askback could not record %d audit event(s) and %d effect outcome(s) of %s",
                    len(self.events),
                    len(self.effects),
                    self.tool,
                )
        for ev in self.events:
            emit(ev)
