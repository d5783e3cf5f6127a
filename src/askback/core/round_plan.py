"""One `tools/call` of an askback tool as a plan: the round's steps as frozen values, with no I/O.

`round_plan(request, policy)` is a generator (httpx's `Auth.auth_flow` shape, like `askback check`'s probe): it
yields each step the round needs, is sent that step's result, and returns the round's `RoundEnd`. The server's driver
(`askback.server.round`) performs each step against the store, the handler and the SDK; a test answers them with
plain data. The values are in `round_steps` (re-exported here). In order:

    Claim          become the one copy of this round that runs the handler    -> Won | Recorded | InProgress
    ReadHeld       the answers held on the server (`ASKBACK_ANSWERS=server`)  -> the answers, or None
    RunHandler     one run of the handler from the top                        -> Ran
    Push           a 2025-11-25 session: push the questions, wait for answers -> Pushed | NotPushed
    ToolResult /   the wire result of the handler's value, or of an end text  -> CallToolResult
      EndResult
    Record         the end of the round in one transaction                    -> Stored | None

A step whose I/O raised is answered with `Failed`: the plan records what the round leaves behind (its effects, its
audit events, the release of its claim) and returns `Raise`. What the plan decides, besides `core.round`'s
`admit` and `decide`: restoring held answers and ending the flow when they are gone, whether to hold the next
round's answers, which effects a claimed round skips (`effect_route`), the audit events of every branch, and which
records are strict (a round that cannot record what it asked or answered fails: the audit trail has no gaps).

A task's run is this same plan (`RoundRequest.task`): its state comes from the task's row and there is no claim
(the task's lease holds the run), so it is one `RunHandler`, then the same decision, results and audit notes; the
task's driver keeps what the run ends with in the row. The 2025-11-25 push path is this same plan too
(`RoundRequest.pushed`): the handler reruns within one call, each round's questions pushed (`Push`) instead of
returned. The agent runtime's resume (`askback.runtime.calls`) is the
client's side of a round, not the server's: it has its own pure decision (`runtime.questions.resume_decision`),
and a client's loop over rounds is `core.plan.flow_plan`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from mcp_types import CallToolResult, InputRequiredResult

from askback.core import round as decision
from askback.core.round_steps import (
    Claim,
    EndResult,
    Failed,
    Hold,
    InProgress,
    KnownEffect,
    Note,
    NotPushed,
    Policy,
    Push,
    Pushed,
    Raise,
    Ran,
    ReadHeld,
    Record,
    Reply,
    RoundEnd,
    RoundRequest,
    RunHandler,
    Step,
    Stored,
    ToolResult,
    Won,
)
from askback.core.state import FlowState
from askback.errors import AskbackError, RoundInProgressError, ToolError

__all__ = [
    "Claim",
    "EndResult",
    "Failed",
    "Hold",
    "InProgress",
    "KnownEffect",
    "NotPushed",
    "Note",
    "Policy",
    "Push",
    "Pushed",
    "Raise",
    "Ran",
    "ReadHeld",
    "Record",
    "Reply",
    "Reuse",
    "RoundEnd",
    "RoundRequest",
    "RunHandler",
    "Step",
    "Stored",
    "ToolResult",
    "Won",
    "effect_route",
    "round_plan",
]


# --- effects under a claimed round -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Reuse:
    """The effect ran already: this is its outcome."""

    outcome: Any


def effect_route(
    name: str, *, known: Mapping[str, KnownEffect] | None, ran: Sequence[tuple[str, Any]]
) -> Reuse | Literal["run_here", "run_claimed"]:
    """How effect `name` runs. Under the round's claim (`known` not None) no other attempt of the flow can run now,
    so an effect the ledger has not seen runs here without a claim of its own and is recorded with the round's end
    (one transaction fewer); one found done, or already run here, is reused. Anything else (no claim, or an effect
    still claimed by an attempt that stopped) goes through the effect's own claim."""
    if known is None:
        return "run_claimed"
    for done, outcome in ran:
        if done == name:
            return Reuse(outcome)
    found = known.get(name)
    if found is None:
        return "run_here"
    if found.status == "done":
        return Reuse(found.outcome)
    return "run_claimed"


# --- the plan --------------------------------------------------------------------------------------------------

_ROUND_IN_PROGRESS = (
    "This round of the request is still being answered by another copy of it (on this instance or another), or the "
    "instance answering it stopped. Nothing was done twice; send the same request again in a moment to get its "
    "outcome."
)


