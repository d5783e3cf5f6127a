"""The tasks a server makes of the runtime's calls (the tasks extension, SEP-2663), driven from the client side.

Every `tools/call` the runtime sends on a 2026-07-28 connection declares the extension (`_sdk`); a server may then
answer with a `CreateTaskResult` (`resultType: "task"`) instead of a result. The call is parked like any other, with
the task's id and poll interval on its row, and driven here:

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

What a task's answer means (`read_task`, and `after_cancel` once a cancel was sent) and how long to wait before the
next poll (`poll_delay`) are pure; `drive` does the I/O around them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from askback.errors import ServerProtocolError, ServerRefusedError
from askback.runtime import _sdk, _wire
from askback.runtime._outcomes import Claimed, Completed, Outcome, Parked
from askback.runtime.parked_calls import CallRecord
from askback.runtime.questions import Ready, Waiting, resume_decision

if TYPE_CHECKING:
    from askback.runtime.calls import Runtime

__all__ = [
    "Asks",
    "Ended",
    "Unchanged",
    "Unconfirmed",
    "after_cancel",
    "cancelled_result",
    "drive",
    "is_task",
    "park",
    "poll_delay",
    "read_task",
    "unconfirmed_result",
]

log = logging.getLogger("askback.runtime")

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
        "_meta": {_sdk.TASKS_EXTENSION: {"taskId": task_id, "status": "cancelled"}},
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
        "_meta": {_sdk.TASKS_EXTENSION: {"taskId": task_id, "status": status}},
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
    if isinstance(meta, Mapping) and _sdk.TASKS_EXTENSION in meta:
        result = {**result, "_meta": {k: v for k, v in meta.items() if k != _sdk.TASKS_EXTENSION}}
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


def _failure(call_id: str, task_id: str, error: Mapping[str, Any]) -> ServerRefusedError:
    code, message = error.get("code"), error.get("message")
    return ServerRefusedError(
        f"task {task_id} of call {call_id} failed on the server: {message if isinstance(message, str) else 'no reason given'}"
        f" (JSON-RPC {code})",
        code=code if isinstance(code, int) else None,
        data=error.get("data"),
    )


def _refused(exc: MCPError, record: CallRecord, method: str) -> ServerRefusedError:
    message = (
        f"the server refused {method} for task {record.task_id} of call {record.id}: {exc.message} (JSON-RPC "
        f"{exc.code})"
    )
    return _wire.refusal(message, code=exc.code, data=exc.data, kept=_wire.later(record.id))


async def park(
    rt: Runtime,
    conn: _sdk.Connection,
    created: Mapping[str, Any],
    call_id: str,
    server: str,
    target: str,
    arguments: Mapping[str, Any] | None,
    principal: str,
    run_id: str | None,
) -> CallRecord:
    """Park a call the server answered with a task (`created`): round 1, waiting on the server."""
    task_id, interval = made(created, server=server, call_id=call_id, kept="nothing was kept")
    now = rt.clock.now()
    return await rt.calls.add(
        call_id=call_id,
        run_id=run_id,
        principal=principal,
        server=server,
        protocol=conn.protocol,
        method="tools/call",
        target=target,
        arguments=arguments,
        outcome=waiting_round(task_id, created),
        sent=None,
        deadline=now + rt.settings.answer_wait,
        now=now,
        server_name=conn.server_name,
        task=(task_id, interval),
    )


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


async def drive(rt: Runtime, record: CallRecord, conn: _sdk.Connection | None) -> Outcome:
    """Drive a task call until it waits on people (`Parked`), ends (`Completed`, or `ServerRefusedError` when the
    task failed) or another process moved it on (`Claimed`); while the task works, poll it."""
    if conn is None:
        async with rt._connect(
            record.server, principal=record.principal, call_id=record.id, protocol=record.protocol
        ) as fresh:
            return await drive(rt, record, fresh)
    idle = 0
    while True:
        if record.status == "completed":
            return Completed(record.id, record.result or {}, rounds=record.round)
        if record.status == "failed":
            raise ServerRefusedError(f"call {record.id} failed: {record.error}")
        now = rt.clock.now()
        answers = await rt.calls.answers(record.id, record.round)
        decision = resume_decision(record.questions, answers, now=now, deadline=record.deadline)
        if isinstance(decision, Waiting):
            return Parked(record.id, record.round, record.questions, record.deadline, decision.missing)
        late = record.deadline is not None and now >= record.deadline
        if (record.questions or late) and not cancel_sent(record):
            moved = await _send(rt, record, decision, conn, cancel=late or bool(decision.cancelled))
            if moved is not None:
                return moved
            idle = 0
        else:
            found = await _poll(rt, record, conn, late=late)
            if isinstance(found, Unchanged):
                at = now + poll_delay(found.interval, idle)
                await rt.clock.sleep_until(at if record.deadline is None else min(at, record.deadline))
                idle += 1
            else:
                moved = await _settle(rt, record, found, sent={})
                if moved is not None:
                    return moved
                idle = 0
        record = await rt.calls.get(record.id)


async def _request(
    rt: Runtime, record: CallRecord, conn: _sdk.Connection, method: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    assert record.task_id is not None
    conn.sending = (record.id, record.round + 1)
    try:
        return await conn.send_task(method, record.task_id, params, read_timeout=rt.timeout)
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            raise  # `_wire.connect` says what became of the call
        raise _refused(exc, record, method) from exc


async def _get(rt: Runtime, record: CallRecord, conn: _sdk.Connection) -> dict[str, Any] | Ended:
    """The server's answer to `tasks/get`; `Ended` (failed) when it refuses for good."""
    assert record.task_id is not None
    conn.sending = (record.id, record.round + 1)
    try:
        return await conn.send_task("tasks/get", record.task_id, read_timeout=rt.timeout)
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            raise  # `_wire.connect` says what became of the call
        refusal = _refused(exc, record, "tasks/get")
        if refusal.retryable:
            raise refusal from exc
        # An unknown or expired task never answers again: the call fails with the server's reason.
        return Ended("failed", error={"code": exc.code, "message": f"tasks/get was refused: {exc.message}"})


