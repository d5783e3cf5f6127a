"""What a runtime call comes back as (`Completed`, `Parked`, `Claimed`), what its inbox lists (`Pending`), the
account event that resumes calls (`AccountActive`), and a 2025-11-25 question held in memory (`Held`).

Plain values: the runtime (`askback.runtime.calls`) makes them, the command line, the web inbox and the LangGraph
bridge read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio

from askback.runtime.questions import Answer, ParkedQuestion

__all__ = ["AccountActive", "ApprovalDecided", "Claimed", "Completed", "Held", "Outcome", "Parked", "Pending"]


@dataclass(frozen=True)
class Completed:
    """The call finished: `result` is the server's result as JSON (a tool's `content`, `isError`, ...)."""

    call_id: str
    result: Mapping[str, Any]
    rounds: int

    @property
    def text(self) -> str:
        """The text blocks of a tool result (or a prompt's messages, a resource's contents), joined."""
        parts: list[str] = []
        for block in self.result.get("content") or ():
            if isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        for message in self.result.get("messages") or ():
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, Mapping) and content.get("type") == "text":
                parts.append(str(content.get("text", "")))
        for item in self.result.get("contents") or ():
            if isinstance(item, Mapping) and "text" in item:
                parts.append(str(item["text"]))
        return "\n".join(parts)

    @property
    def is_error(self) -> bool:
        return bool(self.result.get("isError"))

    @property
    def cancelled(self) -> bool:
        """Whether the call was a task that ended cancelled (at its deadline, or by the server): `result` is then a
        tool error saying so, marked under the tasks extension's `_meta`."""
        meta = self.result.get("_meta")
        task = meta.get("io.modelcontextprotocol/tasks") if isinstance(meta, Mapping) else None
        return isinstance(task, Mapping) and task.get("status") == "cancelled"

    @property
    def cancel_unconfirmed(self) -> bool:
        """Whether the call was a task the runtime asked to cancel at its deadline, which had not ended when the wait
        for it (`ASKBACK_CALL_CANCEL_WAIT`) ran out: the server did not confirm the cancel, and the task may still
        complete. `result` is then a tool error saying so, with the task's last status under the tasks extension's
        `_meta`; `cancelled` is false."""
        meta = self.result.get("_meta")
        task = meta.get("io.modelcontextprotocol/tasks") if isinstance(meta, Mapping) else None
        return isinstance(task, Mapping) and task.get("status") in ("working", "input_required")


@dataclass(frozen=True)
class Parked:
    """The call waits on people: `questions` of round `round`, until `deadline` (then unanswered ones are
    cancelled). `missing` are the keys still unanswered."""

    call_id: str
    round: int
    questions: tuple[ParkedQuestion, ...]
    deadline: float | None
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Claimed:
    """Another process is resuming this round right now; nothing was sent from here."""

    call_id: str
    round: int


Outcome = Completed | Parked | Claimed


@dataclass(frozen=True)
class AccountActive:
    """An account became ACTIVE: `principal`'s account `label` (`""`: the default one, as account events spell it)
    for `connection` at `server` (the MCP URL the runtime's calls go to; `None`: the event comes from the one
    server this runtime's calls all go to). It is a hint to look: the calls waiting for exactly that account send
    their round back without answering the link, and the server says whether the account is connected."""

    principal: str
    connection: str
    label: str = ""
    server: str | None = None


@dataclass(frozen=True)
class ApprovalDecided:
    """An approval request was decided (approved or denied): `principal`'s request `approval_id` at `server` (the MCP
    URL the runtime's calls go to; `None`: the one server this runtime's calls all go to). A hint to look, as
    `AccountActive` is: the calls waiting on exactly that request send their round back without answering its link,
    and the server reads the decision from its store."""

    principal: str
    approval_id: str
    server: str | None = None


@dataclass(frozen=True)
class Pending:
    """An unanswered question with what a person needs to know about it: who must answer, what asked it (the
    method and the tool, prompt or resource), until when, and whether it waits in this process's memory only (a
    2025-11-25 push) rather than in the store."""

    question: ParkedQuestion
    principal: str
    method: str
    target: str
    deadline: float | None
    in_memory: bool = False


@dataclass
class Held:
    """A 2025-11-25 question pushed on an open connection, waiting in this process's memory only."""

    question: ParkedQuestion
    principal: str
    target: str
    deadline: float
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None
