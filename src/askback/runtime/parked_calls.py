"""Parked calls in the shared store: park a round, record answers, claim a resume, settle it.

Every change runs in one transaction. A resume is claimed with one conditional UPDATE (the call must still be
parked on that round, or claimed by a process whose lease ran out), so of two processes resuming one round exactly
one sends it. An answer is inserted under its (call, round, key) primary key, so a second answer to the same
question is refused rather than silently replacing the first. Which status a call may move from, and to, is
`call_status`'s table: every UPDATE here reads its allowed statuses from it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from sqlalchemy import ColumnElement, Connection, Float, String, Table, bindparam, func, insert, or_, select, update

from askback.db.database import Database
from askback.db.migrate import Component
from askback.db.sqlite import RawResult
from askback.errors import CallStateError, UnknownCallError
from askback.runtime._models import VERSION_TABLE, AnswerRow, CallRow, RoundRow
from askback.runtime.call_record import CallRecord, record_of
from askback.runtime.call_status import CallStatus, Move, allows, move, sources, target
from askback.runtime.questions import Answer, pending_questions

__all__ = ["MIGRATIONS", "CallRecord", "CallStatus", "ParkedCalls"]

MIGRATIONS = Component("runtime", Path(__file__).parent / "migrations", VERSION_TABLE, head="r004")

_CALLS = cast(Table, CallRow.__table__)
_ANSWERS = cast(Table, AnswerRow.__table__)
_ROUNDS = cast(Table, RoundRow.__table__)
_c, _an, _r = _CALLS.c, _ANSWERS.c, _ROUNDS.c


def _from(event: Move) -> ColumnElement[bool]:
    """The call's status is one `event` is allowed from (`call_status.TRANSITIONS`)."""
    return or_(*(_c.status == status.value for status in sources(event)))


_COLUMNS = (
    _c.id, _c.run_id, _c.principal, _c.server, _c.protocol, _c.method, _c.target, _c.arguments, _c.status,
    _c.round, _c.pending, _c.waiting, _c.deadline, _c.result, _c.error, _c.created_at, _c.updated_at,
    _c.server_name, _c.task_id, _c.poll_interval,
)  # fmt: skip
_GET = select(*_COLUMNS).where(_c.id == bindparam("id"))
_ADD_CALL = insert(_CALLS)
_ADD_ROUND = insert(_ROUNDS)
_ADD_ANSWER = insert(_ANSWERS)
_ANSWERS_OF = select(_an.key, _an.action, _an.content, _an.answered_by).where(
    _an.call_id == bindparam("call_id"), _an.round == bindparam("round")
)
_HAS_ANSWER = select(_an.action).where(
    _an.call_id == bindparam("call_id"), _an.round == bindparam("round"), _an.key == bindparam("key")
)
_ONE_LESS = (
    update(_CALLS)
    .where(_c.id == bindparam("b_id"), _c.round == bindparam("b_round"), _from(Move.ANSWER))
    .values(waiting=_c.waiting - 1, updated_at=bindparam("b_at"))
)
_CLAIM = (
    update(_CALLS)
    .where(
        _c.id == bindparam("b_id"),
        _c.round == bindparam("b_round"),
        or_(_from(Move.CLAIM), _from(Move.TAKE_OVER) & (_c.claimed_until < bindparam("b_now"))),
    )
    .values(status=target(Move.CLAIM).value, claim=bindparam("b_claim"), claimed_until=bindparam("b_until"))
)
_RELEASE = (
    update(_CALLS)
    .where(_c.id == bindparam("b_id"), _c.claim == bindparam("b_claim"), _from(Move.RELEASE))
    .values(status=target(Move.RELEASE).value, claim=None, claimed_until=None)
)
_PARK_NEXT = (
    update(_CALLS)
    .where(_c.id == bindparam("b_id"), _c.claim == bindparam("b_claim"), _from(Move.ASK))
    .values(
        status=target(Move.ASK).value,
        round=bindparam("b_round"),
        pending=bindparam("b_pending"),
        waiting=bindparam("b_waiting"),
        deadline=bindparam("b_deadline"),
        claim=None,
        claimed_until=None,
        updated_at=bindparam("b_at"),
    )
)
# A later round answered with a task (its questions asked before the task existed): the call waits on the task now.
_PARK_ON_TASK = _PARK_NEXT.values(task_id=bindparam("b_task"), poll_interval=bindparam("b_interval"))


