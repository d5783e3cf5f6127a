"""`flow.approve`: a write that waits until someone else, allowed to, has approved this exact call.

An `Approval` is declared once, beside the tool (like a `Form` or a `Confirm`): who may approve (principals, and
groups read from the approver's sign-in), how many distinct approvers it takes, how long a request stays open,
whether the requester may approve their own request (no by default), and which arguments the approvers' page masks.

What is approved is one exact call: `approval_digest` binds the decision to the tool, its canonical arguments, the
answers given so far, the requester (the principal, which carries its issuer) and the policy. Changing any of them is
a new request; a pending request with the same digest is reused.

The approvals product provides the port (`ApprovalsPort`, one per caller, as the connected accounts do); the core
(`approve`, what `Flow.approve` runs) decides what the round does with what the port reports: go on when approved
(`Approved`), complete when denied, expired or withdrawn, and while pending ask a URL-mode question linking to the
request's status page (a client without URL mode gets a completed result saying the request is pending, with its id
and expiry: it has nothing to render, `ApprovalPending`). An answer to that link only says the page was opened: the
next round reads the request again, the one the link showed (named in the sealed state beside the link's key).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

from mcp_types import ClientCapabilities, ElicitResult, ToolAnnotations

from askback.core._flow_record import FlowEnded, FlowEvent, NeedInput, RunRecord
from askback.core.capabilities import declares
from askback.core.questions import Link
from askback.core.state import FlowState, answers_to_json
from askback.core.terminal_text import for_terminal, shorten
from askback.core.text import name_problem
from askback.errors import DefinitionError, LimitReachedError, ToolError

if TYPE_CHECKING:
    from askback.core.caller import Caller
    from askback.core.connecting import ConnectMode

__all__ = [
    "MAX_APPROVAL_TTL",
    "MIN_APPROVAL_TTL",
    "Approval",
    "ApprovalAsk",
    "ApprovalGate",
    "ApprovalPending",
    "ApprovalState",
    "ApprovalStatus",
    "ApprovalsPort",
    "Approved",
    "approval_digest",
    "approval_key",
    "approval_links",
    "approve",
    "gate_for",
    "may_destroy",
    "shown_request",
]

# An approval request stays open between a minute and thirty days.
MIN_APPROVAL_TTL = 60.0
MAX_APPROVAL_TTL = 30 * 86400.0
_MAX_NAMES = 64
_MAX_TITLE = 200
# The status link's wire key is `askback.approval.<key>`, and a question's key is at most 64 characters.
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,46}$")

ApprovalStatus = Literal["pending", "approved", "denied", "expired", "withdrawn", "consumed"]
"""Where an approval request stands. `approved` becomes `consumed` when the effect it gates runs (once); `denied`,
`expired` and `withdrawn` are final and mean the effect did not run, and never will."""


def _names(value: Any, what: str, key: str) -> frozenset[str]:
    if isinstance(value, str):
        raise DefinitionError(f"approval {key!r}: {what} is a collection of names, not one string ({value!r})")
    names = frozenset(value)
    if len(names) > _MAX_NAMES:
        raise DefinitionError(f"approval {key!r}: at most {_MAX_NAMES} {what}")
    for name in names:
        problem = name_problem(name, what=f"a name in {what}", limit=255) if isinstance(name, str) else "not a string"
        if problem is not None:
            raise DefinitionError(f"approval {key!r}: {problem}")
    return names


@dataclass(frozen=True)
class Approval:
    """Who must approve a call before the handler goes on (see the module's docstring).

    - `key`: stable, as a question's key (the wire key of the status link, and the name in the audit trail);
    - `title`: what the approvers' list and page call the request (one line);
    - `principals`: people who may approve, as principals (`askback.core.caller.principal_of`);
    - `groups`: groups (or roles) that may approve, read from the approver's sign-in (the claim the approvals'
      setup names, `groups` by default);
    - `required`: how many distinct approvers it takes (N of M);
    - `ttl`: how long a request stays open, in seconds;
    - `self_approval`: whether the requester may count as one of the approvers (no by default);
    - `hidden`: arguments the approvers' page masks (still part of what is approved)."""

    key: str
    title: str
    principals: frozenset[str] = field(default_factory=frozenset)
    groups: frozenset[str] = field(default_factory=frozenset)
    required: int = 1
    ttl: float = 3600.0
    self_approval: bool = False
    hidden: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise DefinitionError(
                f"an approval's key is a letter then up to 46 letters, digits, '_', '.' or '-'; got {self.key!r}"
            )
        problem = name_problem(self.title, what="the title", limit=_MAX_TITLE) if isinstance(self.title, str) else None
        if not isinstance(self.title, str) or not self.title.strip() or problem is not None:
            raise DefinitionError(f"approval {self.key!r}: {problem or 'the title is one line of text'}")
        object.__setattr__(self, "principals", _names(self.principals, "principals", self.key))
        object.__setattr__(self, "groups", _names(self.groups, "groups", self.key))
        object.__setattr__(self, "hidden", _names(self.hidden, "hidden arguments", self.key))
        if not self.principals and not self.groups:
            raise DefinitionError(f"approval {self.key!r}: name who may approve (principals=..., groups=...)")
        if isinstance(self.required, bool) or not isinstance(self.required, int) or self.required < 1:
            raise DefinitionError(f"approval {self.key!r}: required is a whole number of approvers, at least 1")
        if not self.groups and self.required > len(self.principals):
            raise DefinitionError(
                f"approval {self.key!r}: {self.required} approvers are required but only {len(self.principals)} "
                "principals may approve"
            )
        if isinstance(self.ttl, bool) or not isinstance(self.ttl, int | float):
            raise DefinitionError(f"approval {self.key!r}: ttl is a number of seconds")
        if not MIN_APPROVAL_TTL <= float(self.ttl) <= MAX_APPROVAL_TTL:
            raise DefinitionError(
                f"approval {self.key!r}: a request stays open between {MIN_APPROVAL_TTL:.0f} seconds and 30 days "
                f"(ttl={self.ttl!r})"
            )
        object.__setattr__(self, "ttl", float(self.ttl))

    def policy(self) -> dict[str, Any]:
        """The policy as plain, canonical JSON: part of the digest, and stored with the request."""
        return {
            "key": self.key,
            "title": self.title,
            "principals": sorted(self.principals),
            "groups": sorted(self.groups),
            "required": self.required,
            "ttl": self.ttl,
            "self_approval": self.self_approval,
            "hidden": sorted(self.hidden),
        }


