"""The round driver: carries out one `tools/call` of an askback tool.

The round is a plan (`askback.core.round_plan`): a generator of steps that decides everything (claims, held answers,
which effects run, what is recorded and audited, what the call answers). This module performs each step's I/O
against the store, the handler and the SDK session, and sends the result back, until the plan returns. It reads
nothing of the app: everything it needs is in one frozen `RoundConfig`, built once per app. A task's run
(`run_task_round`) is driven through the same plan and steps; its state lives in the task's row instead of a sealed
`requestState`, so nothing is claimed or recorded here, and the task's driver keeps what the run ends with.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ResourceError, ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ClientCapabilities, InputRequiredResult, TextContent

from askback.audit import AuditEvent
from askback.audit.emit import emit_all, instance_id
from askback.clock import Clock
from askback.core import flow as core_flow
from askback.core import round as decision
from askback.core import round_plan as plan
from askback.core.approving import Approval, ApprovalsPort
from askback.core.caller import Caller
from askback.core.flow import AccountsPort, ConnectMode
from askback.core.state import FlowState
from askback.db.classify import raised_by_a_driver, unavailable_error
from askback.errors import AskbackError, StoreUnavailableError
from askback.errors import ToolError as AskbackToolError
from askback.server.effects import ClaimEffect, wait_until_settled
from askback.server.held import AnswerSeal
from askback.server.legacy import PendingPushes, modern, push_questions
from askback.server.round_effects import RoundEffects
from askback.store import Completion, HeldAnswers, RoundRecord, Store

__all__ = ["Abandoned", "Handler", "RoundConfig", "TaskRun", "failure", "run_ask_first", "run_round", "run_task_round"]

logger = logging.getLogger("askback")


@dataclass(frozen=True)
class Handler:
    """A registered tool function, and which of its parameters receive the flow and the SDK context."""

    tool: str
    fn: Callable[..., Awaitable[Any]]
    flow_param: str | None
    ctx_param: str | None


@dataclass(frozen=True)
class RoundConfig:
    """What every round of one app is carried out with, built once from it (`Askback.round_config`)."""

    policy: plan.Policy
    store: Callable[[], Awaitable[Store]]
    clock: Clock
    new_id: Callable[[], str]
    answer_seal: AnswerSeal
    tool_result: Callable[[str, Any], CallToolResult]
    end_result: Callable[[str, str], CallToolResult]
    accounts: Callable[[str | None], AccountsPort] | None
    pushes: PendingPushes
    effect_wait: float
    effect_lease: float
    # `report`: `flow.connect` ends the run saying an account is not ready instead of asking (`execute_tool`), and
    # `flow.approve` saying a request is pending.
    connect_mode: ConnectMode = "ask"
    # Approval requests as one caller sees them (`flow.approve`), when the app has approvals.
    approvals: Callable[[Caller | None], ApprovalsPort] | None = None
    # The approval the app's gates ask of a tool before its handler runs (`None`: no gates).
    gate: Callable[[str], Approval | None] | None = None


async def run_round(
    config: RoundConfig,
    handler: Handler,
    arguments: dict[str, Any],
    ctx: Context[Any, Any],
    caller: Caller | None,
) -> CallToolResult | InputRequiredResult:
    """Drive one round's plan to its outcome: answer it, or raise its error (askback's own, or the handler's).
    `caller`: who the request's token names (`None` on an unauthenticated transport)."""
    plaintext = ctx.request_state
    io = _RoundIO(config, handler, arguments, caller, capabilities=ctx.client_capabilities, ctx=ctx)
    request = plan.RoundRequest(
        sealed=plaintext is not None,
        state=FlowState.decode(plaintext) if plaintext is not None else None,
        responses=ctx.input_responses,
        now=io.now,
        pushed=not modern(ctx.protocol_version),
    )
    outcome = await io.drive(request)
    emit_all([io.audit(note) for note in outcome.notes])
    if isinstance(outcome, plan.Raise):
        raise outcome.error
    return outcome.result