def _finish(event: Move) -> Any:
    """The UPDATE that ends a claimed resume with `event` (complete, or fail)."""
    return (
        update(_CALLS)
        .where(_c.id == bindparam("b_id"), _c.claim == bindparam("b_claim"), _from(event))
        .values(
            status=target(event).value,
            pending=None,
            waiting=0,
            result=bindparam("b_result"),
            error=bindparam("b_error"),
            claim=None,
            claimed_until=None,
            updated_at=bindparam("b_at"),
        )
    )


_COMPLETE, _FAIL = _finish(Move.COMPLETE), _finish(Move.FAIL)
_SENT = (
    update(_ROUNDS)
    .where(_r.call_id == bindparam("b_call"), _r.round == bindparam("b_round"))
    .values(sent=bindparam("b_sent"), sent_at=bindparam("b_at"))
)
_ROUNDS_OF = select(_r.round, _r.asked, _r.asked_at, _r.sent, _r.sent_at).where(_r.call_id == bindparam("call_id"))
_DUE = (
    select(_c.id)
    .where(
        or_(
            _from(Move.CLAIM) & or_(_c.waiting == 0, _c.deadline <= bindparam("now")),
            _from(Move.TAKE_OVER) & (_c.claimed_until < bindparam("now")),
        )
    )
    .order_by(_c.updated_at)
    .limit(bindparam("limit"))
)


_LISTINGS: dict[tuple[tuple[str, ...], bool, bool, bool], Any] = {}


def _listing(status: tuple[str, ...], by_principal: bool, by_run: bool, paged: bool) -> Any:
    """The listing statement for one combination of filters, built once and kept (SQLite's fast path compiles a
    statement object once), newest first so that the indexes are read backwards without a sort."""
    key = (status, by_principal, by_run, paged)
    found = _LISTINGS.get(key)
    if found is None:
        query = select(*_COLUMNS).where(or_(*(_c.status == s for s in status)))
        if by_principal:
            query = query.where(_c.principal == bindparam("principal"))
        if by_run:
            query = query.where(_c.run_id == bindparam("run_id"))
        if paged:
            at, last = bindparam("before_at", type_=Float), bindparam("before_id", type_=String)
            query = query.where(or_(_c.created_at < at, (_c.created_at == at) & (_c.id < last)))
        found = _LISTINGS[key] = query.order_by(_c.created_at.desc(), _c.id.desc()).limit(bindparam("limit"))
    return found


def _tuples(result: Any) -> list[tuple[Any, ...]]:
    # SQLite's fast path hands plain tuples over without building a namespace per row; SQLAlchemy's rows are tuples.
    return result.tuples() if isinstance(result, RawResult) else list(result.all())


def _record(row: Any) -> CallRecord:
    # The columns are selected in the record's field order (`_COLUMNS`): positional, which is what a long listing
    # spends its time on otherwise.
    # (SQLite's fast path gives a namespace of the same columns, in the same order.)
    return record_of(tuple(vars(row).values()) if isinstance(row, SimpleNamespace) else tuple(row))


def _answer(row: Any) -> Answer:
    return Answer(row.action, None if row.content is None else json.loads(row.content))


def new_call_id() -> str:
    return "call_" + secrets.token_urlsafe(12)


def _dumps(value: Any) -> str:
    # Never sorted: a form's properties and a round's questions keep the order the server gave them.
    return json.dumps(value, separators=(",", ":"))


