"""A parked call's resume as a plan, driven with plain data: every step the plan yields is compared with the one
expected and answered by the table, as the runtime's driver would answer it. No database, no server, no clock.

Also the table of a parked call's statuses (`call_status`) and which errors fail a call (`fails_call`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from askback.errors import CallStateError, ServerHTTPError, ServerProtocolError, ServerRefusedError, ServerTimeoutError
from askback.runtime import Claimed, Completed, Parked
from askback.runtime._tasks import cancelled_result, unconfirmed_result, waiting_round
from askback.runtime.call_record import CallRecord
from askback.runtime.call_status import TRANSITIONS, CallStatus, Move, allows, move, sources, target
from askback.runtime.questions import Answer
from askback.runtime.resume_plan import fails_call, resume_plan
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
    UpdateTask,
    Wait,
)

LIMITS = Limits(max_rounds=3, answer_wait=600, cancel_wait=30, lease=30)
T0 = 1_000.0
NOW = T0 + 10
AT = NOW + 1  # when the server's answer came
DEADLINE = T0 + 600
LATE = T0 + 700
SERVER = "https://tools.example/mcp"

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def form(message: str) -> dict[str, Any]:
    return {"method": "elicitation/create", "params": {"mode": "form", "message": message, "requestedSchema": SCHEMA}}


CONFIRM = {"confirm": form("Deploy?")}
ENV = {"env": form("Production?")}
ASKED = {"resultType": "input_required", "inputRequests": CONFIRM, "requestState": "s1"}
ASKED_AGAIN = {"resultType": "input_required", "inputRequests": ENV, "requestState": "s2"}
DONE = {"resultType": "complete", "content": [{"type": "text", "text": "Deployed."}], "isError": False}
YES = {"confirm": Answer("accept", {"ok": True})}
SENT_YES = {"confirm": {"action": "accept", "content": {"ok": True}}}

CALL = CallRecord(
    id="call_1",
    run_id=None,
    principal="ada",
    server=SERVER,
    protocol="2026-07-28",
    method="tools/call",
    target="deploy",
    arguments_json='{"service":"web"}',
    status=CallStatus.PARKED,
    round=1,
    pending_json=json.dumps(ASKED),
    waiting=1,
    deadline=DEADLINE,
    result_json=None,
    error=None,
    created_at=T0,
    updated_at=T0,
)

# A task call: round 1 waits on the server (no questions); round 2 waits on people (the task's questions).
WORKING = {"taskId": "t1", "status": "working", "pollIntervalMs": 1000}
TASK_ASKS = {"taskId": "t1", "status": "input_required", "inputRequests": ENV}
TASK_DONE = {"taskId": "t1", "status": "completed", "result": DONE}
ON_SERVER = replace(
    CALL, pending_json=json.dumps(waiting_round("t1", WORKING)), waiting=0, task_id="t1", poll_interval=1
)
ON_PEOPLE = replace(ON_SERVER, round=2, pending_json=json.dumps(waiting_round("t1", TASK_ASKS, ENV)), waiting=1)
ENV_YES = {"env": Answer("accept", {"ok": True})}
SENT_ENV_YES = {"env": {"action": "accept", "content": {"ok": True}}}

TIMEOUT = ServerTimeoutError("the MCP server did not answer within 30 s when call call_1 was resumed")
HTTP_502 = ServerHTTPError("the MCP server answered HTTP 502", status=502)
UNREADABLE = ServerProtocolError("the MCP server answered round 2 of call call_1 with something askback cannot read")
RETRY = {"retryable": True}


def start(call: CallRecord = CALL, answers: Mapping[str, Answer] | None = None, *, now: float = NOW) -> Snapshot:
    return Snapshot(call, answers or {}, now)


def parked(call: CallRecord, missing: tuple[str, ...], *, round: int | None = None, **changes: Any) -> Parked:
    """How `call` (as it is, or moved on to `round`) comes back parked."""
    if round is not None:
        call = replace(call, round=round, **changes)
    return Parked(call.id, call.round, call.questions, call.deadline, missing)


@dataclass(frozen=True)
class Raises:
    """The plan ends with an error of this type whose message holds `text` (or is `error` itself)."""

    type: type[BaseException]
    text: str = ""
    error: BaseException | None = None


@dataclass(frozen=True)
class Case:
    start: Snapshot
    script: Sequence[tuple[Any, Any]]
    end: Any
    leave_open: str | None = None


def drive(case: Case) -> Any:
    """Run the plan, checking each step against the script and answering it with the script's reply."""
    plan = resume_plan(case.start, LIMITS, modes=frozenset({"form"}), leave_open=case.leave_open)
    reply: Any = None
    for n in range(len(case.script) + 1):
        try:
            step = plan.send(reply)
        except StopIteration as stop:
            assert n == len(case.script), f"the plan ended after step {n} of {len(case.script)}"
            return stop.value
        assert n < len(case.script), f"the plan went on with {step!r}"
        expected, reply = case.script[n]
        assert step == expected, f"step {n}"
    raise AssertionError("unreachable")