def round_plan(request: RoundRequest, policy: Policy) -> Generator[Step, Any, RoundEnd]:
    """The round's plan: yields each `Step`, is sent its result, returns the `RoundEnd`. No I/O of its own."""
    limits = policy.limits
    state = request.state
    now = request.now
    notes: list[Note] = []
    claimed: int | None = None
    known: Mapping[str, KnownEffect] | None = None
    effects: tuple[tuple[str, Any], ...] = ()
    new_effects: tuple[tuple[str, Any], ...] = ()
    round_outcome: Mapping[str, Any] | None = None
    hold: Hold | None = None

    def note(event: Any, *, flow_id: Any = _CURRENT, **fields: Any) -> None:
        flow = (state.flow_id if state else None) if flow_id is _CURRENT else flow_id
        notes.append(Note(event, now, flow, **fields))

    def record(*, strict: bool, result: Mapping[str, Any] | None = None) -> Generator[Step, Any, Any]:
        if not (notes or effects or new_effects or claimed is not None):
            return None
        return (
            yield Record(
                state.flow_id if state else None,
                claimed,
                now,
                tuple(notes),
                effects,
                new_effects,
                result,
                round_outcome,
                hold,
                strict,
            )
        )

    def reply(
        result: CallToolResult | InputRequiredResult, next_state: FlowState | None = None
    ) -> Generator[Step, Any, RoundEnd]:
        stored = yield from record(strict=True)
        if isinstance(stored, Failed):
            return Raise(stored.error, tuple(notes))
        return Reply(result, tuple(notes), next_state)

    def fail(failed: Failed) -> Generator[Step, Any, RoundEnd]:
        error = failed.error
        if (
            not notes
            and isinstance(error, Exception)
            and (isinstance(error, ToolError) or not isinstance(error, AskbackError))
        ):
            # The call failed before it asked or answered anything: the trail still says it happened.
            note("rejected", outcome="tool_error", detail=failed.detail)
        yield from record(strict=False)
        return Raise(error, tuple(notes))

    def after(ran: Ran, run_state: FlowState | None) -> Decided:
        nonlocal effects, new_effects
        effects += ran.effects
        new_effects += ran.new_effects
        if ran.error is not None and ran.unavailable:
            note("rejected", outcome="store_unavailable", detail=str(ran.error))
        round_ = run_state.round if run_state else 0
        for fe in ran.outcome.events if ran.outcome is not None else ran.events:
            keys = (fe.key,)
            if fe.kind == "answered":
                content = dict(fe.content) if fe.content is not None else None
                note("answered", round=round_, keys=keys, mode=fe.mode, action=fe.action, content=content)
            elif fe.kind == "fallback":
                note("answered", round=round_, keys=keys, mode=fe.mode, action="fallback", detail=fe.detail)
            else:
                outcome = "invalid_answer" if fe.kind == "invalid" else "ignored_answer"
                note("rejected", round=round_, keys=keys, mode=fe.mode, outcome=outcome, detail=fe.detail)
        if ran.error is not None:
            return Failed(ran.error, ran.detail)
        assert ran.outcome is not None
        return decision.decide(ran.outcome, limits=limits)

    def asked(chosen: decision.Ask) -> None:
        nonlocal round_outcome, hold
        nxt = chosen.state
        note("asked", flow_id=nxt.flow_id, round=nxt.round, keys=tuple(chosen.requests), mode=",".join(chosen.modes))
        sealed = nxt
        if policy.hold_answers and nxt.answers and not (request.pushed or request.task):
            sealed = replace(nxt, answers={}, held=True)
            until = nxt.started + limits.flow_deadline + policy.state_grace
            hold = Hold(nxt.flow_id, nxt.round, nxt.answers, until)
        round_outcome = {"inputRequests": dict(chosen.requests), "requestState": sealed.encode()}

    def complete(flow_id: str, result: CallToolResult, outcome: str, round_: int) -> Generator[Step, Any, RoundEnd]:
        # The first result recorded wins, so that a concurrent replay answers the same.
        wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        note("completed", flow_id=flow_id, round=round_, outcome=outcome)
        stored = yield from record(strict=True, result=wire)
        if isinstance(stored, Failed):
            # Once more: a write whose connection dropped at its commit may not have been made. Recording the result
            # is what lets a retry answer as this copy would: rerun from the top, the handler's reads before the
            # input point would see what its effects changed (a deleted project is no longer found). Every part of
            # the record is written once whatever the first attempt did (first writer wins).
            stored = yield from record(strict=True, result=wire)
        if isinstance(stored, Failed):
            # Not recorded: give the round up (so that a retry may run it), keeping its effects and its trail. The
            # call did not complete (its client gets the error), so the trail says that, not "completed": the retry
            # that records the result writes the one `completed` event.
            notes[:] = [
                replace(n, event="rejected", outcome="unrecorded", detail=_first_line(stored.error))
                if n.event == "completed" and n.flow_id == flow_id
                else n
                for n in notes
            ]
            yield from record(strict=False)
            return Raise(stored.error, tuple(notes))
        assert stored is not None
        if not stored.first:
            notes[:] = [
                replace(n, event="replayed", outcome="completed")
                if n.event == "completed" and n.flow_id == flow_id
                else n
                for n in notes
            ]
            return Reply(CallToolResult.model_validate(stored.result), tuple(notes))
        return Reply(result, tuple(notes))

    def carry_out(chosen: decision.Admission | Decided) -> Generator[Step, Any, RoundEnd]:
        if isinstance(chosen, Failed):
            return (yield from fail(chosen))
        if isinstance(chosen, decision.Refuse):
            note("rejected", round=chosen.round, outcome=chosen.outcome, detail=chosen.detail)
            return (yield from fail(Failed(chosen.error)))
        if isinstance(chosen, decision.Replay):
            recorded = chosen.recorded
            note("replayed", round=chosen.round, outcome="completed" if recorded.completed else "asked")
            if recorded.completed:
                return (yield from reply(CallToolResult.model_validate(recorded.outcome)))
            return (yield from reply(InputRequiredResult.model_validate(recorded.outcome)))
        if isinstance(chosen, decision.Ask):
            asked(chosen)
            assert round_outcome is not None
            return (yield from reply(InputRequiredResult.model_validate(round_outcome), chosen.state))
        if isinstance(chosen, decision.End):
            ended = yield EndResult(chosen.text, chosen.structured)
            if isinstance(ended, Failed):
                return (yield from fail(ended))
            if chosen.flow_id is None:
                note("completed", round=chosen.round, outcome=chosen.reason)
                return (yield from reply(ended))
            return (yield from complete(chosen.flow_id, ended, chosen.reason, chosen.round))
        assert isinstance(chosen, decision.Complete)
        result = yield ToolResult(chosen.value)
        if isinstance(result, Failed):
            return (yield from fail(result))
        if chosen.flow_id is None:
            if chosen.audit:
                note("completed", round=0, outcome="completed")
            return (yield from reply(result))
        return (yield from complete(chosen.flow_id, result, "completed", chosen.round))

    # -- the round --

    if request.task:
        # A task's run: its lease stands for the claim, and its deadline was checked when its answers came.
        ran = yield RunHandler(state, request.responses, now, None)
        return (yield from carry_out(after(ran, state)))
    recorded: decision.Recorded | None = None
    if state is not None:
        claim = yield Claim(state.flow_id, state.round)
        if isinstance(claim, Failed):
            return (yield from fail(claim))
        if isinstance(claim, InProgress):
            note("rejected", round=state.round, outcome="round_in_progress")
            return (yield from fail(Failed(RoundInProgressError(_ROUND_IN_PROGRESS))))
        if isinstance(claim, Won):
            claimed, known = state.round, claim.effects
        else:
            recorded = claim
    admission = decision.admit(sealed=request.sealed, state=state, recorded=recorded, now=now, limits=limits)
    if not isinstance(admission, decision.Run):
        return (yield from carry_out(admission))
    if state is not None and state.held:
        # The answers wait in the store, not in the state: put them back, or end the flow if they are gone.
        found = yield ReadHeld(state.flow_id, state.round)
        if isinstance(found, Failed):
            return (yield from fail(found))
        if found is None:
            return (yield from carry_out(decision.expired(state, limits)))
        state = replace(state, answers=found, held=False)
    if not request.pushed:
        ran = yield RunHandler(state, request.responses, now, known)
        return (yield from carry_out(after(ran, state)))

    # A 2025-11-25 session: the same handler and rounds within this one call, each round's questions pushed. The
    # flow state never leaves the server, so the first run starts without one.
    run_state: FlowState | None = None
    responses: Mapping[str, Any] | None = None
    while True:
        ran = yield RunHandler(run_state, responses, now, known, new_effects)
        chosen = after(ran, run_state)
        if not isinstance(chosen, decision.Ask):
            return (yield from carry_out(chosen))
        asked(chosen)
        run_state = chosen.state
        deadline = run_state.started + limits.flow_deadline
        pushed = yield Push(chosen.requests, run_state, deadline)
        if isinstance(pushed, Failed):
            return (yield from fail(pushed))
        # The answers came in now: the next run's events carry this time and this flow.
        state, now = run_state, pushed.now
        if isinstance(pushed, NotPushed):
            why = pushed.why
            end = decision.expired(state, limits) if why == "expired" else decision.too_many_pending(state, limits)
            return (yield from carry_out(end))
        if now > deadline:
            return (yield from carry_out(decision.expired(state, limits)))
        responses = pushed.responses


Decided = decision.Decision | Failed

_CURRENT: Any = object()


_RENAMED = {"Outcome": "RoundEnd"}

if not TYPE_CHECKING:  # old names are for code not yet moved to the new ones, never for askback's own

    def __getattr__(name: str) -> Any:
        from askback._face import renamed

        return renamed(__name__, _RENAMED, name, globals())


def _first_line(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