def approval_key(approval_key: str) -> str:
    """The wire key of the URL-mode question linking to an approval request's status page."""
    return f"askback.approval.{approval_key}"


def approval_digest(
    *,
    tool: str,
    arguments: Mapping[str, Any],
    answers: Mapping[str, Any],
    requester: str | None,
    policy: Mapping[str, Any],
) -> str:
    """The digest one exact call is approved under: the tool, its canonical arguments, the answers given so far, the
    requester (principal, issuer included) and the policy, as canonical JSON (sorted keys, no spaces), SHA-256."""
    body = {"tool": tool, "arguments": arguments, "answers": answers, "requester": requester, "policy": policy}
    raw = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class ApprovalAsk:
    """What a round asks the approvals product for: a request for this exact call (reused while one is pending).

    `arguments`, `answers` (the answers the handler read before it asked, as `askback.core.state.answers_to_json`
    writes them) and the policy are what `digest` was made from, so the product can check it; `flow_id` is the flow
    asking; `summary` one line the handler wrote for the approvers (capped, control characters written as escapes);
    `actors` the principals acting for the requester (the token's `act` chain, `Caller.actors`), who may not approve
    it either; `following` the id of the request this flow's status link showed last round (from the sealed state,
    so the client cannot choose it), whose end the flow must read."""

    approval: Approval
    tool: str
    arguments: Mapping[str, Any]
    answers: Mapping[str, Any]
    digest: str
    flow_id: str
    summary: str | None = None
    actors: tuple[str, ...] = ()
    following: str | None = None


