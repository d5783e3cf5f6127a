"""The handler's view of one run of one round, with no I/O.

Under MRTR the handler reruns from the top on every round. A `Flow` is what the handler sees during one run: given
this request's arguments, declared client capabilities, `inputResponses`, the plaintext of askback's (already
verified) `requestState` and the time, `flow.ask(question)` either returns the typed answer, or stops the run by
raising `NeedInput` (the question goes out in an `input_required` result), `FlowEnded` (the user declined or
cancelled: the call completes with a message), `ArgumentRequiredError` or `MissingCapabilityError` (-32021).
`run` turns those into one frozen `RunOutcome`, which `askback.core.round.decide` takes.

Answers given in earlier rounds travel inside the sealed state, so a chain of questions can land on a different
instance every round. An answer is taken only for the exact question the user was shown (a digest of the rendered
question is kept beside it), only for keys asked in the previous round, and only after validation; anything else
is ignored or asked again with a note saying what was wrong.

A `Flow`'s public names are what a handler uses; the run's bookkeeping (answers recorded, questions scheduled,
audit events) is a private `RunRecord` (`askback.core._flow_record`), read by `run` and `run_events`. `connect` lives
in `askback.core.connecting`, `approve` in `askback.core.approving`. `NeedInput` and `FlowEnded` derive from
`BaseException` so that a handler's own `except Exception` cannot swallow them by accident.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, cast, overload

from mcp_types import ClientCapabilities, ElicitResult

from askback.core import approving, connecting
from askback.core._flow_record import FlowEnded, FlowEvent, NeedInput, RunRecord
from askback.core.answers import Accepted, Cancelled, Declined, Outcome
from askback.core.approving import Approval, ApprovalsPort, Approved
from askback.core.caller import Caller
from askback.core.capabilities import declares
from askback.core.connecting import AccountLike, AccountsPort, ConnectMode, NotReady, Readiness, readiness
from askback.core.questions import AnswerRejected, Argument, Confirm, Default, Link, Question, digest
from askback.core.state import FlowState, RecordedAnswer
from askback.core.text import unstorable_text
from askback.errors import ArgumentRequiredError, DefinitionError, MissingCapabilityError

__all__ = [
    "AccountLike",
    "AccountsPort",
    "Asked",
    "ConnectMode",
    "Ended",
    "Flow",
    "FlowEnded",
    "FlowEvent",
    "NeedInput",
    "NotReady",
    "Readiness",
    "Refused",
    "Returned",
    "RunOutcome",
    "as_json",
    "ask_first",
    "readiness",
    "run",
    "run_events",
]

T = TypeVar("T")
R = TypeVar("R")


def as_json(value: Any) -> Any:
    """`value` as it reads back from JSON: an effect's outcome is the same on its first run and on a replay."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise DefinitionError(
            f"an effect's outcome must be JSON-serialisable (str, number, bool, None, list, dict); got "
            f"{type(value).__name__}"
        ) from exc


# --- the handler's view --------------------------------------------------------------------------------------


