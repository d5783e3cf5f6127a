"""A call as the runtime's store keeps it (`CallRecord`): plain data, read by the resume's plan, the inbox, the
command line and the LangGraph bridge. The store (`parked_calls`) builds one from its columns (`record_of`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cached_property
from typing import Any, cast

from askback.runtime.call_status import CallStatus
from askback.runtime.questions import Origin, ParkedQuestion, pending_questions

__all__ = ["CallRecord", "record_of"]


@dataclass(frozen=True)
class CallRecord:
    """A call as the store keeps it. `pending` is the server's `InputRequiredResult` (JSON) while parked;
    `server_name` the name the server gave itself (`serverInfo`) when the call was made, if it gave one; `task_id`
    and `poll_interval` (seconds) the task the server made of the call, if it made one."""

    id: str
    run_id: str | None
    principal: str
    server: str
    protocol: str | None
    method: str
    target: str
    arguments_json: str | None
    status: CallStatus
    round: int
    pending_json: str | None
    waiting: int
    deadline: float | None
    result_json: str | None
    error: str | None
    created_at: float
    updated_at: float
    server_name: str | None = None
    task_id: str | None = None
    poll_interval: float | None = None

    @cached_property
    def arguments(self) -> dict[str, Any] | None:
        return None if self.arguments_json is None else cast(dict[str, Any], json.loads(self.arguments_json))

    @cached_property
    def pending(self) -> dict[str, Any] | None:
        return None if self.pending_json is None else cast(dict[str, Any], json.loads(self.pending_json))

    @cached_property
    def result(self) -> dict[str, Any] | None:
        return None if self.result_json is None else cast(dict[str, Any], json.loads(self.result_json))

    @cached_property
    def questions(self) -> tuple[ParkedQuestion, ...]:
        """The questions of the round the call is parked on (none once it is finished)."""
        pending = self.pending
        return () if pending is None else pending_questions(self.id, self.round, pending, origin=self.origin)

    @property
    def origin(self) -> Origin:
        """Which server the call went to, under which name, and what was called: shown with its questions."""
        return Origin(self.server, self.server_name, self.method, self.target, self.arguments)


_FIELDS = tuple(f.name for f in fields(CallRecord))
_STATUSES = {s.value: s for s in CallStatus}


def record_of(values: Sequence[Any]) -> CallRecord:
    """The record of the columns `values`, in the record's field order; the status read as a `CallStatus`."""
    # Filled in place rather than through the frozen dataclass's __init__ (an object.__setattr__ per field): a long
    # listing spends most of its time building records. The record has no __post_init__ to skip.
    record = object.__new__(CallRecord)
    attributes = record.__dict__
    attributes.update(zip(_FIELDS, values, strict=True))
    attributes["status"] = _STATUSES[attributes["status"]]
    return record
