"""`flow.approve`: a write that waits until someone else, allowed to, has approved this exact call.

An `Approval` is declared once, beside the tool (like a `Form` or a `Confirm`): who may approve (principals, and
groups read from the approver's sign-in), how many distinct approvers it takes, how long a request stays open,
whether the requester may approve their own request (no by default), and which arguments the approvers' page masks.

What is approved is one exact call: `approval_digest` binds the decision to the tool, its canonical arguments, the
answers given so far, the requester (the principal, which carries its issuer) and the policy. Changing any of them is
a new request; a pending request with the same digest is reused.

The approvals product provides the port (`ApprovalsPort`, one per caller, as the connected accounts do); the core
decides what the round does with what the port reports: go on when approved, complete when denied, expired or
withdrawn, and while pending ask a URL-mode question linking to the request's status page (a client without URL mode
gets a completed result saying the request is pending, with its id and expiry: it has nothing to render).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from askback.core.text import name_problem
from askback.errors import DefinitionError

__all__ = [
    "MAX_APPROVAL_TTL",
    "MIN_APPROVAL_TTL",
    "Approval",
    "ApprovalAsk",
    "ApprovalState",
    "ApprovalStatus",
    "ApprovalsPort",
    "approval_digest",
    "approval_key",
]

# An approval request stays open between a minute and thirty days.
MIN_APPROVAL_TTL = 60.0
MAX_APPROVAL_TTL = 30 * 86400.0
_MAX_NAMES = 64
_MAX_TITLE = 200
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")

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
                f"an approval's key is a letter then up to 63 letters, digits, '_', '.' or '-'; got {self.key!r}"
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
    """What a round asks the approvals product for: a request for this exact call (reused while one is pending)."""

    approval: Approval
    tool: str
    arguments: Mapping[str, Any]
    answers: Mapping[str, Any]
    digest: str
    flow_id: str
    summary: str | None = None
    actors: tuple[str, ...] = ()


@dataclass(frozen=True)
class ApprovalState:
    """An approval request as the store holds it now."""

    id: str
    status: ApprovalStatus
    expires_at: float
    required: int
    approvers: tuple[str, ...] = ()
    denied_by: str | None = None
    reason: str | None = None
    status_url: str = ""


class ApprovalsPort(Protocol):
    """Approval requests, as seen by one caller (the principal is the port's): provided by the approvals product."""

    async def request(self, ask: ApprovalAsk) -> ApprovalState:
        """The request for `ask.digest`: the pending one (reused), else a new pending one. An approved request for the
        digest is consumed by `ask.flow_id` in the same transaction that reads it (status `consumed`, bound to this
        flow: a replay of this flow reads it again, another flow needs a request of its own). Raises
        `askback.errors.LimitReachedError` when the caller holds too many pending requests."""
        ...

    async def withdraw(self, approval_id: str) -> ApprovalState:
        """The caller declined or cancelled: withdraw the request while it is pending; the request as it then is."""
        ...