def check_end(found: Any, expected: Any) -> None:
    if not isinstance(expected, Raises):
        assert found == expected
        return
    assert isinstance(found, Raise), found
    if expected.error is not None:
        assert found.error is expected.error
    assert type(found.error) is expected.type and expected.text in str(found.error), found.error


# --- MRTR: one round sent back -------------------------------------------------------------------------------------

CLAIM = Claim("call_1", 1, NOW, 30)
SEND_YES = SendRound("call_1", 2, SENT_YES, "s1")
REFUSED = "the server refused round 2 of call call_1: bad requestState (JSON-RPC -32602)"
CAP = "the server asked for round 4, past this runtime's cap of 3 (ASKBACK_CALL_MAX_ROUNDS)"
ROUND3 = replace(CALL, round=3)
DECLINED = {"resultType": "complete", "content": [{"type": "text", "text": "Not deployed."}], "isError": False}
CANCELLED_SENT = {"confirm": {"action": "cancel"}}

MRTR = {
    "an answered round is claimed, sent and completes the call": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Answered(DONE, AT)),
            (Complete("call_1", "tok", 1, SENT_YES, AT, DONE), True),
        ],
        Completed("call_1", DONE, rounds=2),
    ),
    "a round with a question unanswered before its deadline stays parked and nothing is sent": Case(
        start(), [], parked(CALL, ("confirm",))
    ),
    "a round another runtime has claimed is not sent from here": Case(
        start(answers=YES), [(CLAIM, None)], Claimed("call_1", 1)
    ),
    "a round whose claim was taken over while it was sent comes back claimed": Case(
        start(answers=YES),
        [(CLAIM, "tok"), (SEND_YES, Answered(DONE, AT)), (Complete("call_1", "tok", 1, SENT_YES, AT, DONE), False)],
        Claimed("call_1", 1),
    ),
    "the server asking again parks the call on the next round with a new deadline": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Answered(ASKED_AGAIN, AT)),
            (ParkAgain("call_1", "tok", 1, SENT_YES, AT, ASKED_AGAIN, AT + 600), True),
        ],
        parked(CALL, ("env",), round=2, pending_json=json.dumps(ASKED_AGAIN), deadline=AT + 600),
    ),
    "a refusal the server does not mark retryable fails the call": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Refused(-32602, "bad requestState")),
            (Fail("call_1", "tok", 1, SENT_YES, NOW, REFUSED), True),
        ],
        Raises(ServerRefusedError, REFUSED),
    ),
    "a refusal the server marks retryable gives the claim back and the call stays parked": Case(
        start(answers=YES),
        [(CLAIM, "tok"), (SEND_YES, Refused(-32000, "database down", RETRY)), (Release("call_1", "tok"), None)],
        Raises(ServerRefusedError, "the server says to retry, so nothing was lost"),
    ),
    "a timeout gives the claim back and the call stays parked with its answers": Case(
        start(answers=YES),
        [(CLAIM, "tok"), (SEND_YES, Failed(TIMEOUT)), (Release("call_1", "tok"), None)],
        Raises(ServerTimeoutError, error=TIMEOUT),
    ),
    "an HTTP error gives the claim back": Case(
        start(answers=YES),
        [(CLAIM, "tok"), (SEND_YES, Failed(HTTP_502)), (Release("call_1", "tok"), None)],
        Raises(ServerHTTPError, error=HTTP_502),
    ),
    "an answer that cannot be read fails the call: its answers did reach the server": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Failed(UNREADABLE)),
            (Fail("call_1", "tok", 1, SENT_YES, NOW, str(UNREADABLE)), True),
        ],
        Raises(ServerProtocolError, error=UNREADABLE),
    ),
    "a process stopped while sending gives the claim back": Case(
        start(answers=YES),
        [(CLAIM, "tok"), (SEND_YES, Failed(interrupt := KeyboardInterrupt())), (Release("call_1", "tok"), None)],
        Raises(KeyboardInterrupt, error=interrupt),
    ),
    "a server asking past the round cap fails the call": Case(
        start(ROUND3, YES),
        [
            (Claim("call_1", 3, NOW, 30), "tok"),
            (SendRound("call_1", 4, SENT_YES, "s1"), Answered(ASKED_AGAIN, AT)),
            (Fail("call_1", "tok", 3, SENT_YES, NOW, CAP), True),
        ],
        Raises(ServerRefusedError, f"call call_1: {CAP}"),
    ),
    "the round cap does not stop a round that completes": Case(
        start(ROUND3, YES),
        [
            (Claim("call_1", 3, NOW, 30), "tok"),
            (SendRound("call_1", 4, SENT_YES, "s1"), Answered(DONE, AT)),
            (Complete("call_1", "tok", 3, SENT_YES, AT, DONE), True),
        ],
        Completed("call_1", DONE, rounds=4),
    ),
    "past its deadline a round goes with its unanswered questions answered cancel": Case(
        start(now=LATE),
        [
            (Claim("call_1", 1, LATE, 30), "tok"),
            (SendRound("call_1", 2, CANCELLED_SENT, "s1"), Answered(DECLINED, LATE)),
            (Log("call call_1 round 1: deadline passed, cancelled confirm"), None),
            (Complete("call_1", "tok", 1, CANCELLED_SENT, LATE, DECLINED), True),
        ],
        Completed("call_1", DECLINED, rounds=2),
    ),
    "a declined question is sent back as declined": Case(
        start(answers={"confirm": Answer("decline")}),
        [
            (CLAIM, "tok"),
            (SendRound("call_1", 2, {"confirm": {"action": "decline"}}, "s1"), Answered(DECLINED, AT)),
            (Complete("call_1", "tok", 1, {"confirm": {"action": "decline"}}, AT, DECLINED), True),
        ],
        Completed("call_1", DECLINED, rounds=2),
    ),
    "a question the person cancelled is sent back as cancelled, before the deadline": Case(
        start(answers={"confirm": Answer("cancel")}),
        [
            (CLAIM, "tok"),
            (SendRound("call_1", 2, CANCELLED_SENT, "s1"), Answered(DECLINED, AT)),
            (Complete("call_1", "tok", 1, CANCELLED_SENT, AT, DECLINED), True),
        ],
        Completed("call_1", DECLINED, rounds=2),
    ),
    "a look leaves the link unanswered and, asked the same link again, waits until its own deadline": Case(
        start(replace(CALL, pending_json=json.dumps({**ASKED, "inputRequests": {**CONFIRM, **ENV}})), YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Answered(ASKED_AGAIN, AT)),
            (ParkAgain("call_1", "tok", 1, SENT_YES, AT, ASKED_AGAIN, DEADLINE), True),
        ],
        parked(CALL, ("env",), round=2, pending_json=json.dumps(ASKED_AGAIN)),
        leave_open="env",
    ),
    "a completed call comes back with its result and nothing is sent": Case(
        start(replace(CALL, status=CallStatus.COMPLETED, round=2, pending_json=None, result_json=json.dumps(DONE))),
        [],
        Completed("call_1", DONE, rounds=2),
    ),
    "a failed call raises its error again and nothing is sent": Case(
        start(replace(CALL, status=CallStatus.FAILED, pending_json=None, error="refused")),
        [],
        Raises(ServerRefusedError, "call call_1 failed: refused"),
    ),
    "a round the server answers with a task waits on the task and polls it": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Answered({"resultType": "task", **WORKING}, AT)),
            (
                ParkAgain("call_1", "tok", 1, SENT_YES, AT, waiting_round("t1", WORKING), AT + 600, ("t1", 1.0)),
                True,
            ),
            (Reload("call_1"), start(replace(ON_SERVER, round=2), now=AT)),
            (Poll("call_1", 3, "t1"), Answered(TASK_DONE, AT + 1)),
            (Claim("call_1", 2, AT + 1, 30), "tok2"),
            (Complete("call_1", "tok2", 2, {}, AT + 1, DONE), True),
        ],
        Completed("call_1", DONE, rounds=2),
    ),
    "a round answered with a task that names none fails the call": Case(
        start(answers=YES),
        [
            (CLAIM, "tok"),
            (SEND_YES, Answered({"resultType": "task", "status": "working"}, AT)),
            (
                Fail(
                    "call_1",
                    "tok",
                    1,
                    SENT_YES,
                    NOW,
                    f"the MCP server at {SERVER} answered call call_1 with a task that has no taskId; the call is "
                    "marked failed. The server must be fixed to send tasks as SEP-2663 defines them",
                ),
                True,
            ),
        ],
        Raises(ServerProtocolError, "with a task that has no taskId; the call is marked failed"),
    ),
}

