"""The tasks a server makes of the runtime's calls (the tasks extension, SEP-2663), driven from the client side.

Every `tools/call` the runtime sends on a 2026-07-28 connection declares the extension (`_sdk`); a server may then
answer with a `CreateTaskResult` (`resultType: "task"`) instead of a result. The call is parked like any other, with
the task's id and poll interval on its row, and driven by the resume's plan (`resume_plan`):

- `tasks/get` (with `Mcp-Name: <taskId>`) at the server's `pollIntervalMs`, backing off while nothing changes, at most
  to `_BACKOFF_CAP` times the interval;
- an `input_required` task's new questions become the call's next round, answered through the same renderers, inbox
  and deadlines as an MRTR round. Input keys are never reused over a task's life, so a key already parked in any
  round of the call is never parked again, however many polls show it;
- a round's answers go back with `tasks/update`, and the call waits on the server again;
- `completed` completes the call with the task's result, `failed` fails it with the task's JSON-RPC error
  (`ServerRefusedError`), `cancelled` completes it as cancelled (`Completed.cancelled`);
- when the call's deadline passes, whether it waits on people or on the server, the runtime asks the server to
  cancel the task (`tasks/cancel`). A cancel is a request and `tasks/get` the truth (`after_cancel`): a task that
  ended completes the call as it ended (with its result when it completed after all, as a server does whose task
  had started an effect); one still working keeps the call waiting on the server, polled, for
  `ASKBACK_CALL_CANCEL_WAIT` seconds more, after which the call ends unconfirmed (`unconfirmed_result`): a tool
  error saying the task may still complete, never that it was cancelled.

So a task call's rounds alternate: round 1 waits on the server (no questions), a round with questions waits on people,
the round after its answers were sent waits on the server again. Every move from one round to the next is claimed in
the store as an MRTR resume is, so of two processes driving one task, one records what changed and sends the answers
(the other gets `Claimed`); a poll is a read. A process that stops while it polls loses nothing: any other resumes
the call (`Runtime.resume`, `resume_due`) and polls on.

This module holds what the plan asks of a task, all pure: what a task's answer means (`read_task`, and
`after_cancel` once a cancel was sent), how long to wait before the next poll (`poll_delay`), and how a task call's
rounds are parked (`waiting_round`, `made`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from askback.errors import ServerProtocolError
from askback.runtime._sdk import TASKS_EXTENSION
from askback.runtime.call_record import CallRecord

__all__ = [
    "Asks",
    "Ended",
    "Unchanged",
    "Unconfirmed",
    "after_cancel",
    "cancel_sent",
    "cancelled_result",
    "interval_of",
    "is_task",
    "made",
    "poll_delay",
    "read_task",
    "unconfirmed_result",
    "waiting_round",
]

_BACKOFF = 1.5
_BACKOFF_CAP = 8.0
_MIN_INTERVAL = 0.05  # seconds: a server asking for less is polled at this pace
_DEFAULT_INTERVAL = 1.0  # what the official TypeScript client assumes when a server gives none
_STATUSES = frozenset({"working", "input_required", "completed", "failed", "cancelled"})
# Marks the round a call waits on after its task was asked to cancel (kept in the round's pending JSON).
_CANCEL_SENT = "cancelSent"


@dataclass(frozen=True)
class Unchanged:
    """The task has nothing new for the runtime: still working, or asking only what was parked already."""

    interval: float


@dataclass(frozen=True)
class Asks:
    """The task asks questions never parked before: `pending`, an `InputRequiredResult` of only those."""

    pending: dict[str, Any]


@dataclass(frozen=True)
class Ended:
    """The task ended: `result` once completed (or cancelled, as `cancelled_result` says), `error` once failed."""

    status: Literal["completed", "failed", "cancelled"]
    result: dict[str, Any] | None = None
    error: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Unconfirmed:
    """The wait for a task asked to cancel ran out before it ended: `result` (`unconfirmed_result`) ends the call."""

    result: dict[str, Any]


def is_task(outcome: Mapping[str, Any]) -> bool:
    """Whether a `tools/call` answer is a `CreateTaskResult`."""
    return outcome.get("resultType") == "task"


def poll_delay(interval: float, idle: int) -> float:
    """Seconds to wait before the next `tasks/get`: the server's interval, times 1.5 for each poll in a row that
    found nothing new (`idle`), at most eight times the interval."""
    interval = max(interval, _MIN_INTERVAL)
    return min(interval * _BACKOFF ** min(idle, 64), interval * _BACKOFF_CAP)


def interval_of(task: Mapping[str, Any]) -> float:
    """The poll interval a task asks for, in seconds."""
    ms = task.get("pollIntervalMs")
    if isinstance(ms, bool) or not isinstance(ms, int | float) or ms < 0:
        return _DEFAULT_INTERVAL
    return float(ms) / 1000


def waiting_round(
    task_id: str, task: Mapping[str, Any], requests: Mapping[str, Any] | None = None, *, cancel_sent: bool = False
) -> dict[str, Any]:
    """A round of a task call as it is parked: the questions `requests` (none while the task works), with the task's
    id and status kept beside them; `cancel_sent` marks the round that waits for a task asked to cancel to end."""
    found = {
        "resultType": "input_required",
        "inputRequests": dict(requests or {}),
        "taskId": task_id,
        "taskStatus": task.get("status"),
    }
    return {**found, _CANCEL_SENT: True} if cancel_sent else found


def cancel_sent(record: CallRecord) -> bool:
    """Whether the call waits for its task to end after asking the server to cancel it."""
    return bool((record.pending or {}).get(_CANCEL_SENT))


def cancelled_result(task_id: str, task: Mapping[str, Any]) -> dict[str, Any]:
    """What a cancelled task completes its call with: a tool error saying so, marked under the extension's `_meta`."""
    why = task.get("statusMessage")
    text = f"The task was cancelled: {why}" if isinstance(why, str) and why else "The task was cancelled."
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {TASKS_EXTENSION: {"taskId": task_id, "status": "cancelled"}},
    }