async def run_ask_first(
    config: RoundConfig,
    handler: Handler,
    caller: Caller | None,
    *,
    capabilities: ClientCapabilities | None,
    plaintext: str | None,
    responses: Mapping[str, Any] | None,
) -> CallToolResult | InputRequiredResult:
    """A round of a task tool's `ask_first` questions on `tools/call`, before the task exists, driven through the same
    plan as an MRTR round (`run_round`): the same claim, sealed state, validation, re-asking, limits and audit notes.
    `handler` asks the questions and opens the task as the flow's effect (`core.flow.ask_first`); its value is
    answered through `config.tool_result`. The flow goes on as the task, whose end is the flow's `completed` event:
    the round that opens it writes none."""
    io = _RoundIO(config, handler, {}, caller, capabilities=capabilities, opening=True)
    request = plan.RoundRequest(
        sealed=plaintext is not None,
        state=FlowState.decode(plaintext) if plaintext is not None else None,
        responses=responses,
        now=io.now,
    )
    outcome = await io.drive(request)
    emit_all([io.audit(note) for note in io.kept(outcome.notes)])
    if isinstance(outcome, plan.Raise):
        raise outcome.error
    return outcome.result


class Abandoned(BaseException):
    """A task's run is no longer wanted (its task was cancelled, or taken over by another instance): raised by its
    effect claim, it stops the run, which writes nothing."""


@dataclass(frozen=True)
class TaskRun:
    """How one run of a task's handler went: the plan's outcome (`Reply`: the result, or the questions with
    `next_state`; `Raise`: the handler's or askback's error) and the audit events of its notes, for the task's
    driver to write with the outcome it keeps in the task's row."""

    outcome: plan.RoundEnd
    events: tuple[AuditEvent, ...]


async def run_task_round(
    config: RoundConfig,
    handler: Handler,
    arguments: dict[str, Any],
    caller: Caller | None,
    *,
    capabilities: ClientCapabilities | None,
    state: FlowState,
    responses: Mapping[str, Any],
    claim_effect: ClaimEffect,
) -> TaskRun:
    """One run of a task's handler through the same plan as an MRTR round (`RoundRequest.task`): the same
    validation and re-asking, results, limits and audit notes. The flow state and answers come from the task's row;
    each effect is claimed through `claim_effect` (which raises `Abandoned` once the task is no longer the run's).
    Nothing is written here: the task's driver keeps the outcome in the row, with `events`."""
    io = _RoundIO(config, handler, arguments, caller, capabilities=capabilities, claim_effect=claim_effect)
    request = plan.RoundRequest(sealed=True, state=state, responses=responses, now=io.now, task=True)
    outcome = await io.drive(request)
    return TaskRun(outcome, tuple(io.audit(note) for note in outcome.notes))


def failure(tool: str, error: BaseException) -> CallToolResult | MCPError:
    """What a call of `tool` answers when its round raised `error`, exactly as an MRTR call does: askback's boundary
    (`_tools.at_mcp_boundary`), then the SDK's (`Tool.run` and its `tools/call` handler). A JSON-RPC error stays one;
    a tool error reads "Error executing tool <tool>: <its text>"; anything else is a crash, whose text stays on the
    server: "Error executing tool <tool>"."""
    if isinstance(error, AskbackError):
        if not error.tool_error:
            return error.to_mcp_error()
        error = ToolError(str(error))
    if isinstance(error, MCPError):
        return error
    text = f"Error executing tool {tool}"
    if isinstance(error, ToolError | ResourceError):
        text += f": {error}"
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)