EffectRunner = Callable[[str, str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class Flow:
    """The handler's handle on the conversation with the user, for one run of one round."""

    def __init__(
        self,
        *,
        tool: str,
        arguments: Mapping[str, Any],
        capabilities: ClientCapabilities | None,
        state: FlowState | None,
        responses: Mapping[str, Any] | None,
        now: float,
        run_effect: EffectRunner | None = None,
        accounts: AccountsPort | None = None,
        new_id: Callable[[], str] | None = None,
        caller: Caller | None = None,
        connect_mode: ConnectMode = "ask",
        approvals: ApprovalsPort | None = None,
        in_task: bool = False,
    ) -> None:
        self.tool = tool
        self.arguments = dict(arguments)
        self.capabilities = capabilities
        self.caller = caller
        """Who is calling (`askback.core.caller.Caller`: the principal and the token's scopes); `None` when the
        request was not authenticated."""
        self._run_effect = run_effect
        self._accounts = accounts
        self._approvals = approvals
        self._connect_mode: ConnectMode = connect_mode
        # A task's run: a pending approval makes the task wait `working`, whatever the client renders.
        self._in_task = in_task
        self._round = RunRecord(state, responses or {}, now, new_id, recorded=dict(state.answers) if state else {})

    # -- properties --

    @property
    def flow_id(self) -> str | None:
        state = self._round.state
        return state.flow_id if state else None

    @property
    def round(self) -> int:
        """How many rounds of questions this flow has already asked (0 on the first call)."""
        state = self._round.state
        return state.round if state else 0

    # -- asking --

    @overload
    def ask(self, question: Confirm, *, message: str | None = None, expect: str | None = None) -> bool: ...
    @overload
    def ask(self, question: Question[T], *, message: str | None = None, expect: str | None = None) -> T: ...

    def ask(self, question: Question[Any], *, message: str | None = None, expect: str | None = None) -> Any:
        """The accepted answer to `question`; a decline or cancel ends the call with the question's message."""
        if isinstance(question, Link):
            raise DefinitionError(
                f"question {question.key!r} is a link: use flow.link(question, url=..., done=...), which checks real "
                "state, because an accepted link only means the user agreed to open it",
                when="asked",
            )
        return self._value(question, self._outcome(question, message=message, url=None, expect=expect, batch=False))

    def ask_all(self, *questions: Question[Any]) -> tuple[Any, ...]:
        """Several independent questions in one round; the accepted answers in order."""
        for q in questions:
            if isinstance(q, Link) or (isinstance(q, Confirm) and q.typed):
                raise DefinitionError(
                    f"question {q.key!r} cannot go in ask_all: ask a typed confirmation with flow.ask(q, expect=...) "
                    "and a link with flow.link(q, url=..., done=...)",
                    when="asked",
                )
        outcomes = [self._outcome(q, message=None, url=None, expect=None, batch=True) for q in questions]
        if self._round.pending:
            raise NeedInput
        return tuple(self._value(q, o) for q, o in zip(questions, outcomes, strict=True))

    def outcome(self, question: Question[T], *, message: str | None = None, expect: str | None = None) -> Outcome[T]:
        """The full outcome (accepted, declined or cancelled), for handlers that branch on it."""
        result = self._outcome(question, message=message, url=None, expect=expect, batch=False)
        assert result is not None
        return result

    def link(self, question: Link, *, url: str | None = None, done: bool, message: str | None = None) -> None:
        """Send the user to `url` until `done` is true. `done` must come from real state (an account's status, a
        payment's record), because an accepted link only says the user agreed to open it."""
        record = self._round
        if done:
            response = record.responses.get(question.key)
            if isinstance(response, ElicitResult) and (record.state is None or question.key in record.state.asked):
                # The work is done; still record that the user answered the link, for the audit trail.
                record.events.append(FlowEvent("answered", question.key, "url", action=response.action))
            return
        result = self._outcome(question, message=message, url=url, expect=None, batch=False, fresh_only=True)
        if isinstance(result, Accepted):
            # Accepted but the real state says it is not done yet: ask again, saying so.
            params = question.render(message=message, url=url)
            note = "That does not seem to be finished yet. " + params["message"]
            record.schedule(question, {**params, "message": note}, base=digest(params))
            raise NeedInput
        self._value(question, result)

    # -- connected accounts --

    async def connect(self, connection: str, *, label: str | None = None, message: str | None = None) -> Any:
        """The caller's ACTIVE account on `connection`, read for real on every round (an account in ERROR is first
        tried again: refreshed, or the provider's error raised while it cannot be reached); otherwise a URL-mode
        question linking to their authorization page. An `accept` while the account is still not ACTIVE completes with a
        `not_connected` message (never another link); decline and cancel complete. With several ACTIVE accounts
        and no `label`, the person is asked which one (a choice). A client that cannot show a link gets -32021
        naming `elicitation.url`: a credential is never asked for in a form.

        Run by the META exposure's `execute_tool` (the `report` mode), an account that is not ready ends the run
        with `NotReady` instead of a link: the call answers `not_connected` or `reauth_needed` naming `connection`."""
        return await connecting.connect(
            self._round,
            self._accounts,
            self.capabilities,
            self.ask,
            connection,
            label=label,
            message=message,
            mode=self._connect_mode,
        )

    # -- approvals --

    async def approve(self, approval: Approval, *, summary: str | None = None) -> Approved:
        """Wait until this exact call (the tool, its arguments, the answers read so far, the caller and `approval`'s
        policy) is approved by the people `approval` names, then return `Approved`; call `flow.once` after it for
        the effect, which then runs once. The request is read for real on every round: while it is pending, a
        URL-mode question links to its status page (an accept only means the page was opened: the request is read
        again, and the link asked again while it is still pending); a decline or cancel withdraws it. A denied,
        expired or withdrawn request completes the call saying so (nothing was done). A client without URL mode,
        or the META exposure's `execute_tool`, gets a completed result `{"status": "approval_pending", ...}` with
        the request's id and expiry, never an error. In a task, the task waits `working` for the decision instead,
        with or without URL mode, and goes on by itself. `summary`: one line for the approvers' page."""
        return await approving.approve(
            self._round,
            self._approvals,
            self.capabilities,
            approval,
            tool=self.tool,
            arguments=self.arguments,
            caller=self.caller,
            summary=summary,
            mode=self._connect_mode,
            in_task=self._in_task,
        )

    # -- effects --

    async def once(self, name: str, fn: Callable[[], Awaitable[R]]) -> R:
        """Run `fn` at most once for this flow, however often the final round is replayed or retried, and on
        whichever instance. A replay gets the outcome recorded by the first run. Call it after the last question:
        everything before the input point reruns every round."""
        record = self._round
        if record.state is None:
            if record.unsealed_answers:
                # Answers that came without askback's sealed state have no flow to deduplicate on: ask again.
                for key, (params, mode) in record.seen.items():
                    record.pending[key] = params
                    record.pending_modes[key] = mode
                    record.pending_digest[key] = digest(params)
                    record.events.append(FlowEvent("ignored", key, mode, detail="answer without askback state"))
                record.recorded = {}
                raise NeedInput
            return cast(R, as_json(await fn()))
        if self._run_effect is None:
            return cast(R, as_json(await fn()))
        result: R = await self._run_effect(record.state.flow_id, name, fn)
        return result

    # -- internals --

    def _value(self, question: Question[Any], outcome: Outcome[Any] | None) -> Any:
        if outcome is None:
            raise NeedInput
        if isinstance(outcome, Accepted):
            return outcome.value
        if isinstance(outcome, Declined):
            raise FlowEnded(question.on_decline or f"Cancelled: you declined ({question.label}).", "declined")
        raise FlowEnded(question.on_cancel or f"Cancelled: the question was dismissed ({question.label}).", "cancelled")

    def _outcome(
        self,
        question: Question[Any],
        *,
        message: str | None,
        url: str | None,
        expect: str | None,
        batch: bool,
        fresh_only: bool = False,
    ) -> Outcome[Any] | None:
        key = question.key
        if isinstance(question, Confirm) and question.typed and expect is None:
            # Caught before the question goes out: no answer the person could type would ever be checked.
            raise DefinitionError(
                f"question {key!r} is a typed confirmation and was asked without expect=: pass the exact value the "
                f"person must type, as in flow.ask(question, expect=project.name)",
                when="asked",
            )
        record = self._round
        params, q = question.shown(message=message, url=url)
        record.seen[key] = (params, question.mode)

        recorded = record.recorded.get(key)
        if recorded is not None and recorded.q == q and not fresh_only:
            return self._read(question, recorded.action, recorded.content, expect)

        response = record.responses.get(key)
        asked_here = record.state is None or record.state.asked.get(key) == q
        if response is not None and asked_here:
            outcome = self._take(question, response, params, q, expect)
            if outcome is not None:
                return outcome
        elif response is not None:
            record.events.append(FlowEvent("ignored", key, question.mode, detail="not the question asked last round"))

        if not declares(self.capabilities, question.mode):
            return self._fallback(question)
        if key not in record.pending:
            record.schedule(question, params)
        if not batch:
            raise NeedInput
        return None

    def _take(
        self, question: Question[Any], response: Any, params: dict[str, Any], q: str, expect: str | None
    ) -> Outcome[Any] | None:
        key = question.key
        record = self._round
        if not isinstance(response, ElicitResult):
            record.events.append(FlowEvent("invalid", key, question.mode, detail="not an elicitation result"))
            return None
        content = response.content if response.action == "accept" and question.mode == "form" else None
        try:
            # Only the fields the form asked for are kept (below), so only those need to be storable.
            props = params.get("requestedSchema", {}).get("properties", {})
            problem = unstorable_text({k: v for k, v in content.items() if k in props} if content else None)
            if problem is not None:
                raise AnswerRejected(problem)
            outcome = self._read(question, response.action, content, expect)
        except AnswerRejected as exc:
            record.events.append(FlowEvent("invalid", key, question.mode, action="accept", detail=str(exc)))
            note = f"That answer was not accepted ({exc}). Please answer again. {params['message']}"
            reasked = {**params, "message": note}
            if declares(self.capabilities, question.mode):
                record.schedule(question, reasked, base=q)
            return None
        if question.mode == "form" and content is not None:
            # Keep only the fields the form asked for: nothing else rides the state or the audit trail.
            props = params.get("requestedSchema", {}).get("properties", {})
            content = {k: v for k, v in content.items() if k in props}
        record.recorded[key] = RecordedAnswer(response.action, content, q)
        if record.state is None:
            record.unsealed_answers = True
        record.events.append(FlowEvent("answered", key, question.mode, action=response.action, content=content))
        return outcome

    def _read(
        self, question: Question[Any], action: str, content: Mapping[str, Any] | None, expect: str | None
    ) -> Outcome[Any]:
        if action == "decline":
            return Declined()
        if action == "cancel":
            return Cancelled()
        return Accepted(question.read(content, expect=expect))

    def _fallback(self, question: Question[Any]) -> Outcome[Any]:
        fb = question.fallback
        if isinstance(fb, Default):
            self._round.events.append(FlowEvent("fallback", question.key, question.mode, detail="default used"))
            return Accepted(fb.value)
        if isinstance(fb, Argument):
            raise ArgumentRequiredError(question.fallback_error())
        mode = question.mode
        raise MissingCapabilityError({"elicitation": {mode: {}}})


# --- the outcome of one run ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Returned:
    """The handler returned `value`."""

    value: Any
    flow_id: str | None
    round: int
    events: tuple[FlowEvent, ...]
    kind: Literal["returned"] = "returned"


@dataclass(frozen=True)
class Asked:
    """The handler needs answers: `requests` go out, sealed with `next_state`."""

    requests: Mapping[str, dict[str, Any]]
    modes: tuple[str, ...]
    next_state: FlowState
    flow_id: str | None
    round: int
    events: tuple[FlowEvent, ...]
    kind: Literal["asked"] = "asked"


@dataclass(frozen=True)
class Ended:
    """The user declined or cancelled (or an approval was denied, ...): the call completes with `text`, and
    `structured` as its structured content when the flow says more (a pending approval's status)."""

    text: str
    reason: str
    flow_id: str | None
    round: int
    events: tuple[FlowEvent, ...]
    structured: Mapping[str, Any] | None = None
    kind: Literal["ended"] = "ended"


@dataclass(frozen=True)
class Refused:
    """A question could not be asked on this request and has no usable fallback."""

    error: ArgumentRequiredError | MissingCapabilityError
    flow_id: str | None
    round: int
    events: tuple[FlowEvent, ...]
    kind: Literal["refused"] = "refused"


RunOutcome = Returned | Asked | Ended | Refused


async def run(flow: Flow, handler: Callable[[], Awaitable[Any]], *, new_id: Callable[[], str]) -> RunOutcome:
    """Run the handler once through `flow` and say how the run ended. Any other exception the handler raises goes
    through (its events stay readable with `run_events(flow)`)."""
    flow_id, round_ = flow.flow_id, flow.round
    record = flow._round
    try:
        value = await handler()
    except NeedInput:
        modes = tuple(sorted(set(record.pending_modes.values())))
        nxt = record.next_state(new_id=new_id)
        return Asked(record.input_requests(), modes, nxt, flow_id, round_, tuple(record.events))
    except FlowEnded as ended:
        return Ended(ended.text, ended.reason, flow_id, round_, tuple(record.events), ended.structured)
    except (ArgumentRequiredError, MissingCapabilityError) as exc:
        return Refused(exc, flow_id, round_, tuple(record.events))
    return Returned(value, flow_id, round_, tuple(record.events))


def run_events(flow: Flow) -> tuple[FlowEvent, ...]:
    """What the audit trail should know of a run the handler ended with its own exception."""
    return tuple(flow._round.events)


async def ask_first(
    flow: Flow, questions: Sequence[Question[Any]], name: str, start: Callable[[FlowState], Awaitable[R]]
) -> R:
    """The round of a task tool's `ask_first` questions, before its task exists: `questions` in one round (as
    `ask_all` asks them, validated and re-asked alike), then `start(state)` run once for this flow as its effect
    `name` (`flow.once`: never on answers that came without askback's sealed state, which are asked again). `state`
    is what the tool's handler starts from in the task: this flow, its round, and every answer (a decline or a cancel
    is an answer too, for that handler to read with `flow.ask` or `flow.outcome`)."""
    for question in questions:
        flow._outcome(question, message=None, url=None, expect=None, batch=True)
    record = flow._round
    if record.pending:
        raise NeedInput

    def begin() -> Awaitable[R]:
        base = record.state
        started, round_ = (base.started, base.round) if base else (record.now, 0)
        return start(FlowState(record.link_flow_id(), started, round_, answers=dict(record.recorded)))

    return await flow.once(name, begin)
