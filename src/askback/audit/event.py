"""What an audit line holds, and how lines are selected. Plain data, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["AuditEvent", "AuditFilter", "EventKind"]

EventKind = Literal[
    "asked",
    "answered",
    "completed",
    "replayed",
    "rejected",
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "approval.expired",
    "approval.withdrawn",
    "approval.consumed",
]


@dataclass(frozen=True)
class AuditEvent:
    """One line of the audit log. `at` comes from the caller's clock; `id` is set only when read back.

    `scopes` are the scopes the caller's access token granted, kept sorted and without repeats (`()`: a token that
    granted none); `None` when no token scopes were recorded, as on every event written before askback recorded
    them. A scope never contains a space (RFC 6749 section 3.3), so the store keeps them space-separated.
    """

    event: EventKind
    at: float
    tool: str | None = None
    flow_id: str | None = None
    principal: str | None = None
    round: int | None = None
    keys: tuple[str, ...] = ()
    mode: str | None = None
    action: str | None = None
    content: dict[str, Any] | None = None
    outcome: str | None = None
    detail: str | None = None
    instance: str | None = None
    scopes: tuple[str, ...] | None = None
    id: int | None = None

    def __post_init__(self) -> None:
        if self.scopes is not None:
            object.__setattr__(self, "scopes", tuple(sorted({scope for scope in self.scopes if scope})))


@dataclass(frozen=True)
class AuditFilter:
    """Which audit events to read. Fields left `None` do not filter.

    `since` is inclusive and `until` exclusive, so consecutive windows never list an event twice. `contains`
    is a case-insensitive substring of the content JSON, the outcome or the detail. When more than `limit`
    events match, the newest `limit` are returned (still oldest first), as `tail` would.
    """

    tool: str | None = None
    principal: str | None = None
    flow_id: str | None = None
    event: str | None = None
    since: float | None = None
    until: float | None = None
    contains: str | None = None
    limit: int = 1000

    def __post_init__(self) -> None:
        if self.limit < 1:
            raise ValueError(f"AuditFilter.limit must be at least 1, not {self.limit}")