class _RoundIO:
    """Performs the steps of one round's plan; holds only what the request gave it (`ctx`: the SDK's context of an
    MRTR request; a task's run has none, and claims its effects through `claim_effect`)."""

    def __init__(
        self,
        config: RoundConfig,
        handler: Handler,
        arguments: dict[str, Any],
        caller: Caller | None,
        *,
        capabilities: ClientCapabilities | None,
        ctx: Context[Any, Any] | None = None,
        claim_effect: ClaimEffect | None = None,
        opening: bool = False,
    ) -> None:
        self.config = config
        self.opening = opening
        self.handler = handler
        self.arguments = arguments
        self.capabilities = capabilities
        self.ctx = ctx
        self.claim_effect = claim_effect
        self.caller = caller
        principal = self.principal = caller.principal if caller is not None else None
        self.now = config.clock.now()
        self.instance = instance_id()
        # Connected accounts as this caller sees them (when the app has them), closed when the round ends.
        self.accounts = None if config.accounts is None else config.accounts(principal)
        self.approvals = None if config.approvals is None else config.approvals(caller)
        self._events: dict[int, tuple[plan.Note, AuditEvent]] = {}
        self.held = False

    async def drive(self, request: plan.RoundRequest) -> plan.RoundEnd:
        """Perform the plan's steps until it returns its outcome."""
        # Only a flow whose state says its answers wait on the server can have any there to forget when it completes.
        self.held = request.state is not None and request.state.held
        steps = plan.round_plan(request, self.config.policy)
        try:
            step = next(steps)
            while True:
                step = steps.send(await self.perform(step))
        except StopIteration as stop:
            outcome: plan.RoundEnd = stop.value
        finally:
            if self.accounts is not None:
                with anyio.CancelScope(shield=True):
                    await self.accounts.aclose()
        return outcome

    def kept(self, notes: tuple[plan.Note, ...]) -> tuple[plan.Note, ...]:
        """The notes this round writes: a round that opens a task leaves the flow's end to the task."""
        if not self.opening:
            return notes
        return tuple(n for n in notes if not (n.event == "completed" and n.outcome == "completed"))

    def audit(self, note: plan.Note) -> AuditEvent:
        # A note is written with the round's records and then logged: made into an event once.
        known = self._events.get(id(note))
        if known is not None and known[0] is note:
            return known[1]
        event = AuditEvent(
            event=note.event,
            at=note.at,
            tool=self.handler.tool,
            flow_id=note.flow_id,
            principal=self.principal,
            # Recorded when the token granted some; a caller without scopes reads as before.
            scopes=tuple(self.caller.scopes) if self.caller is not None and self.caller.scopes else None,
            round=note.round,
            keys=note.keys,
            mode=note.mode,
            action=note.action,
            content=note.content,
            outcome=note.outcome,
            detail=note.detail if note.detail is not None or self.claim_effect is None else _IN_A_TASK.get(note.event),
            instance=self.instance,
        )
        self._events[id(note)] = (note, event)
        return event

    async def perform(self, step: plan.Step) -> Any:
        if isinstance(step, plan.Record):
            return await self._record(step)
        if isinstance(step, plan.RunHandler):
            return await self._run_handler(step)
        try:
            if isinstance(step, plan.Claim):
                return await self._claim(step)
            if isinstance(step, plan.ReadHeld):
                found = await (await self.config.store()).flows.held_answers(step.flow_id, step.round)
                return None if found is None else self.config.answer_seal.open(step.flow_id, step.round, found)
            if isinstance(step, plan.Push):
                assert self.ctx is not None
                return await push_questions(
                    step,
                    session=self.ctx.request_context.session,
                    request_id=self.ctx.request_id,
                    pushes=self.config.pushes,
                    clock=self.config.clock,
                )
            if isinstance(step, plan.ToolResult):
                return self.config.tool_result(self.handler.tool, step.value)
            assert isinstance(step, plan.EndResult)
            return _with_structured(self.config.end_result(self.handler.tool, step.text), step.text, step.structured)
        except BaseException as exc:
            # The plan records what the round leaves behind (its claim released, its trail), then fails with this.
            return plan.Failed(exc, _detail(exc))

    async def _claim(self, step: plan.Claim) -> plan.Won | decision.Recorded | plan.InProgress:
        """Become the one copy of this round that runs the handler, or read what that copy answered.

        Rerunning the handler in a second copy would rerun its reads before the input point after the effect
        changed what they read (a deleted project is no longer found), and answer differently."""
        config = self.config
        store = await config.store()
        while True:
            claim = await store.flows.claim_round(
                step.flow_id, step.round, instance=self.instance, at=self.now, lease=config.effect_lease
            )
            if claim.status == "running":
                try:
                    seen = await wait_until_settled(
                        store.flows,
                        lambda: store.flows.round_outcome(step.flow_id, step.round),
                        lambda c: c is None or c.status in ("done", "completed"),
                        wait=config.effect_wait,
                        clock=config.clock,
                    )
                except TimeoutError:
                    return plan.InProgress()
                if seen is None:
                    # That copy failed and released the round: this one may run it.
                    continue
                claim = seen
            if claim.status == "won":
                return plan.Won(claim.effects)
            return decision.Recorded(claim.outcome, completed=claim.status == "completed")

    async def _run_handler(self, step: plan.RunHandler) -> plan.Ran:
        config = self.config
        effects = RoundEffects(
            step,
            tool=self.handler.tool,
            store=config.store,
            clock=config.clock,
            now=self.now,
            wait=config.effect_wait,
            lease=config.effect_lease,
            claim_effect=self.claim_effect,
        )
        flow = core_flow.Flow(
            tool=self.handler.tool,
            arguments=self.arguments,
            capabilities=self.capabilities,
            state=step.state,
            responses=step.responses,
            now=step.now,
            run_effect=effects.run,
            accounts=self.accounts,
            new_id=self.config.new_id,
            caller=self.caller,
            connect_mode=self.config.connect_mode,
            approvals=self.approvals,
            in_task=self.claim_effect is not None,  # only a task's run claims its effects through `claim_effect`
        )
        kwargs = dict(self.arguments)
        if self.handler.flow_param is not None:
            kwargs[self.handler.flow_param] = flow
        if self.handler.ctx_param is not None:
            kwargs[self.handler.ctx_param] = self.ctx
        fn = self.handler.fn
        gate = None if self.config.gate is None else self.config.gate(self.handler.tool)

        async def handler() -> Any:
            if gate is not None:
                # Gated by the app's approval policy: the call is approved before the handler's first line runs.
                await flow.approve(gate)
            return await fn(**kwargs)

        try:
            outcome = await core_flow.run(flow, handler, new_id=self.config.new_id)
        except Abandoned:
            raise
        except BaseException as exc:
            error, unavailable = exc, False
            if raised_by_a_driver(exc):
                # The application's own queries inside the tool: a database that is not there is retryable (a tool's
                # own `OSError`, a missing file or a timeout of another service, is the tool's failure).
                down = unavailable_error(exc, doing=f"run the tool {self.handler.tool!r}")
                if down is not None:
                    down.__cause__ = exc
                    error, unavailable = down, True
            return plan.Ran(
                None,
                core_flow.run_events(flow),
                tuple(effects.finished),
                tuple(effects.new),
                error=error,
                detail=_detail(exc),
                unavailable=unavailable,
            )
        return plan.Ran(outcome, effects=tuple(effects.finished), new_effects=tuple(effects.new))

    async def _record(self, step: plan.Record) -> Any:
        if self.claim_effect is not None:
            # A task's run: its driver keeps the outcome in the task's row, with the audit events, once it ends.
            return None if step.result is None else Completion(step.result, first=True)
        seal = self.config.answer_seal
        hold = step.hold
        held = None
        if hold is not None:
            held = HeldAnswers(hold.flow_id, hold.round, seal.seal(hold.flow_id, hold.round, hold.answers), hold.until)
        events = [self.audit(n) for n in self.kept(step.notes)]
        record = RoundRecord(
            step.flow_id,
            step.at,
            effects=step.effects,
            new_effects=step.new_effects,
            tool=self.handler.tool,
            principal=self.principal,
            result=step.result,
            events=events,
            round=step.round,
            round_outcome=step.round_outcome,
            held=held,
            forget_held=self.held or hold is not None,
        )
        try:
            store = await self.config.store()
            # Shielded: a round cancelled after its handler ran (its client gone from a stream) still records what it
            # did, its effects first of all, and lets its claim go, so that a retry neither waits out the lease nor
            # runs an effect again. Bounded, so that a store that does not answer cannot hold it. (A shutdown's own
            # cancellation, past its grace, is not an anyio one and is not held off: see docs/deploy.md.)
            # One scope, shielded and with its own deadline (cheaper than a shield around `fail_after`).
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + self.config.effect_wait):
                return await store.flows.finish_flow(record)
            raise StoreUnavailableError(  # reached only when the deadline cancelled the write
                f"Could not record the end of the round of {self.handler.tool!r}: the database did not "
                f"answer within {self.config.effect_wait:g} seconds. Retry the same request."
            )
        except AskbackError as exc:
            if step.strict:
                return plan.Failed(exc)
            logger.exception(
                "askback could not record %d audit event(s) and %d effect outcome(s) of %s",
                len(events),
                len(step.effects) + len(step.new_effects),
                self.handler.tool,
            )
            return None


def _with_structured(result: CallToolResult, text: str, structured: Mapping[str, Any] | None) -> CallToolResult:
    """An end result that says more (`structured`: a pending approval's status): its JSON first in the content, and
    in the structured content when the tool declares no output schema, or the one the SDK makes for a text (an
    object with `result`, which takes more fields); a tool's own output schema is left as the result has it."""
    if structured is None:
        return result
    report = dict(structured)
    content = [TextContent(type="text", text=json.dumps(report)), *result.content]
    update: dict[str, Any] = {"content": content}
    if result.structured_content is None:
        update["structured_content"] = report
    elif result.structured_content == {"result": text}:
        update["structured_content"] = {**report, "result": text}
    return result.model_copy(update=update)


# The audit trail tells a task's rounds from an MRTR call's by these details (docs/audit.md).
_IN_A_TASK = {"asked": "in a task", "completed": "a task"}


def _detail(exc: BaseException) -> str:
    """What the audit says of an exception that is not askback's own."""
    return str(exc) if isinstance(exc, ToolError | AskbackToolError) else f"the tool raised {type(exc).__name__}"