@dataclass(frozen=True)
class ApprovalState:
    """An approval request as the store holds it now; `approval` its policy, where the port reports it (what a task
    waiting on the request says it waits for)."""

    id: str
    status: ApprovalStatus
    expires_at: float
    required: int
    approvers: tuple[str, ...] = ()
    denied_by: str | None = None
    reason: str | None = None
    status_url: str = ""
    approval: Approval | None = None


class ApprovalsPort(Protocol):
    """Approval requests, as seen by one caller (the principal is the port's): provided by the approvals product."""

    async def request(self, ask: ApprovalAsk) -> ApprovalState:
        """The request for `ask.digest`: the pending one (reused), else a new pending one. An approved request for the
        digest is consumed by `ask.flow_id` in the same transaction that reads it (status `consumed`, bound to this
        flow: a replay of this flow reads it again, another flow needs a request of its own). With `ask.following`,
        that request as it now is when it is this caller's and for `ask.digest` (approved: consumed as above; denied,
        expired or withdrawn: as it is, never replaced by a new one, so that the flow reports how it ended); an id
        that is not (another caller's, unknown) is ignored. Raises `askback.errors.LimitReachedError` when the caller
        holds too many pending requests."""
        ...

    async def withdraw(self, approval_id: str) -> ApprovalState:
        """The caller declined or cancelled: withdraw the request while it is pending; the request as it then is."""
        ...

    async def read(self, approval_id: str) -> ApprovalState | None:
        """The caller's request as it now is (expired when its time has passed), changing nothing else; `None` for an
        id that is not theirs, as for an unknown one. What a task waiting on the request checks."""
        ...


# --- what a round does with the request ------------------------------------------------------------------------

# What the approvals product says back (a denier's reason) is shown to the model and the person on one line.
_MAX_REASON = 300
_MAX_SUMMARY = 500
_FOLLOWING = "approval:"


def may_destroy(annotations: ToolAnnotations | None) -> bool:
    """Whether a tool may destroy, as MCP's tool annotations read with their defaults (`readOnlyHint` false,
    `destructiveHint` true): unless it says it is read-only or not destructive, a tool may, annotated or not."""
    if annotations is None:
        return True
    return annotations.read_only_hint is not True and annotations.destructive_hint is not False


@dataclass(frozen=True)
class ApprovalGate:
    """An app-wide rule that gates tools behind `approval` without code in their handlers: the tools named in
    `tools`, and with `destructive`, every tool that may destroy as MCP's annotations read with their defaults
    (`may_destroy`: all but those annotated `readOnlyHint: true` or `destructiveHint: false`, unannotated ones
    included), but those in `exempt` (tools that ask for approvals of their own). A gated tool's handler runs only
    once its call is approved (`flow.approve(approval)` before the handler's first line, so the approval covers the
    call's arguments; the handler's own questions come after it)."""

    approval: Approval
    tools: frozenset[str] = field(default_factory=frozenset)
    destructive: bool = False
    exempt: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        if not isinstance(self.approval, Approval):
            raise DefinitionError(f"an approval gate takes an askback.Approval, not {type(self.approval).__name__}")
        for name in ("tools", "exempt"):
            names = getattr(self, name)
            if isinstance(names, str):
                raise DefinitionError(
                    f"an approval gate's {name} are a collection of names, not one string ({names!r})"
                )
            object.__setattr__(self, name, frozenset(names))
        if not self.tools and not self.destructive:
            raise DefinitionError(
                f"the approval gate of {self.approval.key!r} gates nothing: name tools=... or set destructive=True"
            )

    def applies(self, tool: str, *, destructive: bool) -> bool:
        return tool in self.tools or (self.destructive and destructive and tool not in self.exempt)


def gate_for(gates: tuple[ApprovalGate, ...], tool: str, *, destructive: bool) -> Approval | None:
    """The approval the first gate that applies to `tool` asks for (`destructive`: it may destroy, `may_destroy`);
    `None` when no gate applies."""
    return next((g.approval for g in gates if g.applies(tool, destructive=destructive)), None)


