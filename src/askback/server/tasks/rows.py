"""A task's row in the shared store (`askback_tasks`), read into one frozen `TaskRecord` and changed only through
`change`: one transaction that reads the row (locked on PostgreSQL, under SQLite's write lock), asks a pure function
what it becomes, and writes that. Every instance sees the same tasks; what must happen once is decided here."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Table, bindparam, delete, func, insert, or_, select, update

from askback.audit import AuditEvent
from askback.audit.emit import emit_all
from askback.core.caller import Caller, split_principal, split_scopes
from askback.core.state import FlowState
from askback.errors import StoreUnavailableError
from askback.server.tasks.status import TERMINAL, TaskStatus, can_move
from askback.store import EffectClaim, Store, hold_lock
from askback.store.ledger import EFFECTS
from askback.store.models import TaskRow

__all__ = [
    "TaskRecord",
    "awaiting_of",
    "cancel",
    "cancelled",
    "change",
    "claim_effect",
    "insert_task",
    "prune",
    "read_task",
    "settle_run",
    "task_caller",
    "waiting_of",
]

# How often an effect's claim is tried again when the row it collided with vanished (released) before it was read.
_RACE_ATTEMPTS = 5

_TASKS = cast(Table, TaskRow.__table__)
_t = _TASKS.c

_INSERT = insert(_TASKS)
# The tasks of one principal (anonymous callers together) that have neither ended nor expired.
_LIVE = (
    select(func.count())
    .select_from(_TASKS)
    .where(
        _t.principal.is_not_distinct_from(bindparam("b_principal")),
        or_(*(_t.status == str(s) for s in TaskStatus if s not in TERMINAL)),
        _t.expires_at >= bindparam("b_now"),
    )
)
_READ = select(_TASKS).where(_t.task_id == bindparam("b_task_id"))
# One principal's tasks waiting for answers, not expired.
_WAITING = (
    select(_TASKS)
    .where(
        _t.principal == bindparam("b_principal"),
        _t.status == str(TaskStatus.INPUT_REQUIRED),
        _t.expires_at >= bindparam("b_now"),
    )
    .order_by(_t.created_at)
)
# One principal's tasks (anonymous callers together) working with no lease: waiting for an approval, not expired.
_AWAITING = (
    select(_TASKS)
    .where(
        _t.principal.is_not_distinct_from(bindparam("b_principal")),
        _t.status == str(TaskStatus.WORKING),
        _t.lease_owner.is_(None),
        _t.expires_at >= bindparam("b_now"),
    )
    .order_by(_t.created_at)
)
_READ_LOCKED = _READ.with_for_update()
_PRUNE = delete(_TASKS).where(_t.expires_at < bindparam("b_now"))
# A task still `working` under this run's lease, not expired, marked as having started an effect (the first mark
# stays): one statement that checks the row, locks it and marks it.
_START_EFFECT = (
    update(_TASKS)
    .where(
        _t.task_id == bindparam("b_task_id"),
        _t.status == str(TaskStatus.WORKING),
        _t.lease_owner == bindparam("b_owner"),
        _t.expires_at >= bindparam("b_at"),
    )
    .values(effect_started_at=func.coalesce(_t.effect_started_at, bindparam("b_at")))
)
_MUTABLE = ("status", "status_message", "updated_at", "flow", "outstanding", "responses", "result", "error")
_WRITE = (
    update(_TASKS)
    .where(_t.task_id == bindparam("b_task_id"))
    .values({name: bindparam(f"b_{name}") for name in (*_MUTABLE, "lease_owner", "lease_until")})
)
# The end of a run, written only while the task is still `working` under that run's lease.
_SETTLE = _WRITE.where(_t.status == str(TaskStatus.WORKING), _t.lease_owner == bindparam("b_owner"))


@dataclass(frozen=True)
class TaskRecord:
    """One task as stored. `outstanding`: the questions it waits on, by wire key (`{"key": the flow's question key,
    "request": the input request}`); `responses`: the answers received for them so far, by the flow's key."""

    task_id: str
    principal: str | None
    scopes: tuple[str, ...]
    tool: str
    arguments: Mapping[str, Any]
    capabilities: Mapping[str, Any]
    status: TaskStatus
    status_message: str | None
    created_at: float
    updated_at: float
    expires_at: float
    ttl_ms: int
    poll_ms: int
    flow: FlowState
    outstanding: Mapping[str, Mapping[str, Any]]
    responses: Mapping[str, Any]
    result: Mapping[str, Any] | None = None
    error: Mapping[str, Any] | None = None
    lease_owner: str | None = None
    lease_until: float | None = None
    # When the task first claimed an effect: only `claim_effect` sets it, and nothing clears it.
    effect_started_at: float | None = None
    # Who acts for the caller (the token's `act` chain, `Caller.actors`), kept so that every run carries them.
    actors: tuple[str, ...] = ()

    @property
    def awaited_approvals(self) -> frozenset[str]:
        """The approval requests the task waits on, by id, while it waits only for them: `working` with no lease
        (nothing runs its handler), each question it keeps an approval's status link naming its request (`approval`).
        Empty otherwise."""
        if self.status != TaskStatus.WORKING or self.lease_owner is not None or not self.outstanding:
            return frozenset()
        found = [entry.get("approval") for entry in self.outstanding.values()]
        if not all(isinstance(approval_id, str) and approval_id for approval_id in found):
            return frozenset()
        return frozenset(cast(list[str], found))

    def moved(self, **changes: Any) -> TaskRecord:
        """This task with `changes`; a status it may not move to is a programming error."""
        status = changes.get("status", self.status)
        if not can_move(self.status, status):
            raise ValueError(f"a task may not go from {self.status} to {status}")
        return dataclasses.replace(self, **changes)

    def back_to_work(self, *, owner: str, lease: float, now: float) -> TaskRecord:
        """This waiting task `working` again under `owner`'s lease from `now`, its questions and status message
        dropped (what it waited on, an account or an approval, came)."""
        return self.moved(
            status=TaskStatus.WORKING,
            status_message=None,
            outstanding={},
            updated_at=now,
            lease_owner=owner,
            lease_until=now + lease,
        )


