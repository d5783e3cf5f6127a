"""The round executor: carries out one `tools/call` of an askback tool.

Everything it decides comes from `askback.core.round` (`admit` before the handler, `decide` after it); this module
does the I/O around those decisions: it claims the round in the store, runs the handler through a `Flow`, records
effect outcomes, the flow's result and the audit events in one transaction at the end, and answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, InputRequiredResult

from askback.audit import AuditEvent
from askback.audit.emit import emit, instance_id
from askback.core import flow as core_flow
from askback.core import round as decision
from askback.core.flow import as_json
from askback.core.state import FlowState
from askback.db.classify import DRIVER_ERRORS, unavailable_error
from askback.errors import AskbackError, DefinitionError, RoundInProgressError
from askback.server.effects import run_once, wait_until_settled
from askback.server.legacy import modern, push_rounds
from askback.store import RoundClaim, Store
from askback.store.ledger import EffectClaim

if TYPE_CHECKING:
    from askback.server.app import Askback

__all__ = ["Handler", "RoundExecutor"]


@dataclass(frozen=True)
class Handler:
    """A registered tool function, and which of its parameters receive the flow and the SDK context."""

    tool: str
    fn: Callable[..., Awaitable[Any]]
    flow_param: str | None
    ctx_param: str | None


class RoundExecutor:
    """One `tools/call` of an askback tool."""

    def __init__(
        self,
        app: Askback,
        handler: Handler,
        arguments: dict[str, Any],
        ctx: Context[Any, Any],
        principal: str | None,
    ) -> None:
        self.app = app
        self.handler = handler
        self.tool = handler.tool
        self.arguments = arguments
        self.ctx = ctx
        self.now = app.clock.now()
        self.principal = principal
        self.instance = instance_id()
        self.plaintext = ctx.request_state
        self.state = FlowState.decode(self.plaintext) if self.plaintext is not None else None
        self.events: list[AuditEvent] = []
        self.effects: list[tuple[str, Any]] = []
        # Effects run under this round's claim (no claim of their own), recorded done at the round's end; and the
        # flow's effects as the ledger held them when the round was claimed.
        self.new_effects: list[tuple[str, Any]] = []
        self.known_effects: Mapping[str, EffectClaim] = {}
        self.written = False
        self._store: Store | None = None
        # The round of the flow this copy claimed (it alone runs the handler), and what it answered, if it asked.
        self.claimed_round: int | None = None
        self.round_outcome: dict[str, Any] | None = None
        # Answers held on the server (`ASKBACK_ANSWERS=server`) that this round asked to keep: (flow id, round,
        # sealed answers, until when), written with the round's other records.
        self.held: tuple[str, int, str, float] | None = None
        # Connected accounts as this caller sees them (when the app has them), closed when the round ends.
        self.accounts = None if app.accounts_port is None else app.accounts_port(principal)

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
        try:
            return await self._run()
        finally:
            if self.accounts is not None:
                with anyio.CancelScope(shield=True):
                    await self.accounts.aclose()

    async def _run(self) -> CallToolResult | InputRequiredResult:
        store = self._store = await self.app.store()
        state = self.state
        recorded = await self._claim_round(store, state) if state is not None else None
        admission = decision.admit(
            sealed=self.plaintext is not None,
            state=state,
            recorded=recorded,
            now=self.now,
            limits=self.app.limits,
        )
        if not isinstance(admission, decision.Run):
            return await self._carry_out(admission)
        if state is not None and state.held:
            # The answers wait in the store, not in the state: put them back, or end the flow if they are gone.
            found = await store.held_answers(state.flow_id, state.round)
            answers = None if found is None else self.app.answer_seal.open(state.flow_id, state.round, found)
            if answers is None:
                return await self._carry_out(decision.expired(state, self.app.limits))
            state = self.state = replace(state, answers=answers, held=False)
        if not modern(self.ctx.protocol_version):
            return await self._run_pushing()
        return await self._attempt(state, self.ctx.input_responses)

    async def _claim_round(self, store: Store, state: FlowState) -> decision.Recorded | None:
        """Become the one copy of this round that runs the handler (`None`), or read what that copy answered.

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
                    store,
                    lambda: store.round_outcome(state.flow_id, state.round),
                    lambda c: c is None or c.status in ("done", "completed"),
                    wait=settings.effect_wait,
                    clock=self.app.clock,
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
            self.known_effects = claim.effects
            return None
        return _recorded(claim)

    async def _run_pushing(self) -> CallToolResult | InputRequiredResult:
        """A 2025-11-25 session: the same handler and rounds, with questions pushed on the session."""
        clock = self.app.clock

        async def attempt(state: FlowState | None, responses: Mapping[str, Any] | None) -> Any:
            if state is not None:
                # The answers came in now: the next run's events carry this time and this flow.
                self.state, self.now = state, clock.now()
            return await self._attempt(state, responses)

        outcome, state, why = await push_rounds(
            attempt,
            session=self.ctx.request_context.session,
            request_id=self.ctx.request_id,
            pushes=self.app.pushes,
            clock=clock,
            deadline_after=self.app.settings.flow_deadline,
        )
        if why is None:
            assert isinstance(outcome, CallToolResult | InputRequiredResult)
            return outcome
        assert state is not None
        self.state, self.now = state, clock.now()
        limits = self.app.limits
        end = decision.expired(state, limits) if why == "expired" else decision.too_many_pending(state, limits)
        return await self._carry_out(end)

    async def _attempt(
        self, state: FlowState | None, responses: Mapping[str, Any] | None
    ) -> CallToolResult | InputRequiredResult:
        """One run of the handler, from the top, and the decision it ends in."""
        flow = core_flow.Flow(
            tool=self.tool,
            arguments=self.arguments,
            capabilities=self.ctx.client_capabilities,
            state=state,
            responses=responses,
            now=self.now,
            run_effect=self.run_effect,
            accounts=self.accounts,
            new_id=self.app.new_id,
        )
        kwargs = dict(self.arguments)
        if self.handler.flow_param is not None:
            kwargs[self.handler.flow_param] = flow
        if self.handler.ctx_param is not None:
            kwargs[self.handler.ctx_param] = self.ctx
        try:
            outcome = await core_flow.run(flow, lambda: self.handler.fn(**kwargs), new_id=self.app.new_id)
        except DRIVER_ERRORS as exc:
            # The application's own queries inside the tool: a database that is not there is retryable.
            down = unavailable_error(exc, doing=f"run the tool {self.tool!r}")
            if down is None:
                raise
            self.event("rejected", outcome="store_unavailable", detail=str(down))
            raise down from exc
        finally:
            self._record_flow_events(flow.events, flow.round)
        return await self._carry_out(decision.decide(outcome, limits=self.app.limits))

    async def _carry_out(self, chosen: decision.Admission | decision.Decision) -> CallToolResult | InputRequiredResult:
        """Do what was decided: answer, record, audit."""
        if isinstance(chosen, decision.Refuse):
            self.event("rejected", round=chosen.round, outcome=chosen.outcome, detail=chosen.detail)
            raise chosen.error
        if isinstance(chosen, decision.Replay):
            recorded = chosen.recorded
            self.event("replayed", round=chosen.round, outcome="completed" if recorded.completed else "asked")
            if recorded.completed:
                return CallToolResult.model_validate(recorded.outcome)
            return InputRequiredResult.model_validate(recorded.outcome)
        if isinstance(chosen, decision.Ask):
            nxt = chosen.state
            self.event(
                "asked", flow_id=nxt.flow_id, round=nxt.round, keys=tuple(chosen.requests), mode=",".join(chosen.modes)
            )
            sealed = nxt
            if self.app.hold_answers and nxt.answers and modern(self.ctx.protocol_version):
                sealed = replace(nxt, answers={}, held=True)
                settings = self.app.settings
                until = nxt.started + settings.flow_deadline + settings.state_grace
                self.held = (
                    nxt.flow_id,
                    nxt.round,
                    self.app.answer_seal.seal(nxt.flow_id, nxt.round, nxt.answers),
                    until,
                )
            asked = {
                "inputRequests": dict(chosen.requests),
                "requestState": sealed.encode(),
            }
            self.round_outcome = asked
            return InputRequiredResult.model_validate(asked)
        if isinstance(chosen, decision.End):
            result = self.app.end_result(self.tool, chosen.text)
            if chosen.flow_id is None:
                self.event("completed", round=chosen.round, outcome=chosen.reason)
                return result
            return await self.complete(chosen.flow_id, result, chosen.reason, chosen.round)
        assert isinstance(chosen, decision.Complete)
        result = self.app.tool_result(self.tool, chosen.value)
        if chosen.flow_id is None:
            if chosen.audit:
                self.event("completed", round=0, outcome="completed")
            return result
        return await self.complete(chosen.flow_id, result, "completed", chosen.round)

    def _record_flow_events(self, flow_events: list[core_flow.FlowEvent], round_: int) -> None:
        for fe in flow_events:
            if fe.kind == "answered":
                content = dict(fe.content) if fe.content is not None else None
                self.event("answered", round=round_, keys=(fe.key,), mode=fe.mode, action=fe.action, content=content)
            elif fe.kind == "invalid":
                self.event(
                    "rejected", round=round_, keys=(fe.key,), mode=fe.mode, outcome="invalid_answer", detail=fe.detail
                )
            elif fe.kind == "ignored":
                self.event(
                    "rejected", round=round_, keys=(fe.key,), mode=fe.mode, outcome="ignored_answer", detail=fe.detail
                )
            elif fe.kind == "fallback":
                self.event("answered", round=round_, keys=(fe.key,), mode=fe.mode, action="fallback", detail=fe.detail)

    async def run_effect(self, flow_id: str, name: str, effect: Callable[[], Awaitable[Any]]) -> Any:
        assert self._store is not None
        settings = self.app.settings
        if self.claimed_round is not None and (self.state is None or flow_id == self.state.flow_id):
            # This copy holds the round: no other attempt of this flow can run now, so an effect the ledger has not
            # seen runs without a claim of its own and is recorded with the round's end (one transaction fewer).
            known = self.known_effects.get(name)
            ran = next((outcome for done, outcome in self.new_effects if done == name), _MISSING)
            if ran is not _MISSING:
                return ran
            if known is not None and known.status == "done":
                return known.outcome
            if known is None:
                raw = await effect()
                try:
                    outcome = as_json(raw)
                except DefinitionError:
                    # It happened: record that (so that a retry does not run it again), then report the mistake.
                    self.new_effects.append((name, None))
                    raise
                self.new_effects.append((name, outcome))
                return outcome
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
            new_effects=self.new_effects,
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
        if not self.written and (self.events or self.effects or self.new_effects or self.claimed_round is not None):
            try:
                store = self._store or await self.app.store()
                # A round that asked records what it asked, for its copies; one that failed gives the round up.
                await store.finish_flow(
                    self.state.flow_id if self.state else None,
                    effects=self.effects,
                    new_effects=self.new_effects,
                    events=self.events,
                    at=self.now,
                    round_=self.claimed_round,
                    round_outcome=self.round_outcome,
                    held=self.held,
                )
                self.written = True
            except AskbackError:
                if strict:
                    for ev in self.events:
                        emit(ev)
                    raise
                self.app.log_unrecorded(self)
        for ev in self.events:
            emit(ev)


_MISSING = object()


def _recorded(claim: RoundClaim) -> decision.Recorded:
    return decision.Recorded(claim.outcome, completed=claim.status == "completed")