# --- a task the server made of the call ----------------------------------------------------------------------------

POLL = Poll("call_1", 2, "t1")
FAILED_TASK = {"taskId": "t1", "status": "failed", "error": {"code": -32000, "message": "disk full"}}
TASK_FAILED = "task t1 of call call_1 failed on the server: disk full (JSON-RPC -32000)"
CANCELLED = {"taskId": "t1", "status": "cancelled", "statusMessage": "stopped by an operator"}
UPDATE = UpdateTask("call_1", 3, "t1", SENT_ENV_YES)
ON_SERVER_AGAIN = replace(ON_SERVER, round=3)
UPDATE_REFUSED = "the server refused tasks/update for task t1 of call call_1: no such task (JSON-RPC -32602)"
CANCEL_SENT = replace(
    ON_SERVER, round=2, pending_json=json.dumps(waiting_round("t1", WORKING, cancel_sent=True)), deadline=LATE + 30
)
CANCEL_REFUSED = "the server refused tasks/cancel for task t1 of call call_1: already ended (JSON-RPC -32602)"

TASKS = {
    "a working task is polled again after its interval, longer each time nothing changed, until it completes": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(WORKING, NOW)),
            (Wait(NOW + 1.0), None),
            (Reload("call_1"), start(ON_SERVER, now=NOW + 1.0)),
            (POLL, Answered(WORKING, NOW + 1.0)),
            (Wait(NOW + 1.0 + 1.5), None),
            (Reload("call_1"), start(ON_SERVER, now=NOW + 2.5)),
            (POLL, Answered(TASK_DONE, NOW + 2.5)),
            (Claim("call_1", 1, NOW + 2.5, 30), "tok"),
            (Complete("call_1", "tok", 1, {}, NOW + 2.5, DONE), True),
        ],
        Completed("call_1", DONE, rounds=1),
    ),
    "a working task's next poll is never after the call's deadline": Case(
        start(ON_SERVER, now=DEADLINE - 0.5),
        [
            (POLL, Answered(WORKING, DEADLINE - 0.5)),
            (Wait(DEADLINE), None),
            (Reload("call_1"), start(replace(ON_SERVER, round=2, deadline=None))),
            (Poll("call_1", 3, "t1"), Failed(TIMEOUT)),
        ],
        Raises(ServerTimeoutError, error=TIMEOUT),
    ),
    "a completed task completes the call with its result": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(TASK_DONE, AT)),
            (Claim("call_1", 1, AT, 30), "tok"),
            (Complete("call_1", "tok", 1, {}, AT, DONE), True),
        ],
        Completed("call_1", DONE, rounds=1),
    ),
    "a failed task fails the call with the task's error": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(FAILED_TASK, AT)),
            (Claim("call_1", 1, AT, 30), "tok"),
            (Fail("call_1", "tok", 1, {}, AT, TASK_FAILED), True),
        ],
        Raises(ServerRefusedError, TASK_FAILED),
    ),
    "a cancelled task completes the call as cancelled": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(CANCELLED, AT)),
            (Claim("call_1", 1, AT, 30), "tok"),
            (Complete("call_1", "tok", 1, {}, AT, cancelled_result("t1", CANCELLED)), True),
        ],
        Completed("call_1", cancelled_result("t1", CANCELLED), rounds=1),
    ),
    "a task's input_required parks its new questions as the call's next round": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(TASK_ASKS, AT)),
            (AskedKeys("call_1"), frozenset()),
            (Claim("call_1", 1, AT, 30), "tok"),
            (ParkAgain("call_1", "tok", 1, {}, AT, waiting_round("t1", TASK_ASKS, ENV), AT + 600), True),
            (Reload("call_1"), start(replace(ON_PEOPLE, deadline=AT + 600), now=AT)),
        ],
        parked(replace(ON_PEOPLE, deadline=AT + 600), ("env",)),
    ),
    "a task that keeps asking is stopped at the round cap, as a call's rounds are": Case(
        start(replace(ON_SERVER, round=3)),
        [
            (Poll("call_1", 4, "t1"), Answered(TASK_ASKS, AT)),
            (AskedKeys("call_1"), frozenset()),
            (Claim("call_1", 3, AT, 30), "tok"),
            (Fail("call_1", "tok", 3, {}, AT, CAP), True),
        ],
        Raises(ServerRefusedError, f"call call_1: {CAP}"),
    ),
    "a task asking only what was parked before is polled again, nothing parked twice": Case(
        start(ON_SERVER),
        [
            (POLL, Answered(TASK_ASKS, AT)),
            (AskedKeys("call_1"), frozenset({"env"})),
            (Wait(NOW + 1.0), None),
            (Reload("call_1"), start(ON_SERVER, now=NOW + 1.0)),
            (POLL, Answered(TASK_DONE, AT + 1)),
            (Claim("call_1", 1, AT + 1, 30), "tok"),
            (Complete("call_1", "tok", 1, {}, AT + 1, DONE), True),
        ],
        Completed("call_1", DONE, rounds=1),
    ),
    "a task's answered round goes back with tasks/update and the call waits on the server again": Case(
        start(ON_PEOPLE, ENV_YES),
        [
            (Claim("call_1", 2, NOW, 30), "tok"),
            (UPDATE, Answered({}, AT)),
            (
                ParkAgain("call_1", "tok", 2, SENT_ENV_YES, AT, waiting_round("t1", {"status": "working"}), AT + 600),
                True,
            ),
            (Reload("call_1"), start(ON_SERVER_AGAIN, now=AT)),
            (Poll("call_1", 4, "t1"), Answered(TASK_DONE, AT + 1)),
            (Claim("call_1", 3, AT + 1, 30), "tok2"),
            (Complete("call_1", "tok2", 3, {}, AT + 1, DONE), True),
        ],
        Completed("call_1", DONE, rounds=3),
    ),
    "a task's declined question goes back declined with tasks/update": Case(
        start(ON_PEOPLE, {"env": Answer("decline")}),
        [
            (Claim("call_1", 2, NOW, 30), "tok"),
            (UpdateTask("call_1", 3, "t1", {"env": {"action": "decline"}}), Answered({}, AT)),
            (
                ParkAgain(
                    "call_1",
                    "tok",
                    2,
                    {"env": {"action": "decline"}},
                    AT,
                    waiting_round("t1", {"status": "working"}),
                    AT + 600,
                ),
                True,
            ),
            (Reload("call_1"), start(ON_SERVER_AGAIN, now=AT)),
            (Poll("call_1", 4, "t1"), Answered(CANCELLED, AT)),
            (Claim("call_1", 3, AT, 30), "tok2"),
            (Complete("call_1", "tok2", 3, {}, AT, cancelled_result("t1", CANCELLED)), True),
        ],
        Completed("call_1", cancelled_result("t1", CANCELLED), rounds=3),
    ),
    "a task's question still unanswered keeps the call parked and nothing is sent": Case(
        start(ON_PEOPLE), [], parked(ON_PEOPLE, ("env",))
    ),
    "a task's round another runtime has claimed is not sent from here": Case(
        start(ON_PEOPLE, ENV_YES), [(Claim("call_1", 2, NOW, 30), None)], Claimed("call_1", 2)
    ),
    "what a poll found is not recorded when another runtime claimed the call first": Case(
        start(ON_SERVER),
        [(POLL, Answered(TASK_DONE, AT)), (Claim("call_1", 1, AT, 30), None)],
        Claimed("call_1", 1),
    ),
    "a tasks/update refused for good fails the call": Case(
        start(ON_PEOPLE, ENV_YES),
        [
            (Claim("call_1", 2, NOW, 30), "tok"),
            (UPDATE, Refused(-32602, "no such task")),
            (Fail("call_1", "tok", 2, SENT_ENV_YES, NOW, UPDATE_REFUSED), True),
        ],
        Raises(ServerRefusedError, UPDATE_REFUSED),
    ),
    "a tasks/update refused as retryable gives the claim back": Case(
        start(ON_PEOPLE, ENV_YES),
        [
            (Claim("call_1", 2, NOW, 30), "tok"),
            (UPDATE, Refused(-32000, "busy", RETRY)),
            (Release("call_1", "tok"), None),
        ],
        Raises(ServerRefusedError, "the server says to retry, so nothing was lost"),
    ),
    "a tasks/update that times out gives the claim back": Case(
        start(ON_PEOPLE, ENV_YES),
        [(Claim("call_1", 2, NOW, 30), "tok"), (UPDATE, Failed(TIMEOUT)), (Release("call_1", "tok"), None)],
        Raises(ServerTimeoutError, error=TIMEOUT),
    ),
    "a poll that times out holds no claim and changes nothing": Case(
        start(ON_SERVER), [(POLL, Failed(TIMEOUT))], Raises(ServerTimeoutError, error=TIMEOUT)
    ),
    "a poll refused as retryable changes nothing": Case(
        start(ON_SERVER),
        [(POLL, Refused(-32000, "busy", RETRY))],
        Raises(ServerRefusedError, "the server says to retry"),
    ),
    "a poll refused for good (the task is gone) fails the call with the server's reason": Case(
        start(ON_SERVER),
        [
            (POLL, Refused(-32602, "no such task")),
            (Claim("call_1", 1, NOW, 30), "tok"),
            (
                Fail(
                    "call_1",
                    "tok",
                    1,
                    {},
                    NOW,
                    "task t1 of call call_1 failed on the server: tasks/get was refused: no such task (JSON-RPC -32602)",
                ),
                True,
            ),
        ],
        Raises(ServerRefusedError, "tasks/get was refused: no such task"),
    ),
    "a poll answered with something that is not the task raises and changes nothing": Case(
        start(ON_SERVER),
        [(POLL, Answered({"taskId": "t2", "status": "working"}, AT))],
        Raises(ServerProtocolError, "with something that is not that task"),
    ),
    "past the deadline a task is asked to cancel and ends as the server says it ended": Case(
        start(ON_PEOPLE, now=LATE),
        [
            (Claim("call_1", 2, LATE, 30), "tok"),
            (CancelTask("call_1", 3, "t1"), Answered({}, LATE)),
            (Poll("call_1", 3, "t1"), Answered(CANCELLED, LATE)),
            (Complete("call_1", "tok", 2, {}, LATE, cancelled_result("t1", CANCELLED)), True),
        ],
        Completed("call_1", cancelled_result("t1", CANCELLED), rounds=2),
    ),
    "a task asked to cancel that completes after all completes the call with its result": Case(
        start(ON_SERVER, now=LATE),
        [
            (Claim("call_1", 1, LATE, 30), "tok"),
            (CancelTask("call_1", 2, "t1"), Answered({}, LATE)),
            (POLL, Answered(TASK_DONE, LATE)),
            (Complete("call_1", "tok", 1, {}, LATE, DONE), True),
        ],
        Completed("call_1", DONE, rounds=1),
    ),
    "a task still working after a cancel is waited for, then ends unconfirmed, never cancelled": Case(
        start(ON_PEOPLE, now=LATE),
        [
            (Claim("call_1", 2, LATE, 30), "tok"),
            (CancelTask("call_1", 3, "t1"), Answered({}, LATE)),
            (Poll("call_1", 3, "t1"), Answered(WORKING, LATE)),
            (Log("call call_1: the task was asked to cancel and is still working; waiting for it"), None),
            (ParkAgain("call_1", "tok", 2, {}, LATE, waiting_round("t1", WORKING, cancel_sent=True), LATE + 30), True),
            (Reload("call_1"), start(CANCEL_SENT, now=LATE + 31)),
            (Poll("call_1", 3, "t1"), Answered(WORKING, LATE + 31)),
            (Claim("call_1", 2, LATE + 31, 30), "tok2"),
            (Log("call call_1: the task was asked to cancel and had not ended when the wait ran out"), None),
            (Complete("call_1", "tok2", 2, {}, LATE + 31, unconfirmed_result("t1", WORKING, 30)), True),
        ],
        Completed("call_1", unconfirmed_result("t1", WORKING, 30), rounds=2),
    ),
    "a refused cancel is logged and the task read all the same": Case(
        start(ON_SERVER, now=LATE),
        [
            (Claim("call_1", 1, LATE, 30), "tok"),
            (CancelTask("call_1", 2, "t1"), Refused(-32602, "already ended")),
            (Log(f"call call_1: {CANCEL_REFUSED}; reading the task"), None),
            (POLL, Answered(FAILED_TASK, LATE)),
            (Fail("call_1", "tok", 1, {}, LATE, TASK_FAILED), True),
        ],
        Raises(ServerRefusedError, TASK_FAILED),
    ),
    "a cancel refused as retryable gives the claim back": Case(
        start(ON_SERVER, now=LATE),
        [
            (Claim("call_1", 1, LATE, 30), "tok"),
            (CancelTask("call_1", 2, "t1"), Refused(-32000, "busy", RETRY)),
            (Release("call_1", "tok"), None),
        ],
        Raises(ServerRefusedError, "the server says to retry"),
    ),
    "a cancel that times out gives the claim back": Case(
        start(ON_SERVER, now=LATE),
        [
            (Claim("call_1", 1, LATE, 30), "tok"),
            (CancelTask("call_1", 2, "t1"), Failed(TIMEOUT)),
            (Release("call_1", "tok"), None),
        ],
        Raises(ServerTimeoutError, error=TIMEOUT),
    ),
}


