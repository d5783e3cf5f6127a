"""A parked call's resume as a plan: its steps as frozen values, with no I/O.

`resume_plan(start, limits, modes=...)` is a generator (httpx's `Auth.auth_flow` shape, like the server's
`core.round_plan`): it yields each step of the resume (`resume_steps`), is sent that step's result, and returns what
the call came to. `resume_driver` performs the steps against the store, the clock and the server; a test answers them
with plain data. In order:

- An MRTR call (2026-07-28), once its round can go (`questions.resume_decision`: every question answered, or the
  deadline passed and the unanswered ones answered `cancel`; `look_decision` to look whether an account is
  connected): `Claim`, `SendRound`, then `ParkAgain` (the server asks again, or made a task of the call: its task is
  then driven as below), `Complete`, or `Fail` (past the round cap).
- A task call (the tasks extension, `_tasks`): while its task works, `Poll`, `Wait` (longer each time nothing
  changed: `poll_delay`), `Reload`, and again. Every move from one round to the next is claimed: what a poll found
  (`ParkAgain` on the task's new questions, `Complete`, `Fail`); a round's answers (`UpdateTask`, then `ParkAgain`
  waiting on the server); the deadline (`CancelTask` and `Poll`, then `Complete` as the task ended, or `ParkAgain`
  waiting `cancel_wait` more for it to end).

A request that fails while the call is claimed ends the resume with its error: `fails_call` says whether the call
fails with it (`Fail`) or stays parked as it was, with its answers (`Release`). The errors are worded here, from the
plan's own state (which round of which call was being sent), by `call_errors`.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from typing import Any

from askback.errors import ServerProtocolError, ServerRefusedError
from askback.runtime._outcomes import Claimed, Completed, Outcome, Parked
from askback.runtime._tasks import (
    Asks,
    Ended,
    Unchanged,
    Unconfirmed,
    after_cancel,
    cancel_sent,
    is_task,
    made,
    poll_delay,
    read_task,
    waiting_round,
)
from askback.runtime.call_errors import refused, task_failed, task_refused
from askback.runtime.call_record import CallRecord
from askback.runtime.call_status import CallStatus
from askback.runtime.questions import Mode, Waiting, look_decision, pending_questions, resume_decision
from askback.runtime.resume_steps import (
    Answered,
    AskedKeys,
    CancelTask,
    Claim,
    Complete,
    Fail,
    Failed,
    Limits,
    Log,
    ParkAgain,
    Poll,
    Raise,
    Refused,
    Release,
    Reload,
    SendRound,
    Snapshot,
    Step,
    UpdateTask,
    Wait,
)

__all__ = ["Plan", "fails_call", "resume_plan"]

Plan = Generator[Step, Any, Outcome | Raise]
# What a task's poll found, and the clock when it was read.
_Found = tuple[Unchanged | Asks | Ended | Unconfirmed, float]


def fails_call(error: BaseException) -> bool:
    """Whether a claimed round that ended with `error` fails its call for good: a refusal the server does not mark
    retryable, or an answer that cannot be read (the round's answers did reach the server). Anything else (a timeout,
    an HTTP error, a server out of reach, a retryable refusal, the process stopped) leaves the call parked as it was,
    with its answers, to be resumed again."""
    refused_for_good = isinstance(error, ServerRefusedError) and not error.retryable
    return refused_for_good or isinstance(error, ServerProtocolError)


def resume_plan(start: Snapshot, limits: Limits, *, modes: frozenset[Mode], leave_open: str | None = None) -> Plan:
    """The steps of one resume of `start.call` (see the module's docstring). `modes`: what the runtime's renderers
    show (a server's -32021 names them); `leave_open`: send the round with that question unanswered, to look
    (`questions.look_decision`). A finished call comes back as it finished."""
    finished = _finished(start.call)
    if finished is not None:
        return finished
    if start.call.task_id is not None:
        return (yield from _task_plan(start, start.call.task_id, limits))
    return (yield from _round_plan(start, limits, modes, leave_open))


def _finished(call: CallRecord) -> Outcome | Raise | None:
    if call.status == CallStatus.COMPLETED:
        return Completed(call.id, call.result or {}, rounds=call.round)
    if call.status == CallStatus.FAILED:
        return Raise(ServerRefusedError(f"call {call.id} failed: {call.error}"))
    return None


def _parked(call: CallRecord, missing: tuple[str, ...]) -> Parked:
    return Parked(call.id, call.round, call.questions, call.deadline, missing)


def _round_plan(start: Snapshot, limits: Limits, modes: frozenset[Mode], leave_open: str | None) -> Plan:
    call, now = start.call, start.now
    if leave_open is None:
        decision = resume_decision(call.questions, start.answers, now=now, deadline=call.deadline)
    else:
        decision = look_decision(call.questions, start.answers, open_key=leave_open, now=now, deadline=call.deadline)
    if isinstance(decision, Waiting):
        return _parked(call, decision.missing)
    claim = yield Claim(call.id, call.round, now, limits.lease)
    if claim is None:
        return Claimed(call.id, call.round)
    sent, sending = decision.wire(), call.round + 1
    answer = yield SendRound(call.id, sending, sent, (call.pending or {}).get("requestState"))
    if isinstance(answer, Refused):
        error = refused(answer.code, answer.message, answer.data, call_id=call.id, round_=sending, modes=modes)
        return (yield from _give_up(call, claim, sent, now, error))
    if isinstance(answer, Failed):
        return (yield from _give_up(call, claim, sent, now, answer.error))
    result, task = dict(answer.result), None
    if is_task(result):  # the answers were what the task needed first: it waits on the server now
        try:
            task = made(result, server=call.server, call_id=call.id, kept="the call is marked failed")
        except ServerProtocolError as exc:
            return (yield from _give_up(call, claim, sent, now, exc))
        result = waiting_round(task[0], result)
    if decision.cancelled:
        yield Log(f"call {call.id} round {call.round}: deadline passed, cancelled {', '.join(decision.cancelled)}")
    asking = result.get("resultType") == "input_required"
    # A look that finds the account still not connected is asked the same link again: not a round to count, and
    # no more time (the call waits until its own deadline). A round past its deadline was not a look.
    looked = leave_open is not None and leave_open not in decision.responses
    looked_again = looked and leave_open in (result.get("inputRequests") or {})
    if asking and sending > limits.max_rounds and not looked_again:
        return (yield from _past_cap(call, claim, sending, sent, now, limits))
    at = answer.at
    if not asking:
        if not (yield Complete(call.id, claim, call.round, sent, at, result)):
            return Claimed(call.id, call.round)
        return Completed(call.id, result, rounds=sending)
    deadline = call.deadline if looked_again else at + limits.answer_wait
    if not (yield ParkAgain(call.id, claim, call.round, sent, at, result, deadline, task)):
        return Claimed(call.id, call.round)
    if task is not None:  # polled on, as a call the server made a task of at once
        return (yield from _task_plan((yield Reload(call.id)), task[0], limits))
    questions = pending_questions(call.id, sending, result, origin=call.origin)
    return Parked(call.id, sending, questions, deadline, tuple(q.key for q in questions))


def _past_cap(
    call: CallRecord, claim: str, asked: int, sent: Mapping[str, Any], now: float, limits: Limits
) -> Generator[Step, Any, Raise]:
    """The server asked for round `asked`, past the cap of rounds (`Limits.max_rounds`): the call fails."""
    past = (
        f"the server asked for round {asked}, past this runtime's cap of {limits.max_rounds} (ASKBACK_CALL_MAX_ROUNDS)"
    )
    yield Fail(call.id, claim, call.round, sent, now, past)
    return Raise(ServerRefusedError(f"call {call.id}: {past}"))


def _give_up(
    call: CallRecord, claim: str, sent: Mapping[str, Any], now: float, error: BaseException
) -> Generator[Step, Any, Raise]:
    """A claimed round the server did not take: the call fails with `error` (`fails_call`), or the claim goes back."""
    if fails_call(error):
        yield Fail(call.id, claim, call.round, sent, now, str(error))
    else:
        yield Release(call.id, claim)
    return Raise(error)


def _task_plan(start: Snapshot, task_id: str, limits: Limits) -> Plan:
    """Drive a task call until it waits on people (`Parked`), ends, or another process moved it on (`Claimed`)."""
    snapshot, idle = start, 0
    while True:
        call, now = snapshot.call, snapshot.now
        finished = _finished(call)
        if finished is not None:
            return finished
        decision = resume_decision(call.questions, snapshot.answers, now=now, deadline=call.deadline)
        if isinstance(decision, Waiting):
            return _parked(call, decision.missing)
        late = call.deadline is not None and now >= call.deadline
        moved: Outcome | Raise | None
        if (call.questions or late) and not cancel_sent(call):
            claim = yield Claim(call.id, call.round, now, limits.lease)
            if claim is None:
                return Claimed(call.id, call.round)
            if late:
                moved = yield from _cancel(call, task_id, claim, now, limits)
            else:
                moved = yield from _update(call, task_id, claim, decision.wire(), now, limits)
            idle = 0
        else:
            found = yield from _poll(call, task_id, now, limits, late=late)
            if isinstance(found, Raise):
                return found
            if isinstance(found[0], Unchanged):
                until = now + poll_delay(found[0].interval, idle)
                yield Wait(until if call.deadline is None else min(until, call.deadline))
                moved, idle = None, idle + 1
            else:
                moved, idle = (yield from _record_found(call, task_id, found[0], found[1], limits)), 0
        if moved is not None:
            return moved
        snapshot = yield Reload(call.id)


def _request_error(answer: Refused | Failed, call: CallRecord, task_id: str, method: str) -> BaseException:
    if isinstance(answer, Failed):
        return answer.error
    return task_refused(answer.code, answer.message, answer.data, call_id=call.id, task_id=task_id, method=method)


def _poll(
    call: CallRecord, task_id: str, now: float, limits: Limits, *, late: bool
) -> Generator[Step, Any, _Found | Raise]:
    """What `tasks/get` says (`read_task`; `after_cancel` once the task was asked to cancel, `late` when the wait
    for it ran out), and when."""
    answer = yield Poll(call.id, call.round + 1, task_id)
    if isinstance(answer, Refused):
        refusal = _request_error(answer, call, task_id, "tasks/get")
        if isinstance(refusal, ServerRefusedError) and refusal.retryable:
            return Raise(refusal)
        # An unknown or expired task never answers again: the call fails with the server's reason.
        return Ended("failed", error={"code": answer.code, "message": f"tasks/get was refused: {answer.message}"}), now
    if isinstance(answer, Failed):
        return Raise(answer.error)
    task = answer.result
    try:
        if cancel_sent(call):
            return after_cancel(task_id, task, over=late, waited=limits.cancel_wait), answer.at
        parked: frozenset[str] = frozenset()
        if task.get("status") == "input_required":
            parked = yield AskedKeys(call.id)
        return read_task(task_id, task, parked), answer.at
    except ServerProtocolError as exc:
        return Raise(exc)


def _record_found(
    call: CallRecord, task_id: str, found: Asks | Ended | Unconfirmed, at: float, limits: Limits
) -> Generator[Step, Any, Outcome | Raise | None]:
    """Record what a poll found: the task's next round of questions, or its end. None: go on."""
    claim = yield Claim(call.id, call.round, at, limits.lease)
    if claim is None:
        return Claimed(call.id, call.round)
    if not isinstance(found, Asks):
        return (yield from _end_task(call, task_id, claim, found, {}, at))
    if call.round + 1 > limits.max_rounds:  # a task that keeps asking is capped as a call's rounds are
        return (yield from _past_cap(call, claim, call.round + 1, {}, at, limits))
    if not (yield ParkAgain(call.id, claim, call.round, {}, at, found.pending, at + limits.answer_wait)):
        return Claimed(call.id, call.round)
    return None


def _update(
    call: CallRecord, task_id: str, claim: str, sent: Mapping[str, Any], now: float, limits: Limits
) -> Generator[Step, Any, Outcome | Raise | None]:
    """Send a round's answers (`tasks/update`); the call then waits on the server again. None: go on."""
    answer = yield UpdateTask(call.id, call.round + 1, task_id, sent)
    if not isinstance(answer, Answered):
        return (yield from _give_up(call, claim, sent, now, _request_error(answer, call, task_id, "tasks/update")))
    waiting = waiting_round(task_id, {"status": "working"})
    if not (yield ParkAgain(call.id, claim, call.round, sent, answer.at, waiting, answer.at + limits.answer_wait)):
        return Claimed(call.id, call.round)
    return None


def _cancel(
    call: CallRecord, task_id: str, claim: str, now: float, limits: Limits
) -> Generator[Step, Any, Outcome | Raise | None]:
    """Ask the server to cancel the task at the deadline (`tasks/cancel`), then read what became of it (`tasks/get`,
    `after_cancel`): the call ends as the task ended, or waits on the server for at most `cancel_wait` seconds more.
    None: go on."""
    answer = yield CancelTask(call.id, call.round + 1, task_id)
    if isinstance(answer, Refused):
        refusal = _request_error(answer, call, task_id, "tasks/cancel")
        if isinstance(refusal, ServerRefusedError) and refusal.retryable:
            return (yield from _give_up(call, claim, {}, now, refusal))
        # A cancel's answer is not the truth, `tasks/get` is: a refusal (a task that ended already, a server that does
        # not cancel) is logged, and the task is read all the same.
        yield Log(f"call {call.id}: {refusal}; reading the task")
    elif isinstance(answer, Failed):
        return (yield from _give_up(call, claim, {}, now, answer.error))
    answer = yield Poll(call.id, call.round + 1, task_id)
    if not isinstance(answer, Answered):
        return (yield from _give_up(call, claim, {}, now, _request_error(answer, call, task_id, "tasks/get")))
    try:
        found = after_cancel(task_id, answer.result, over=False, waited=limits.cancel_wait)
    except ServerProtocolError as exc:
        return (yield from _give_up(call, claim, {}, now, exc))
    if not isinstance(found, Unchanged):
        return (yield from _end_task(call, task_id, claim, found, {}, answer.at))
    status = answer.result.get("status")
    yield Log(f"call {call.id}: the task was asked to cancel and is still {status}; waiting for it")
    waiting = waiting_round(task_id, answer.result, cancel_sent=True)
    if not (yield ParkAgain(call.id, claim, call.round, {}, answer.at, waiting, answer.at + limits.cancel_wait)):
        return Claimed(call.id, call.round)
    return None


def _end_task(
    call: CallRecord, task_id: str, claim: str, ended: Ended | Unconfirmed, sent: Mapping[str, Any], now: float
) -> Generator[Step, Any, Outcome | Raise]:
    """The task ended (or the wait for its cancel ran out): the call completes with its result, or fails."""
    if isinstance(ended, Unconfirmed):
        yield Log(f"call {call.id}: the task was asked to cancel and had not ended when the wait ran out")
    elif ended.status == "failed":
        failure = task_failed(call.id, task_id, ended.error or {})
        yield Fail(call.id, claim, call.round, sent, now, str(failure))
        return Raise(failure)
    result = ended.result or {}
    if not (yield Complete(call.id, claim, call.round, sent, now, result)):
        return Claimed(call.id, call.round)
    return Completed(call.id, result, rounds=call.round)