async def _poll(
    rt: Runtime, record: CallRecord, conn: _sdk.Connection, *, late: bool
) -> Unchanged | Asks | Ended | Unconfirmed:
    """What `tasks/get` says now (`read_task`; `after_cancel` once the task was asked to cancel, `late` when the wait
    for it ran out)."""
    assert record.task_id is not None
    task = await _get(rt, record, conn)
    if isinstance(task, Ended):
        return task
    if cancel_sent(record):
        return after_cancel(record.task_id, task, over=late, waited=rt.settings.call_cancel_wait)
    parked: frozenset[str] = frozenset()
    if task.get("status") == "input_required":
        parked = frozenset(k for r in await rt.calls.rounds(record.id) for k in r["asked"].get("inputRequests") or {})
    return read_task(record.task_id, task, parked)


async def _send(
    rt: Runtime, record: CallRecord, decision: Ready, conn: _sdk.Connection, *, cancel: bool
) -> Outcome | None:
    """Send a round's answers (`tasks/update`), or ask the server to cancel the task at the deadline (`tasks/cancel`,
    then one `tasks/get` to read what became of it, `after_cancel`); None when the call goes on waiting on the
    server (after a cancel, for at most `ASKBACK_CALL_CANCEL_WAIT` seconds)."""
    assert record.task_id is not None
    now = rt.clock.now()
    claim = await rt.calls.claim(record.id, record.round, now=now, lease=rt.settings.resume_lease)
    if claim is None:
        return Claimed(record.id, record.round)
    sent = _wire.responses(decision) if not cancel else {}
    waiting = waiting_round(record.task_id, {"status": "working"})
    wait = rt.settings.answer_wait
    async with rt.calls.sending(record.id, claim, round_=record.round, sent=sent, now=now):
        if cancel:
            await _ask_to_cancel(rt, record, conn)
            task = await _request(rt, record, conn, "tasks/get")
            wait = rt.settings.call_cancel_wait
            step = after_cancel(record.task_id, task, over=False, waited=wait)
            if not isinstance(step, Unchanged):
                return await _finish(rt, record, claim, step, sent=sent)
            log.info("call %s: the task was asked to cancel and is still %s; waiting for it", record.id, task["status"])
            waiting = waiting_round(record.task_id, task, cancel_sent=True)
        else:
            await _request(rt, record, conn, "tasks/update", {"inputResponses": sent})
    now = rt.clock.now()
    settled = await rt.calls.settle(
        record.id, claim, round_=record.round, sent=sent, outcome=waiting, deadline=now + wait, now=now
    )
    return None if settled else Claimed(record.id, record.round)


async def _ask_to_cancel(rt: Runtime, record: CallRecord, conn: _sdk.Connection) -> None:
    """`tasks/cancel`. Its answer is not the truth, `tasks/get` is: a refusal (a task that ended already, a server
    that does not cancel) is logged, and the task is read all the same."""
    try:
        await _request(rt, record, conn, "tasks/cancel")
    except ServerRefusedError as exc:
        if exc.retryable:
            raise
        log.info("call %s: %s; reading the task", record.id, exc)


async def _settle(
    rt: Runtime, record: CallRecord, found: Asks | Ended | Unconfirmed, *, sent: dict[str, Any]
) -> Outcome | None:
    """Record what a poll found: the next round of questions, or the end of the task."""
    claim = await rt.calls.claim(record.id, record.round, now=rt.clock.now(), lease=rt.settings.resume_lease)
    if claim is None:
        return Claimed(record.id, record.round)
    if not isinstance(found, Asks):
        return await _finish(rt, record, claim, found, sent=sent)
    now = rt.clock.now()
    settled = await rt.calls.settle(
        record.id,
        claim,
        round_=record.round,
        sent=sent,
        outcome=found.pending,
        deadline=now + rt.settings.answer_wait,
        now=now,
    )
    return None if settled else Claimed(record.id, record.round)


async def _finish(
    rt: Runtime, record: CallRecord, claim: str, ended: Ended | Unconfirmed, *, sent: dict[str, Any]
) -> Outcome:
    assert record.task_id is not None
    now = rt.clock.now()
    if isinstance(ended, Unconfirmed):
        log.info("call %s: the task was asked to cancel and had not ended when the wait ran out", record.id)
    elif ended.status == "failed":
        failure = _failure(record.id, record.task_id, ended.error or {})
        await rt.calls.settle(
            record.id, claim, round_=record.round, sent=sent, outcome=None, error=str(failure), now=now
        )
        raise failure
    result = ended.result or {}
    if not await rt.calls.settle(record.id, claim, round_=record.round, sent=sent, outcome=result, now=now):
        return Claimed(record.id, record.round)
    return Completed(record.id, result, rounds=record.round)