@pytest.mark.parametrize("case", MRTR.values(), ids=MRTR.keys())
def test_an_mrtr_resume(case: Case) -> None:
    check_end(drive(case), case.end)


@pytest.mark.parametrize("case", TASKS.values(), ids=TASKS.keys())
def test_a_task_resume(case: Case) -> None:
    check_end(drive(case), case.end)


# --- which errors fail a call ----------------------------------------------------------------------------------------

FAILS = {
    "a refusal for good": (ServerRefusedError("refused", code=-32602), True),
    "an answer that cannot be read": (UNREADABLE, True),
    "a refusal the server says to retry": (ServerRefusedError("busy", code=-32000, data=RETRY), False),
    "a timeout": (TIMEOUT, False),
    "an HTTP error": (HTTP_502, False),
    "the process being stopped": (KeyboardInterrupt(), False),
}


@pytest.mark.parametrize(("error", "fails"), FAILS.values(), ids=FAILS.keys())
def test_only_a_refusal_for_good_or_an_unreadable_answer_fails_a_call(error: BaseException, fails: bool) -> None:
    assert fails_call(error) is fails


# --- the statuses of a parked call ---------------------------------------------------------------------------------

P, R, C, F = CallStatus.PARKED, CallStatus.RESUMING, CallStatus.COMPLETED, CallStatus.FAILED
ALLOWED = [
    (None, Move.ASK, P),
    (None, Move.COMPLETE, C),
    (P, Move.ANSWER, P),
    (P, Move.CLAIM, R),
    (R, Move.TAKE_OVER, R),
    (R, Move.RELEASE, P),
    (R, Move.ASK, P),
    (R, Move.COMPLETE, C),
    (R, Move.FAIL, F),
]