class ParkedCalls:
    """The runtime's calls in `store` (opened with the runtime's component among its migrations)."""

    def __init__(self, store: Database) -> None:
        self.store = store

    async def add(
        self,
        *,
        call_id: str,
        run_id: str | None,
        principal: str,
        server: str,
        protocol: str | None,
        method: str,
        target: str,
        arguments: Mapping[str, Any] | None,
        outcome: Mapping[str, Any],
        sent: Mapping[str, Any] | None,
        deadline: float,
        now: float,
        server_name: str | None = None,
        task: tuple[str, float] | None = None,
    ) -> CallRecord:
        """Record a call after its first round: parked on round 1 (`outcome` asks), or already finished; `task` is
        the (id, poll interval) of the task the server made of it."""
        asking = outcome.get("resultType") == "input_required"
        pending = _dumps(outcome) if asking else None
        waiting = len(pending_questions(call_id, 1, outcome)) if asking else 0
        row = {
            "id": call_id,
            "run_id": run_id,
            "principal": principal,
            "server": server,
            "protocol": protocol,
            "method": method,
            "target": target,
            "arguments": None if arguments is None else _dumps(arguments),
            "status": move(None, Move.ASK if asking else Move.COMPLETE).value,
            "round": 1,
            "pending": pending,
            "waiting": waiting,
            "deadline": deadline if asking else None,
            "result": None if asking else _dumps(outcome),
            "error": None,
            "claim": None,
            "claimed_until": None,
            "created_at": now,
            "updated_at": now,
            "server_name": server_name,
            "task_id": None if task is None else task[0],
            "poll_interval": None if task is None else task[1],
        }

        def write(conn: Connection) -> None:
            conn.execute(_ADD_CALL, row)
            if asking:
                conn.execute(_ADD_ROUND, {"call_id": call_id, "round": 1, "asked": pending, "asked_at": now})

        await self.store.transaction(write, doing="park a call")
        return record_of([row[c.name] for c in _COLUMNS])

    async def get(self, call_id: str) -> CallRecord:
        """The call, or `UnknownCallError`."""
        row = await self.store.read(lambda conn: conn.execute(_GET, {"id": call_id}).first(), doing="read a call")
        if row is None:
            raise UnknownCallError(f"no call {call_id!r} in {self.store.safe_url}; `askback inbox list` shows them")
        return _record(row)

    async def answers(self, call_id: str, round_: int) -> dict[str, Answer]:
        """The answers recorded for one round of a call, by input key."""
        rows = await self.store.read(
            lambda conn: conn.execute(_ANSWERS_OF, {"call_id": call_id, "round": round_}).all(), doing="read answers"
        )
        return {row.key: _answer(row) for row in rows}

    async def answer(self, call_id: str, round_: int, key: str, answer: Answer, *, by: str | None, now: float) -> int:
        """Record `answer` to question `key` of round `round_`; returns how many questions of the round still wait.
        Refused (`CallStateError`) when the call is no longer parked on that round or the question was answered."""

        def write(conn: Connection) -> int:
            row = conn.execute(_GET, {"id": call_id}).first()
            if row is None:
                raise UnknownCallError(f"no call {call_id!r}; `askback inbox list` shows the parked ones")
            if not allows(CallStatus(row.status), Move.ANSWER) or row.round != round_:
                raise CallStateError(
                    f"call {call_id} is not waiting on round {round_} any more ({row.status}, round {row.round})"
                )
            if key not in {q.key for q in pending_questions(call_id, round_, json.loads(row.pending))}:
                raise CallStateError(f"round {round_} of call {call_id} asks no question {key!r}")
            if conn.execute(_HAS_ANSWER, {"call_id": call_id, "round": round_, "key": key}).first() is not None:
                raise CallStateError(f"question {key!r} of call {call_id} (round {round_}) is already answered")
            conn.execute(
                _ADD_ANSWER,
                {
                    "call_id": call_id,
                    "round": round_,
                    "key": key,
                    "action": answer.action,
                    "content": None if answer.content is None else _dumps(answer.content),
                    "answered_by": by,
                    "answered_at": now,
                },
            )
            conn.execute(_ONE_LESS, {"b_id": call_id, "b_round": round_, "b_at": now})
            return int(row.waiting) - 1

        return await self.store.transaction(write, doing="record an answer", immediate=True)

    async def claim(self, call_id: str, round_: int, *, now: float, lease: float) -> str | None:
        """Claim the resume of `round_`: a claim token, or None when another process holds it or the call moved on."""
        token = secrets.token_urlsafe(12)
        params = {"b_id": call_id, "b_round": round_, "b_now": now, "b_claim": token, "b_until": now + lease}
        won = await self.store.transaction(
            lambda conn: conn.execute(_CLAIM, params).rowcount == 1, doing="claim a resume", immediate=True
        )
        return token if won else None

    async def release(self, call_id: str, claim: str) -> None:
        """Give a claimed resume back (the round could not be sent): the call is parked as it was."""
        await self.store.transaction(
            lambda conn: conn.execute(_RELEASE, {"b_id": call_id, "b_claim": claim}), doing="release a resume"
        )

    async def settle(
        self,
        call_id: str,
        claim: str,
        *,
        round_: int,
        sent: Mapping[str, Any],
        outcome: Mapping[str, Any] | None,
        error: str | None = None,
        deadline: float | None = None,
        now: float,
        task: tuple[str, float] | None = None,
    ) -> bool:
        """End a claimed resume: parked on the next round (`outcome` asks again; with `task`, the (id, poll
        interval) of a task the server made of the call on this round, waiting on it), completed (`outcome` is the
        result), or failed (`error`). False when the claim was lost (its lease ran out and another took it)."""

        def write(conn: Connection) -> bool:
            asking = outcome is not None and outcome.get("resultType") == "input_required"
            if asking:
                assert outcome is not None
                pending = _dumps(outcome)
                params = {
                    "b_id": call_id,
                    "b_claim": claim,
                    "b_round": round_ + 1,
                    "b_pending": pending,
                    "b_waiting": len(pending_questions(call_id, round_ + 1, outcome)),
                    "b_deadline": deadline,
                    "b_at": now,
                }
                if task is None:
                    moved = conn.execute(_PARK_NEXT, params)
                else:
                    moved = conn.execute(_PARK_ON_TASK, {**params, "b_task": task[0], "b_interval": task[1]})
            else:
                moved = conn.execute(
                    _FAIL if error is not None else _COMPLETE,
                    {
                        "b_id": call_id,
                        "b_claim": claim,
                        "b_result": None if outcome is None else _dumps(outcome),
                        "b_error": error,
                        "b_at": now,
                    },
                )
            if moved.rowcount != 1:
                return False
            conn.execute(_SENT, {"b_call": call_id, "b_round": round_, "b_sent": _dumps(sent), "b_at": now})
            if asking:
                conn.execute(_ADD_ROUND, {"call_id": call_id, "round": round_ + 1, "asked": pending, "asked_at": now})
            return True

        return await self.store.transaction(write, doing="settle a resume", immediate=True)

    async def rounds(self, call_id: str) -> list[dict[str, Any]]:
        """Every round of the call so far: what the server asked, what was sent back (and when)."""
        rows = await self.store.read(
            lambda conn: conn.execute(_ROUNDS_OF, {"call_id": call_id}).all(), doing="read a call's rounds"
        )
        return [
            {
                "round": row.round,
                "asked": json.loads(row.asked),
                "asked_at": row.asked_at,
                "sent": None if row.sent is None else json.loads(row.sent),
                "sent_at": row.sent_at,
            }
            for row in sorted(rows, key=lambda r: r.round)
        ]

    async def listing(
        self,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        status: Sequence[CallStatus] = (CallStatus.PARKED,),
        limit: int = 1000,
        before: tuple[float, str] | None = None,
    ) -> list[CallRecord]:
        """Calls, newest first: by default parked ones; narrowed to one person or one run. At most `limit`; the next
        page starts `before` the last one's `(created_at, id)` (`pages` walks them all)."""
        query = _listing(
            tuple(CallStatus(s).value for s in status), principal is not None, run_id is not None, before is not None
        )
        params: dict[str, Any] = {"limit": limit}
        if principal is not None:
            params["principal"] = principal
        if run_id is not None:
            params["run_id"] = run_id
        if before is not None:
            params["before_at"], params["before_id"] = before
        rows = await self.store.read(lambda conn: _tuples(conn.execute(query, params)), doing="list calls")
        return [record_of(row) for row in rows]

    async def pages(
        self,
        *,
        principal: str | None = None,
        run_id: str | None = None,
        status: Sequence[CallStatus] = (CallStatus.PARKED,),
        size: int = 1000,
    ) -> AsyncIterator[list[CallRecord]]:
        """Every matching call, newest first, `size` at a time."""
        before: tuple[float, str] | None = None
        while True:
            page = await self.listing(principal=principal, run_id=run_id, status=status, limit=size, before=before)
            if page:
                yield page
            if len(page) < size:
                return
            before = (page[-1].created_at, page[-1].id)

    async def count(self, *, status: CallStatus = CallStatus.PARKED) -> int:
        async with self.store.engine.connect() as conn:
            return int(
                (await conn.execute(select(func.count()).where(_c.status == CallStatus(status).value))).scalar_one()
            )

    async def due(self, *, now: float, limit: int = 100) -> list[str]:
        """Calls that can be resumed now: every question answered, or the deadline passed, or a resume whose
        process stopped (its lease ran out); oldest first."""
        rows = await self.store.read(
            lambda conn: conn.execute(_DUE, {"now": now, "limit": limit}).all(), doing="find calls to resume"
        )
        return [row.id for row in rows]