@dataclass(frozen=True)
class Approved:
    """What `flow.approve` gives the handler once this exact call is approved: the request's id, who approved it,
    and its status (`consumed`: bound to this flow, whose `flow.once` runs the effect once)."""

    approval_id: str
    approvers: tuple[str, ...]
    status: ApprovalStatus


class ApprovalPending(FlowEnded):
    """The request is still pending and the client cannot show its status page (no URL-mode elicitation, or the META
    exposure's `execute_tool`): the run ends, and the call answers `report()` as an ordinary result, not an error."""

    def __init__(self, title: str, state: ApprovalState) -> None:
        needed = _still_needed(state)
        super().__init__(
            f"Waiting for approval: {title} needs {needed} more approval{'s' if needed != 1 else ''} (request "
            f"{state.id}, open until {_when(state.expires_at)}), so nothing was done yet. Call the tool again with "
            "the same arguments once it is approved.",
            "approval_pending",
            structured={
                "status": "approval_pending",
                "approval_id": state.id,
                "expires_at": state.expires_at,
                "approvals_needed": needed,
            },
        )
        self.approval_id = state.id
        self.expires_at = state.expires_at
        self.approvals_needed = needed

    def report(self) -> dict[str, Any]:
        """What the call answers, as structured content."""
        return dict(self.structured or {})


def shown_request(asked: Mapping[str, str], key: str) -> str | None:
    """The id of the request the status link under `key` showed, from a flow state's `asked` (what the sealed state,
    or a task's row, keeps beside the link's key); `None` when that key is not such a link."""
    shown = asked.get(key)
    return shown.removeprefix(_FOLLOWING) if shown and shown.startswith(_FOLLOWING) else None


def approval_links(asked: Mapping[str, object], state: FlowState) -> dict[str, str] | None:
    """The requests a run's questions wait on, by the flow's question key, when every question it asks (`asked`, by
    key) is an approval's status link and `state` (the flow's next state) names the request each one shows; `None`
    otherwise (the task then waits for answers, as any task does)."""
    if not asked:
        return None
    found: dict[str, str] = {}
    for key in asked:
        approval_id = shown_request(state.asked, key) if key.startswith(approval_key("")) else None
        if not approval_id:
            # An empty id would not count as waiting on a request (`TaskRecord.awaited_approvals`).
            return None
        found[key] = approval_id
    return found


def _still_needed(state: ApprovalState) -> int:
    """How many more distinct approvers the request needs."""
    return max(state.required - len(state.approvers), 0)