@pytest.mark.parametrize(("before", "event", "after"), ALLOWED)
def test_every_allowed_move_leads_where_the_table_says(
    before: CallStatus | None, event: Move, after: CallStatus
) -> None:
    assert move(before, event) is after
    assert allows(before, event)


def test_the_table_allows_those_moves_and_no_other() -> None:
    assert {(before, event): after for before, event, after in ALLOWED} == dict(TRANSITIONS)
    assert sources(Move.CLAIM) == (P,) and sources(Move.TAKE_OVER) == (R,) and sources(Move.COMPLETE) == (R,)
    assert target(Move.RELEASE) is P and target(Move.FAIL) is F


@pytest.mark.parametrize(
    ("before", "event", "said"),
    [
        (C, Move.CLAIM, "a completed call cannot claim; it can: nothing"),
        (P, Move.FAIL, "a parked call cannot fail; it can: answer, claim"),
        (F, Move.ANSWER, "a failed call cannot answer; it can: nothing"),
        (None, Move.CLAIM, "a call not recorded yet cannot claim; it can: ask, complete"),
    ],
)
def test_a_move_the_table_does_not_allow_is_refused_saying_what_is(
    before: CallStatus | None, event: Move, said: str
) -> None:
    assert not allows(before, event)
    with pytest.raises(CallStateError) as refused:
        move(before, event)
    assert str(refused.value) == said
