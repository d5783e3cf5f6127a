"""Tasks waiting only for an account go on by themselves once it connects, on whichever instance sees it first.

A task's round can wait for a connect link (`flow.connect`), under the key `questions.connect_key(connection,
label)`. Nobody may answer that link on the person's behalf, but the server itself learns when the account becomes
ACTIVE: the accounts write `account.connected` or `account.recovered` to the shared event log in the transaction of
the change, whichever instance (or process) made it. Every serving instance reads that log (`AccountWaits`, from the
event id current when it started; woken by PostgreSQL's NOTIFY, or by polling on SQLite), and for each such event
looks at the tasks of exactly that principal waiting for answers. A task whose outstanding questions are all the
link of exactly that account (that connection, that label) is moved back to `working` under this instance's lease by
one conditional write (`resumed`, through `_rows.change`, as `tasks/update` moves it), and its handler reruns
through the runner with the link left unanswered. Every instance sees every event; the write lets one of them win.

The event is a hint, not a fact: the rerun reads the account's real status, goes on when it is ACTIVE, and otherwise
asks again with a new link (one more round, as an answer that leads to another question is). A task also waiting
for another answer, another principal's task, and a task waiting for another label's or another connection's
account are left as they are; so is a task past its flow deadline, which its next `tasks/get` ends.

Reading the shared log rather than being told by the instance that recorded the connection keeps one owner for the
job on every instance and every way an account connects (the hosted pages, a refresh that recovers it, another
process on the same database), and loses no task when the recording process stops right after its commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from askback.core.questions import connect_key
from askback.core.round import Limits
from askback.errors import AskbackError
from askback.server.tasks._rows import TaskRecord, change, waiting_of
from askback.server.tasks._runner import TaskRunner, overdue
from askback.server.tasks.status import TaskStatus
from askback.store import Store, StoredEvent

__all__ = ["ACTIVE_EVENTS", "AccountWaits", "ActiveAccount", "active_account", "resumed", "waits_only_for"]

logger = logging.getLogger("askback")

# The account events that say an account became ACTIVE (the accounts' catalogue, `askback.accounts.events`).
ACTIVE_EVENTS: Final = frozenset({"account.connected", "account.recovered"})
_BATCH = 500
# How long one wait for new events lasts at most, and how long to wait before reading again after a store failure.
_IDLE = 30.0
_RETRY = 5.0


@dataclass(frozen=True)
class ActiveAccount:
    """An account that became ACTIVE: whose, on which connection, under which label (`""`: the default one)."""

    principal: str
    connection: str
    label: str

    @property
    def key(self) -> str:
        """The key of the link a task waiting for this account asked."""
        return connect_key(self.connection, self.label)


def active_account(event: StoredEvent) -> ActiveAccount | None:
    """The account `event` says became ACTIVE; `None` for any other event, or one whose data names no account."""
    if event.type not in ACTIVE_EVENTS:
        return None
    data: Mapping[str, Any] = event.data
    principal, connection, label = data.get("principal"), data.get("connection"), data.get("label", "")
    if not (isinstance(principal, str) and isinstance(connection, str) and isinstance(label, str)):
        return None
    if not principal or not connection:
        return None
    return ActiveAccount(principal, connection, label)


def waits_only_for(record: TaskRecord, account: ActiveAccount) -> bool:
    """Whether `record` is `account`'s principal's task waiting for answers, and every question it still waits on
    is the connect link of exactly that account."""
    if record.status != TaskStatus.INPUT_REQUIRED or record.principal != account.principal or not record.outstanding:
        return False
    return all(
        entry.get("key") == account.key and entry.get("request", {}).get("params", {}).get("mode") == "url"
        for entry in record.outstanding.values()
    )


def resumed(
    record: TaskRecord, account: ActiveAccount, *, owner: str, lease: float, now: float, limits: Limits
) -> TaskRecord | None:
    """What a task becomes when `account` became ACTIVE: back to `working` under `owner`'s lease, with the link left
    unanswered (the answers already given to the round's other questions kept), when it waits only for that
    account's link and may still wait (its flow deadline not passed). `None`: it stays as it is."""
    if not waits_only_for(record, account) or overdue(record, now=now, limits=limits) is not None:
        return None
    return record.moved(
        status=TaskStatus.WORKING,
        status_message=None,
        outstanding={},
        updated_at=now,
        lease_owner=owner,
        lease_until=now + lease,
    )


class AccountWaits:
    """The reader of the shared event log on one instance, resuming through `runner` the tasks that waited only for
    an account that became ACTIVE. `start` reads the log's current end, then reads on in the background."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self._task: asyncio.Task[None] | None = None

    async def start(self, store: Store) -> None:
        if self._task is not None:
            return
        cursor = await store.latest_event_id()
        self._task = asyncio.get_running_loop().create_task(self._watch(store, cursor), name="askback task accounts")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def resume(self, store: Store, account: ActiveAccount) -> list[str]:
        """Resume every task waiting only for `account` that this instance wins; their ids."""
        rounds = self.runner.config.round
        owner, lease, limits = self.runner.owner, self.runner.lease, rounds.policy.limits
        won: list[str] = []
        now = rounds.clock.now()
        for record in await waiting_of(store, account.principal, now=now):
            if not waits_only_for(record, account):
                continue
            _, after = await change(
                store,
                record.task_id,
                lambda r: resumed(r, account, owner=owner, lease=lease, now=now, limits=limits),
                now=now,
            )
            if after is not None:
                logger.info("askback: task %s... goes on: the account it waited for is connected", record.task_id[:6])
                self.runner.start(record.task_id)
                won.append(record.task_id)
        return won

    async def _watch(self, store: Store, cursor: int) -> None:
        clock = self.runner.config.round.clock
        while True:
            try:
                found = await store.events_after(cursor, limit=_BATCH)
                for stored in found:
                    account = active_account(stored)
                    if account is not None:
                        await self.resume(store, account)
                    # Past every event, wanted or not: the wait below would find the others again and again.
                    cursor = stored.id
                if len(found) < _BATCH:
                    await store.wait_for_events(cursor, timeout=_IDLE)
            except AskbackError:
                logger.warning("askback: reading account events for waiting tasks failed; retrying", exc_info=True)
                await clock.sleep_until(clock.now() + _RETRY)