def task_caller(record: TaskRecord) -> Caller | None:
    """The caller a run of the task's handler runs as: its principal, scopes and the actors of its token, as the
    request that made it had them; `None` for a task made without a token."""
    if record.principal is None:
        return None
    return Caller(
        record.principal,
        frozenset(record.scopes),
        issuer=split_principal(record.principal)[0],
        actors=record.actors,
    )


def cancelled(record: TaskRecord, now: float) -> TaskRecord | None:
    """What a cancel (`tasks/cancel`, `askback tasks cancel`) makes of the task: `cancelled`, with nothing outstanding
    and no lease. A task that has ended stays as it is (`None`), and so does one that has started an effect (claimed
    it, whether the effect is running, done, or raised and was released): the task runs on to its result, so that
    "cancelled" always means no effect of the task started."""
    if record.status in TERMINAL or record.effect_started_at is not None:
        return None
    return record.moved(
        status=TaskStatus.CANCELLED,
        status_message="Cancelled.",
        outstanding={},
        responses={},
        updated_at=now,
        lease_owner=None,
        lease_until=None,
    )


def _row(record: TaskRecord) -> dict[str, Any]:
    return {
        "task_id": record.task_id,
        "principal": record.principal,
        "scopes": " ".join(record.scopes) or None,
        "tool": record.tool,
        "arguments": _dump(record.arguments),
        "capabilities": _dump(record.capabilities),
        "status": str(record.status),
        "status_message": record.status_message,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "expires_at": record.expires_at,
        "ttl_ms": record.ttl_ms,
        "poll_ms": record.poll_ms,
        "flow": record.flow.encode(),
        "outstanding": _dump(record.outstanding),
        "responses": _dump(record.responses),
        "result": None if record.result is None else _dump(record.result),
        "error": None if record.error is None else _dump(record.error),
        "lease_owner": record.lease_owner,
        "lease_until": record.lease_until,
        "effect_started_at": record.effect_started_at,
        "actors": _dump(list(record.actors)) if record.actors else None,
    }


