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

`NeedInput` and `FlowEnded` derive from `BaseException` so that a handler's own `except Exception` cannot swallow
them by accident.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar, cast, overload

from mcp_types import ClientCapabilities, ElicitResult

from askback.core.answers import Accepted, Cancelled, Declined, Outcome
from askback.core.capabilities import declares
from askback.core.questions import Argument, Choice, Confirm, Default, InvalidAnswer, Link, Question, digest
from askback.core.state import FlowState, Recorded
from askback.core.text import unstorable_text
from askback.errors import ArgumentRequiredError, DefinitionError, MissingCapabilityError

__all__ = [
    "AccountLike",
    "AccountsPort",
    "Asked",
    "Ended",
    "Flow",
    "FlowEnded",
    "FlowEvent",
    "NeedInput",
    "Refused",
    "Returned",
    "RunOutcome",
    "as_json",
    "run",
]

T = TypeVar("T")
R = TypeVar("R")


# --- control flow out of the handler ---------------------------------------------------------------------------


class NeedInput(BaseException):
    """The run stops here: these questions go to the user."""


class FlowEnded(BaseException):
    """The user declined or cancelled (or the flow ran out of time or rounds): complete with this text."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(text)
        self.text = text
        self.reason = reason


def as_json(value: Any) -> Any:
    """`value` as it reads back from JSON: an effect's outcome is the same on its first run and on a replay."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise DefinitionError(
            f"an effect's outcome must be JSON-serialisable (str, number, bool, None, list, dict); got "
            f"{type(value).__name__}"
        ) from exc


@dataclass(frozen=True)
class FlowEvent:
    """Something the audit trail should know about this run."""

    kind: Literal["answered", "invalid", "fallback", "ignored"]
    key: str
    mode: str
    action: str | None = None
    content: Mapping[str, Any] | None = None
    detail: str | None = None


# --- the handler's view --------------------------------------------------------------------------------------


EffectRunner = Callable[[str, str, Callable[[], Awaitable[Any]]], Awaitable[Any]]


class AccountLike(Protocol):
    """What the flow needs to know of a connected account: which one it is and its real status."""

    @property
    def label(self) -> str: ...
    @property
    def status(self) -> str: ...


class AccountsPort(Protocol):
    """Connected accounts, as seen by one caller (the principal is the port's): provided by the accounts product."""

    async def accounts(self, connection: str) -> Sequence[AccountLike]:
        """The caller's accounts on `connection`, with their real status."""
        ...

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        """A fresh single-use authorization link for the caller's account `label` on `connection`."""
        ...

    async def recover(self, account: AccountLike) -> AccountLike:
        """An account in ERROR tried again (its credential refreshed): the account as it then is (ACTIVE when that
        worked, EXPIRED when the provider refused the grant, unchanged when there is nothing to try with). Raises
        the provider's error while it cannot be reached: an outage is not a reason to ask the person again."""
        ...

    def handle(self, account: AccountLike) -> Any:
        """What the handler receives for an ACTIVE account (it uses the account without seeing its credential)."""
        ...

    async def aclose(self) -> None:
        """Release what the handles of this round hold (their HTTP clients); called when the round ends."""
        ...


