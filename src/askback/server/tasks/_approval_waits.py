"""Tasks waiting only for approvals stay `working`, and go on by themselves once the request is decided.

In an MRTR round, `flow.approve` asks a URL-mode question linking to the request's status page. In a task nobody
needs to answer it: when a run of the handler ends asking only approvals' status links (keys
`askback.core.approving.approval_key`, each naming the request it shows in the flow's state,
`approving.shown_request`), the task is written `working` with a status message naming who must approve
(`waiting_text`), with no lease (nothing runs its handler while it waits), its questions kept with the id of the
request each one waits on (`TaskRecord.awaited_approvals`). Nothing asks the client anything.

The task goes on once a request it waits on is no longer pending (approved, denied, expired or withdrawn), on the
instance that moves it back to `working` under its own lease by one conditional write (`resumed`, through
`rows.change`, as account waits do); its handler reruns there and reads the request through `flow.approve`:
approved goes on (its effect runs once, under `flow.once`), and denied, expired or withdrawn complete the task with
the text an MRTR call gets. Still pending (the request changed back meanwhile? never; but a hint is only a hint), it
asks again and waits one more round.

Whether a request is still pending is always read from the approvals (`ApprovalsPort.read`, as the task's caller),
in these places, which leave no gap between them:
- right after a run here writes the task waiting (`TaskRunner.approval_waits.check`): a decision committed before
  that write is read there;
- for each `approval.decided`, `approval.expired` or `approval.withdrawn` event in the shared event log (read from
  the event current when the instance started, woken by PostgreSQL's NOTIFY or by polling on SQLite), on the tasks
  of that requester waiting on that request: a decision committed after the write is seen there;
- when `tasks/get` reads a waiting task: an expiry is noticed on read only (the read writes it), with no event
  before, so a polling client sees the task end once the request's time has passed.
The event is a hint: the check reads the request itself, and the rerun reads it again through `flow.approve`.

A cancel of a waiting task ends it `cancelled` (no effect ran: the handler was not running) and withdraws the requests
it waited on (`withdraw`). Its flow deadline still applies: past it, the next `tasks/get` ends it "Expired", as a task
waiting for answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Final

from askback.core.approving import ApprovalsPort, ApprovalState, approval_key
from askback.core.caller import Caller
from askback.core.round import Limits
from askback.errors import AskbackError
from askback.server.tasks._log_follower import LogFollower
from askback.server.tasks.rows import TaskRecord, awaiting_of, task_caller
from askback.server.tasks.runner import overdue
from askback.store import Store, StoredEvent

if TYPE_CHECKING:
    from askback.server.tasks.runner import TaskRunner

Ports = Callable[[Caller | None], ApprovalsPort]

__all__ = ["ENDING_EVENTS", "ApprovalWaits", "ended_request", "resumed", "waiting_text"]

logger = logging.getLogger("askback")

# The approvals' events that say a request is no longer pending (`askback.approvals.events`).
ENDING_EVENTS: Final = frozenset({"approval.decided", "approval.expired", "approval.withdrawn"})
_PREFIX: Final = approval_key("")
_MOST_NAMES = 3


def _who(names: Sequence[str]) -> str:
    if len(names) <= _MOST_NAMES:
        return " or ".join(names) if len(names) > 1 else "".join(names)
    return f"{', '.join(names[:_MOST_NAMES])} or {len(names) - _MOST_NAMES} more"


def _when(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M UTC")


def waiting_text(states: Iterable[ApprovalState]) -> str:
    """A waiting task's status message: for each request, its title, how many more approvals it needs, from whom
    (the groups, then the people, its policy names), and until when it is open."""
    parts: list[str] = []
    for state in states:
        needed = max(state.required - len(state.approvers), 0)
        approval = state.approval
        title = approval.title if approval is not None else "the request"
        who = _who([*sorted(approval.groups), *sorted(approval.principals)]) if approval is not None else ""
        parts.append(
            f"{title} — {needed} more approval{'s' if needed != 1 else ''}"
            f"{f' from {who}' if who else ''}, until {_when(state.expires_at)}"
        )
    return "Waiting for approval: " + ("; ".join(parts) or "a request")


def ended_request(event: StoredEvent) -> tuple[str | None, str] | None:
    """(the requester, the request's id) of an event saying a request is no longer pending; `None` for any other
    event, or one whose data names no request."""
    if event.type not in ENDING_EVENTS:
        return None
    requester, approval_id = event.data.get("requester"), event.data.get("id")
    if not isinstance(approval_id, str) or not approval_id or not (requester is None or isinstance(requester, str)):
        return None
    return requester, approval_id


def resumed(
    record: TaskRecord, ended: Iterable[str], *, owner: str, lease: float, now: float, limits: Limits
) -> TaskRecord | None:
    """What a task waiting for approvals becomes once the requests `ended` (by id) are no longer pending: back to
    `working` under `owner`'s lease, its questions dropped, when it waits on one of them and may still wait (its flow
    deadline not passed: the next `tasks/get` ends it). `None`: it stays as it is."""
    waited = record.awaited_approvals
    if not waited or not waited & set(ended):
        return None
    if overdue(record, now=now, limits=limits) is not None:
        return None
    return record.back_to_work(owner=owner, lease=lease, now=now)


class ApprovalWaits:
    """Tasks waiting for approvals on one instance: the status message they wait with, the check that resumes them
    through `runner`, and the reader of the shared event log. `ports`: the app's approvals port per caller."""

    def __init__(self, runner: TaskRunner, ports: Callable[[], Ports | None]) -> None:
        self.runner = runner
        self._ports = ports
        self._log = LogFollower("task approvals", self._seen, lambda: runner.config.round.clock)

    async def start(self, store: Store) -> None:
        self._store = store
        await self._log.start(store)

    async def aclose(self) -> None:
        await self._log.aclose()

    async def _states(self, record: TaskRecord, ids: Iterable[str]) -> dict[str, ApprovalState | None]:
        """The requests `ids` as the task's caller reads them now (expired when their time has passed)."""
        ports = self._ports()
        if ports is None:
            return {}
        port = ports(task_caller(record))
        return {approval_id: await port.read(approval_id) for approval_id in sorted(ids)}

    async def message(self, record: TaskRecord, ids: Iterable[str]) -> str:
        """The status message of `record` waiting on the requests `ids`."""
        states = await self._states(record, ids)
        return waiting_text(state for state in states.values() if state is not None)

    async def check(self, store: Store, record: TaskRecord) -> bool:
        """Resume `record` (run it here) when it waits for approvals and one of them is no longer pending (or is
        gone); whether this instance won it."""
        waited = record.awaited_approvals
        if not waited:
            return False
        states = await self._states(record, waited)
        ended = [i for i, state in states.items() if state is None or state.status != "pending"]
        if not ended:
            return False
        return await self.runner.go_on(
            store, record.task_id, partial(resumed, ended=ended), "the approval it waited for is no longer pending"
        )

    async def withdraw(self, record: TaskRecord) -> None:
        """Withdraw the requests `record` waited on (it was cancelled while it waited); one already decided stays."""
        ports = self._ports()
        if ports is None:
            return
        port = ports(task_caller(record))
        for approval_id in sorted(record.awaited_approvals):
            try:
                await port.withdraw(approval_id)
            except AskbackError:
                # The task is cancelled whatever: the request expires at its time if it cannot be withdrawn now.
                logger.warning("askback: withdrawing the approval of a cancelled task failed", exc_info=True)

    async def _resume(self, store: Store, requester: str | None, approval_id: str) -> None:
        now = self.runner.config.round.clock.now()
        for record in await awaiting_of(store, requester, now=now):
            if approval_id in record.awaited_approvals:
                await self.check(store, record)

    async def _seen(self, stored: StoredEvent) -> None:
        ended = ended_request(stored)
        if ended is not None:
            await self._resume(self._store, *ended)