def _record(row: Any) -> TaskRecord:
    flow = FlowState.decode(row.flow)
    if flow is None:
        raise StoreUnavailableError(f"the task {row.task_id[:6]}... has a flow state this askback cannot read")
    return TaskRecord(
        task_id=row.task_id,
        principal=row.principal,
        scopes=split_scopes(row.scopes or ""),
        tool=row.tool,
        arguments=json.loads(row.arguments),
        capabilities=json.loads(row.capabilities),
        status=TaskStatus(row.status),
        status_message=row.status_message,
        created_at=row.created_at,
        updated_at=row.updated_at,
        expires_at=row.expires_at,
        ttl_ms=row.ttl_ms,
        poll_ms=row.poll_ms,
        flow=flow,
        outstanding=json.loads(row.outstanding),
        responses=json.loads(row.responses),
        result=None if row.result is None else json.loads(row.result),
        error=None if row.error is None else json.loads(row.error),
        lease_owner=row.lease_owner,
        lease_until=row.lease_until,
        effect_started_at=row.effect_started_at,
        actors=tuple(json.loads(row.actors)) if row.actors else (),
    )


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


async def insert_task(store: Store, record: TaskRecord, *, most: int) -> bool:
    """Write a new task, committed when this returns, unless its principal already holds `most` tasks that have
    neither ended nor expired: then `False`, and nothing is written. The count and the insert are one transaction
    under a lock of the principal (SQLite's write lock; on PostgreSQL an advisory lock keyed by the principal), so
    two instances creating tasks for one principal at once cannot both pass the cap."""
    row = _row(record)

    def write(conn: Any) -> bool:
        hold_lock(conn, f"tasks of {record.principal!r}")
        held = conn.execute(_LIVE, {"b_principal": record.principal, "b_now": record.created_at}).scalar_one()
        if held >= most:
            return False
        conn.execute(_INSERT, row)
        return True

    written: bool = await store.database.transaction(write, doing="create a task", immediate=True)
    return written


async def read_task(store: Store, task_id: str, *, now: float) -> TaskRecord | None:
    """The task, or `None` when there is none of that id or it has expired."""
    row = await store.database.read(
        lambda conn: conn.execute(_READ, {"b_task_id": task_id}).first(), doing="read a task"
    )
    if row is None or row.expires_at < now:
        return None
    return _record(row)


async def waiting_of(store: Store, principal: str, *, now: float) -> list[TaskRecord]:
    """`principal`'s tasks waiting for answers (`input_required`), oldest first; a read only, so each is changed
    afterwards through `change`, which reads it again under the lock."""
    rows = await store.database.read(
        lambda conn: conn.execute(_WAITING, {"b_principal": principal, "b_now": now}).all(),
        doing="read the tasks waiting for answers",
    )
    return [_record(row) for row in rows]


async def awaiting_of(store: Store, principal: str | None, *, now: float) -> list[TaskRecord]:
    """`principal`'s tasks `working` without a lease (waiting for an approval), oldest first; a read only, as
    `waiting_of`."""
    rows = await store.database.read(
        lambda conn: conn.execute(_AWAITING, {"b_principal": principal, "b_now": now}).all(),
        doing="read the tasks waiting for approvals",
    )
    return [_record(row) for row in rows]


async def prune(store: Store, *, now: float) -> None:
    """Delete the tasks whose time to live has passed."""
    await store.database.transaction(lambda conn: conn.execute(_PRUNE, {"b_now": now}), doing="prune expired tasks")