_ACTIVE = "ACTIVE"
_ERROR = "ERROR"


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
    ) -> None:
        self.tool = tool
        self.arguments = dict(arguments)
        self.capabilities = capabilities
        self.state = state
        self.now = now
        self._responses: Mapping[str, Any] = responses or {}
        self._run_effect = run_effect
        self._accounts = accounts
        self._new_id = new_id
        self._minted: str | None = None
        self.recorded: dict[str, Recorded] = dict(state.answers) if state else {}
        self.pending: dict[str, dict[str, Any]] = {}
        self.pending_modes: dict[str, str] = {}
        self.events: list[FlowEvent] = []
        self._seen: dict[str, tuple[dict[str, Any], str]] = {}
        self._pending_digest: dict[str, str] = {}
        self._unsealed_answers = False

    # -- properties --

    @property
    def flow_id(self) -> str | None:
        return self.state.flow_id if self.state else None

    @property
    def round(self) -> int:
        """How many rounds of questions this flow has already asked (0 on the first call)."""
        return self.state.round if self.state else 0

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
                "state, because an accepted link only means the user agreed to open it"
            )
        return self._value(question, self._outcome(question, message=message, url=None, expect=expect, batch=False))

    def ask_all(self, *questions: Question[Any]) -> tuple[Any, ...]:
        """Several independent questions in one round; the accepted answers in order."""
        for q in questions:
            if isinstance(q, Link) or (isinstance(q, Confirm) and q.typed):
                raise DefinitionError(
                    f"question {q.key!r} cannot go in ask_all: ask a typed confirmation with flow.ask(q, expect=...) "
                    "and a link with flow.link(q, url=..., done=...)"
                )
        outcomes = [self._outcome(q, message=None, url=None, expect=None, batch=True) for q in questions]
        if self.pending:
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
        if done:
            response = self._responses.get(question.key)
            if isinstance(response, ElicitResult) and (self.state is None or question.key in self.state.asked):
                # The work is done; still record that the user answered the link, for the audit trail.
                self.events.append(FlowEvent("answered", question.key, "url", action=response.action))
            return
        result = self._outcome(question, message=message, url=url, expect=None, batch=False, fresh_only=True)
        if isinstance(result, Accepted):
            # Accepted but the real state says it is not done yet: ask again, saying so.
            params = question.render(message=message, url=url)
            note = "That does not seem to be finished yet. " + params["message"]
            self._schedule(question, {**params, "message": note}, base=digest(params))
            raise NeedInput
        self._value(question, result)

    # -- connected accounts --

    async def connect(self, connection: str, *, label: str | None = None, message: str | None = None) -> Any:
        """The caller's ACTIVE account on `connection`, read for real on every round (an account in ERROR is first
        tried again: refreshed, or the provider's error raised while it cannot be reached); otherwise a URL-mode
        question linking to their authorization page. An `accept` while the account is still not ACTIVE completes with a
        `not_connected` message (never another link); decline and cancel complete. With several ACTIVE accounts
        and no `label`, the person is asked which one (a choice). A client that cannot show a link gets -32021
        naming `elicitation.url`: a credential is never asked for in a form."""
        if self._accounts is None:
            raise DefinitionError(
                "flow.connect needs connected accounts on this server: enable them with "
                "askback.accounts.enable_accounts(app, ...)"
            )
        key = _connect_key(connection)
        found = list(await self._accounts.accounts(connection))
        active = [a for a in found if a.status == _ACTIVE]
        if label is None and len(active) > 1:
            labels = sorted(a.label or "default" for a in active)
            chosen = self.ask(
                Choice(
                    key=f"{key}.which",
                    message=message or f"Which {connection} account should be used?",
                    options=labels,
                    field="account",
                    title="Account",
                )
            )
            label = "" if chosen == "default" and "default" not in {a.label for a in active} else chosen
        wanted = next(
            (a for a in found if a.label == (label or "")),
            active[0] if label is None and active else None,
        )
        if wanted is not None and wanted.status == _ERROR:
            # A provider that could not be reached is tried again, not the person: only the provider's refusal of
            # the grant (the account then EXPIRED) or nothing to refresh with leads to a new link.
            wanted = await self._accounts.recover(wanted)
        response = self._responses.get(key)
        answered_here = response is not None and (self.state is None or key in self.state.asked)
        if wanted is not None and wanted.status == _ACTIVE:
            if answered_here and isinstance(response, ElicitResult):
                self.events.append(FlowEvent("answered", key, "url", action=response.action))
            return self._accounts.handle(wanted)
        status = wanted.status if wanted is not None else None
        if answered_here and isinstance(response, ElicitResult):
            self.events.append(FlowEvent("answered", key, "url", action=response.action))
            if response.action == "decline":
                raise FlowEnded(f"Cancelled: you did not connect your {connection} account.", "declined")
            if response.action == "cancel":
                raise FlowEnded(f"Cancelled: connecting your {connection} account was dismissed.", "cancelled")
            raise FlowEnded(
                f"Not connected: your {connection} account is still not connected"
                + (f" (it is {status})" if status else "")
                + ", so nothing was done. Call the tool again for a new link.",
                "not_connected",
            )
        if not declares(self.capabilities, "url"):
            raise MissingCapabilityError(
                {"elicitation": {"url": {}}},
                f"This tool needs your {connection} account, which is connected through a link: declare the "
                "elicitation.url capability (2026-07-28: in the request's _meta "
                "io.modelcontextprotocol/clientCapabilities), or connect the account elsewhere first.",
            )
        url = await self._accounts.link(connection, label or "", self._link_flow_id())
        again = status in ("EXPIRED", "REVOKED", "ERROR")
        text = message or (
            f"Your {connection} account needs to be connected again: open the link, sign in, then come back."
            if again
            else f"Connect your {connection} account to continue: open the link, sign in, then come back."
        )
        question = Link(key=key, message=text)
        self._schedule(question, question.render(message=text, url=url))
        raise NeedInput

    def _link_flow_id(self) -> str:
        """The id of this flow, minted now when the flow has not asked before (the next state carries it)."""
        if self.state is not None:
            return self.state.flow_id
        if self._minted is None:
            if self._new_id is None:
                raise DefinitionError("flow.connect outside a server round: the flow has no id to bind a link to")
            self._minted = self._new_id()
        return self._minted

    # -- effects --

    async def once(self, name: str, fn: Callable[[], Awaitable[R]]) -> R:
        """Run `fn` at most once for this flow, however often the final round is replayed or retried, and on
        whichever instance. A replay gets the outcome recorded by the first run. Call it after the last question:
        everything before the input point reruns every round."""
        if self.state is None:
            if self._unsealed_answers:
                # Answers that came without askback's sealed state have no flow to deduplicate on: ask again.
                for key, (params, mode) in self._seen.items():
                    self.pending[key] = params
                    self.pending_modes[key] = mode
                    self._pending_digest[key] = digest(params)
                    self.events.append(FlowEvent("ignored", key, mode, detail="answer without askback state"))
                self.recorded = {}
                raise NeedInput
            return cast(R, as_json(await fn()))
        if self._run_effect is None:
            return cast(R, as_json(await fn()))
        result: R = await self._run_effect(self.state.flow_id, name, fn)
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

    def _schedule(self, question: Question[Any], params: dict[str, Any], *, base: str | None = None) -> None:
        """Ask `params` this round. `base` is the digest of the question without any note added to its message
        (a re-ask says what was wrong), which is what the answer is matched against next round."""
        if question.key in self.pending and self.pending[question.key] != params:
            raise DefinitionError(f"two different questions use the key {question.key!r} in one round")
        self.pending[question.key] = params
        self.pending_modes[question.key] = question.mode
        self._pending_digest[question.key] = base or digest(params)

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
        params, q = question.shown(message=message, url=url)
        self._seen[key] = (params, question.mode)

        recorded = self.recorded.get(key)
        if recorded is not None and recorded.q == q and not fresh_only:
            return self._read(question, recorded.action, recorded.content, expect)

        response = self._responses.get(key)
        asked_here = self.state is None or self.state.asked.get(key) == q
        if response is not None and asked_here:
            outcome = self._take(question, response, params, q, expect)
            if outcome is not None:
                return outcome
        elif response is not None:
            self.events.append(FlowEvent("ignored", key, question.mode, detail="not the question asked last round"))

        if not declares(self.capabilities, question.mode):
            return self._fallback(question)
        if key not in self.pending:
            self._schedule(question, params)
        if not batch:
            raise NeedInput
        return None

    def _take(
        self, question: Question[Any], response: Any, params: dict[str, Any], q: str, expect: str | None
    ) -> Outcome[Any] | None:
        key = question.key
        if not isinstance(response, ElicitResult):
            self.events.append(FlowEvent("invalid", key, question.mode, detail="not an elicitation result"))
            return None
        content = response.content if response.action == "accept" and question.mode == "form" else None
        try:
            # Only the fields the form asked for are kept (below), so only those need to be storable.
            props = params.get("requestedSchema", {}).get("properties", {})
            problem = unstorable_text({k: v for k, v in content.items() if k in props} if content else None)
            if problem is not None:
                raise InvalidAnswer(problem)
            outcome = self._read(question, response.action, content, expect)
        except InvalidAnswer as exc:
            self.events.append(FlowEvent("invalid", key, question.mode, action="accept", detail=str(exc)))
            note = f"That answer was not accepted ({exc}). Please answer again. {params['message']}"
            reasked = {**params, "message": note}
            if declares(self.capabilities, question.mode):
                self._schedule(question, reasked, base=q)
            return None
        if question.mode == "form" and content is not None:
            # Keep only the fields the form asked for: nothing else rides the state or the audit trail.
            props = params.get("requestedSchema", {}).get("properties", {})
            content = {k: v for k, v in content.items() if k in props}
        self.recorded[key] = Recorded(response.action, content, q)
        if self.state is None:
            self._unsealed_answers = True
        self.events.append(FlowEvent("answered", key, question.mode, action=response.action, content=content))
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
            self.events.append(FlowEvent("fallback", question.key, question.mode, detail="default used"))
            return Accepted(fb.value)
        if isinstance(fb, Argument):
            raise ArgumentRequiredError(question.fallback_error())
        mode = question.mode
        raise MissingCapabilityError({"elicitation": {mode: {}}})

    # -- after the run --

    def next_state(self, *, new_id: Callable[[], str]) -> FlowState:
        """The state to seal into the `input_required` result that carries `self.pending` (a new flow's id comes
        from `new_id`)."""
        base = self.state
        return FlowState(
            flow_id=base.flow_id if base else (self._minted or new_id()),
            started=base.started if base else self.now,
            round=(base.round if base else 0) + 1,
            answers=dict(self.recorded),
            asked=dict(self._pending_digest),
        )

    def input_requests(self) -> dict[str, dict[str, Any]]:
        return {key: {"method": "elicitation/create", "params": params} for key, params in self.pending.items()}


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
    """The user declined or cancelled: the call completes with `text`."""

    text: str
    reason: str
    flow_id: str | None
    round: int
    events: tuple[FlowEvent, ...]
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
    through (its events stay on `flow.events`)."""
    flow_id, round_ = flow.flow_id, flow.round
    try:
        value = await handler()
    except NeedInput:
        modes = tuple(sorted(set(flow.pending_modes.values())))
        nxt = flow.next_state(new_id=new_id)
        return Asked(flow.input_requests(), modes, nxt, flow_id, round_, tuple(flow.events))
    except FlowEnded as ended:
        return Ended(ended.text, ended.reason, flow_id, round_, tuple(flow.events))
    except (ArgumentRequiredError, MissingCapabilityError) as exc:
        return Refused(exc, flow_id, round_, tuple(flow.events))
    return Returned(value, flow_id, round_, tuple(flow.events))


def _connect_key(connection: str) -> str:
    return "connect." + "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in connection)[:50]