def unconfirmed_result(task_id: str, task: Mapping[str, Any], waited: float) -> dict[str, Any]:
    """What a call ends with when its task, asked to cancel, had not ended `waited` seconds later: a tool error
    saying that the server did not confirm the cancel and the task may still complete, with the task's last status
    under the extension's `_meta` (`Completed.cancel_unconfirmed`). Never "cancelled": nothing says it was."""
    status = task.get("status")
    text = (
        f"Not cancelled: the server did not confirm the cancel of this task within {waited:g} seconds of the call's "
        f"deadline (it was still {status}), so it may still complete and do its work. Check the task on the server "
        "before calling the tool again."
    )
    return {
        "resultType": "complete",
        "content": [{"type": "text", "text": text}],
        "isError": True,
        "_meta": {TASKS_EXTENSION: {"taskId": task_id, "status": status}},
    }


def after_cancel(
    task_id: str, task: Mapping[str, Any], *, over: bool, waited: float
) -> Ended | Unchanged | Unconfirmed:
    """What the answer to `tasks/get` means for a call whose task the runtime asked to cancel. A cancel is a request:
    the task's own end, when it has ended (its result when it completed after all, `cancelled` when the cancel won,
    the server's error when it failed); else the call waits on (`Unchanged`: questions a task asks now are not
    parked, the call's deadline has passed) until `over`, when the wait of `waited` seconds ran out: `Unconfirmed`.
    `ServerProtocolError` as `read_task` says."""
    found = read_task(task_id, task, frozenset())
    if isinstance(found, Ended):
        return found
    if over:
        return Unconfirmed(unconfirmed_result(task_id, task, waited))
    return Unchanged(interval_of(task))


def _own_result(result: Mapping[str, Any]) -> dict[str, Any]:
    """A completed task's result as the call's, without a tasks-extension status of its own in `_meta`: only the
    runtime marks a call cancelled or unconfirmed, so a tool's result cannot pass for either."""
    meta = result.get("_meta")
    if isinstance(meta, Mapping) and TASKS_EXTENSION in meta:
        result = {**result, "_meta": {k: v for k, v in meta.items() if k != TASKS_EXTENSION}}
    return {**result, "resultType": "complete"}


def read_task(task_id: str, task: Mapping[str, Any], parked: frozenset[str]) -> Unchanged | Asks | Ended:
    """What the answer to `tasks/get` means for the call, given the input keys already `parked` in any of its
    rounds. `ServerProtocolError` when it is not the task asked for or has no status the extension defines."""
    status = task.get("status")
    if task.get("taskId", task_id) != task_id or status not in _STATUSES:
        raise ServerProtocolError(
            f"the MCP server answered tasks/get for task {task_id} with something that is not that task (status "
            f"{status!r} if any); the call stays parked as it was. The server must be fixed to send tasks as "
            "SEP-2663 defines them"
        )
    if status == "completed":
        result = task.get("result")
        return Ended("completed", _own_result(result if isinstance(result, Mapping) else {}))
    if status == "failed":
        error = task.get("error")
        return Ended("failed", error=error if isinstance(error, Mapping) else {})
    if status == "cancelled":
        return Ended("cancelled", cancelled_result(task_id, task))
    requests = task.get("inputRequests") if status == "input_required" else None
    new = {k: v for k, v in requests.items() if k not in parked} if isinstance(requests, Mapping) else {}
    if new:
        return Asks(waiting_round(task_id, task, new))
    return Unchanged(interval_of(task))


def made(created: Mapping[str, Any], *, server: str, call_id: str, kept: str) -> tuple[str, float]:
    """The id and poll interval of the task a server made of call `call_id` (its `CreateTaskResult`, `created`), on
    the first round or on a later one (questions asked before the task existed); `ServerProtocolError`, saying
    what became of the call (`kept`), when it names no task."""
    task_id = created.get("taskId")
    if not isinstance(task_id, str) or not task_id:
        raise ServerProtocolError(
            f"the MCP server at {server} answered call {call_id} with a task that has no taskId; {kept}. The server "
            "must be fixed to send tasks as SEP-2663 defines them"
        )
    return task_id, interval_of(created)