async def change(
    store: Store,
    task_id: str,
    decide: Callable[[TaskRecord], TaskRecord | None],
    *,
    now: float,
    audit: Callable[[TaskRecord], Sequence[AuditEvent]] | None = None,
) -> tuple[TaskRecord | None, TaskRecord | None]:
    """In one transaction: read the task, let `decide` say what it becomes (`None`: nothing changes) and write that,
    with `audit(the task as written)`'s events when it changed (logged once committed). Returns (the task as it was
    read, the task as written or `None`); an expired task reads as `None`."""
    # Once committed: the audit rows' heads to keep, and the events to log.
    written: list[tuple[Callable[[], None], Sequence[AuditEvent]]] = []

    def run(conn: Any) -> tuple[TaskRecord | None, TaskRecord | None]:
        written.clear()
        before = _locked(conn, task_id, now)
        if before is None:
            return None, None
        after = decide(before)
        if after is None or after == before:
            return before, None
        values = _row(after)
        params = {"b_task_id": task_id} | {f"b_{k}": values[k] for k in (*_MUTABLE, "lease_owner", "lease_until")}
        conn.execute(_WRITE, params)
        if audit is not None:
            pending = store.audit_log.pending(audit(after))
            pending.write(conn)
            written.append((pending.committed, pending.events))
        return before, after

    changed = await store.database.transaction(run, doing="change a task", immediate=True)
    for committed, events in written:
        committed()
        emit_all(events)
    return changed


async def cancel(
    store: Store, task_id: str, *, now: float, audit: Callable[[TaskRecord], Sequence[AuditEvent]] | None = None
) -> tuple[TaskRecord | None, TaskRecord | None]:
    """The row change of a cancel (`cancelled`), under the lock `claim_effect` takes to mark the task's first effect
    started, with `audit`'s events as `change` writes them: (the task as it was read, the task cancelled or
    `None`)."""
    return await change(store, task_id, lambda record: cancelled(record, now), now=now, audit=audit)


async def claim_effect(
    store: Store, task_id: str, *, owner: str, flow_id: str, name: str, at: float, lease: float | None
) -> EffectClaim | None:
    """Claim effect `name` of the task's flow (as `Store.claim_effect` does) in one transaction with the task's row,
    only while the task is still `working` under `owner`'s lease: `None` when it is not (cancelled, ended, or taken
    over), and then nothing is claimed. The claim marks the row first (`effect_started_at`, the first mark kept), in
    the statement that checks it and locks it, and a release never clears the mark. A cancel takes the same lock, so
    it either comes first and the effect never starts, or finds the mark."""

    def run(conn: Any) -> EffectClaim | bool | None:
        # Marked before the claim is tried: a claim that finds the effect done or running finds it started, too.
        if conn.execute(_START_EFFECT, {"b_task_id": task_id, "b_owner": owner, "b_at": at}).rowcount != 1:
            return False
        return EFFECTS.try_claim(conn, flow_id, name, instance=owner, at=at, lease=lease)

    for _ in range(_RACE_ATTEMPTS):
        found = await store.database.transaction(run, doing=f"claim the effect {name!r} of a task", immediate=True)
        if found is False:
            return None
        if isinstance(found, EffectClaim):
            return found
    # Each time the claim collided with another attempt that released it before it could be read: it is busy.
    return EffectClaim("running")


async def settle_run(store: Store, after: TaskRecord, *, owner: str, events: Sequence[AuditEvent]) -> bool:
    """Write `after`, the end of a run under `owner`'s lease (`runner.settle` made it from the row the run started
    from, which nothing but that run changes while it works), with the run's audit `events`, in one transaction: only
    while the task is still `working` under that lease. Whether it was written (not when cancelled meanwhile, or taken
    over)."""
    values = _row(after)
    params = {"b_task_id": after.task_id, "b_owner": owner}
    params |= {f"b_{k}": values[k] for k in (*_MUTABLE, "lease_owner", "lease_until")}
    audit = store.audit_log.pending(events)

    def run(conn: Any) -> bool:
        if conn.execute(_SETTLE, params).rowcount != 1:
            return False
        audit.write(conn)
        return True

    written: bool = await store.database.transaction(run, doing="record the end of a task's run")
    if written:
        audit.committed()
    return written


def _locked(conn: Any, task_id: str, now: float) -> TaskRecord | None:
    """The task, its row locked until the transaction ends (on SQLite, the transaction holds the write lock)."""
    row = conn.execute(_READ_LOCKED, {"b_task_id": task_id}).first()
    if row is None or row.expires_at < now:
        return None
    return _record(row)