def _when(at: float) -> str:
    """A time as people read it in a message (UTC, to the minute)."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _one_line(text: str, limit: int) -> str:
    """Text from outside (a denier's reason, a summary) as one line of at most `limit` characters, with every
    control, bidirectional or invisible character written as its escape."""
    return for_terminal(shorten(text.replace("\r", " "), limit))


async def approve(
    record: RunRecord,
    port: ApprovalsPort | None,
    capabilities: ClientCapabilities | None,
    approval: Approval,
    *,
    tool: str,
    arguments: Mapping[str, Any],
    caller: Caller | None,
    summary: str | None,
    mode: ConnectMode = "ask",
    in_task: bool = False,
) -> Approved:
    """What `Flow.approve` does (its docstring says what the handler sees). `in_task`: the round is a task's run,
    where a round whose only question is the status link waits `working` (the link is never shown to the client)."""
    if port is None:
        raise DefinitionError(
            "flow.approve needs approvals on this server: enable them by giving the app the approvals' extension "
            "(askback.approvals.setup.ApprovalsSetup, docs/approvals.md)"
        )
    if not isinstance(approval, Approval):
        raise DefinitionError(f"flow.approve takes an askback.Approval, not {type(approval).__name__}")
    # Only the answers the handler read before asking: a question asked after the approval is not part of it.
    answers = answers_to_json({k: v for k, v in record.recorded.items() if k in record.seen})
    requester = caller.principal if caller is not None else None
    key = approval_key(approval.key)
    # The status link asked last round names the request it showed, in the sealed state: follow that one.
    following = shown_request(record.state.asked, key) if record.state is not None else None
    try:
        found = approval_digest(
            tool=tool, arguments=arguments, answers=answers, requester=requester, policy=approval.policy()
        )
    except (TypeError, ValueError):
        raise ToolError("This call cannot be sent for approval: its arguments are not plain JSON.") from None
    ask = ApprovalAsk(
        approval=approval,
        tool=tool,
        arguments=dict(arguments),
        answers=answers,
        digest=found,
        flow_id=record.link_flow_id(),
        summary=_one_line(summary, _MAX_SUMMARY) if summary else None,
        actors=caller.actors if caller is not None else (),
        following=following,
    )
    try:
        state = await port.request(ask)
    except LimitReachedError as exc:
        raise LimitReachedError(
            f"Not sent for approval: you already have {exc.limit} approval requests waiting, the most allowed. "
            "Wait until they are decided or expire, then call the tool again.",
            limit=exc.limit,
            tool_error=True,
        ) from None
    response = record.responses.get(key)
    # An answer counts only to the link this flow asked, as its sealed state says: one sent without it was never asked
    # (it neither withdraws the request nor goes into the audit trail as answered).
    answered = isinstance(response, ElicitResult) and record.state is not None and key in record.state.asked
    if answered:
        assert isinstance(response, ElicitResult)
        # The link was answered: the audit trail says so, whatever the real state says next.
        record.events.append(FlowEvent("answered", key, "url", action=response.action))
    title = approval.title
    if state.status == "pending" and answered:
        assert isinstance(response, ElicitResult)
        if response.action in ("decline", "cancel"):
            state = await port.withdraw(state.id)
            if state.status == "approved":
                # Approved between the two reads: not consumed, so it still waits for a call of its own.
                raise FlowEnded(
                    f"Stopped: you stopped waiting, but {title} was approved meanwhile; nothing was done. Call the "
                    "tool again with the same arguments to go on.",
                    "declined" if response.action == "decline" else "cancelled",
                )
    if state.status == "consumed":
        # Approved, and now bound to this flow (a replay reads it again): the handler goes on to its effect.
        return Approved(state.id, tuple(state.approvers), state.status)
    if state.status == "denied":
        by = _one_line(state.denied_by or "an approver", 255)
        why = f" ({_one_line(state.reason, _MAX_REASON)})" if state.reason and state.reason.strip() else ""
        raise FlowEnded(f"Denied: {by} denied {title}{why}, so nothing was done.", "denied")
    if state.status == "expired":
        raise FlowEnded(
            f"Expired: the approval request for {title} expired before it was approved and used, so nothing was "
            "done. Call the tool again for a new request.",
            "approval_expired",
        )
    if state.status == "withdrawn":
        raise FlowEnded(
            f"Withdrawn: the approval request for {title} was withdrawn, so nothing was done. Call the tool again "
            "for a new request.",
            "withdrawn",
        )
    if state.status != "pending":
        # `approved` is consumed by the port in the transaction that reads it: anything else breaks the contract.
        raise DefinitionError(f"the approvals port answered a request in status {state.status!r}, which it may not")
    # A task whose round asks only the link waits for the decision without asking the client anything, so the
    # client's URL mode does not matter there; with other questions the link is shown, and needs URL mode.
    waits_in_task = in_task and not record.pending
    if mode == "report" or not (declares(capabilities, "url") or waits_in_task):
        raise ApprovalPending(title, state)
    needed = _still_needed(state)
    text = (
        f"Approval needed: {title}. It needs {needed} more approval{'s' if needed != 1 else ''} before "
        f"{_when(state.expires_at)}. Open the link to follow the request; the call goes on once it is approved."
    )
    question = Link(key=key, message=text)
    params = question.render(message=text, url=state.status_url)
    if answered:
        # Accepted, but the request is still pending: an accept only means the person opened the page.
        params = {**params, "message": "Not decided yet. " + text}
    # An answer to the link is taken by its key alone (its message changes as approvals come in); what the state
    # keeps beside the key is the request the link shows, for the next round to follow.
    record.schedule(question, params, base=_FOLLOWING + state.id)
    raise NeedInput
