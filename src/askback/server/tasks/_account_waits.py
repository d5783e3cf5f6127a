"""Tasks waiting only for accounts go on by themselves once they are connected, on whichever instance sees it first.

A task's round can wait for connect links (`flow.connect`), each under the key `questions.connect_key(connection,
label)`. Nobody may answer a link on the person's behalf, but the server itself learns when an account becomes
ACTIVE: the accounts write `account.connected` or `account.recovered` to the shared event log in the transaction of
the change, whichever instance (or process) made it. The rule: a task in `input_required` whose outstanding questions
are all links (`links_of`) goes on once every one of those accounts became ACTIVE since the run that asked for them
started. That run kept the log's newest id from before its handler read anything with the questions it asked
(`asked_after`), so an account that connected while the handler still ran counts too.

The rule is checked (`AccountWaits.check`) in these places, which leave no gap between them:
- right after a run here writes the task `input_required`, or an answer leaves it waiting only for links
  (`TaskRunner.on_waiting`): it reads the log from the run's start, so it sees every event committed before that
  write;
- for each such event (`AccountWaits`, reading the log from the event current when the instance started; woken by
  PostgreSQL's NOTIFY, or by polling on SQLite), on the tasks of exactly that principal waiting for that account's
  link: an event committed after the write finds the task waiting.
A task that may go on is moved back to `working` under this instance's lease by one conditional write (`resumed`,
through `rows.change`, as `tasks/update` moves it), and its handler reruns through the runner with the links left
unanswered. Every instance sees every event, and both checks may pass; the write lets one of them win.

The event is a hint, not a fact: the rerun reads the accounts' real status, goes on when they are ACTIVE, and
otherwise asks again with a new link (one more round, as an answer that leads to another question is). A task also
waiting for another answer, another principal's task, and a task waiting for another label's or another
connection's account are left as they are; so is a task past its flow deadline, which its next `tasks/get` ends.

Reading the shared log rather than being told by the instance that recorded the connection keeps one owner for the
job on every instance and every way an account connects (the hosted pages, a refresh that recovers it, another
process on the same database), and loses no task when the recording process stops right after its commit.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, Final, cast

from askback.core.questions import connect_key
from askback.core.round import Limits
from askback.server.tasks._log_follower import LogFollower
from askback.server.tasks.rows import TaskRecord, waiting_of
from askback.server.tasks.runner import TaskRunner, overdue
from askback.server.tasks.status import TaskStatus
from askback.store import Store, StoredEvent

__all__ = [
    "ACTIVE_EVENTS",
    "AccountWaits",
    "ActiveAccount",
    "active_account",
    "asked_after",
    "links_of",
    "resumed",
    "waits_for",
]

logger = logging.getLogger("askback")

# The account events that say an account became ACTIVE (the accounts' catalogue, `askback.accounts.events`).
ACTIVE_EVENTS: Final = frozenset({"account.connected", "account.recovered"})
# Events read at once while looking for the accounts connected since a run started.
_BATCH = 500


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


def links_of(record: TaskRecord) -> frozenset[str] | None:
    """The keys of the links `record` waits on when it waits for answers (`input_required`) and every question it
    still waits on is a link (`mode: "url"`); `None` otherwise. Only a connect link's key names an account."""
    if record.status != TaskStatus.INPUT_REQUIRED or not record.outstanding:
        return None
    keys: set[str] = set()
    for entry in record.outstanding.values():
        if entry.get("request", {}).get("params", {}).get("mode") != "url" or not isinstance(entry.get("key"), str):
            return None
        keys.add(entry["key"])
    return frozenset(keys)


def waits_for(record: TaskRecord, account: ActiveAccount) -> bool:
    """Whether `record` is `account`'s principal's task waiting only for links, that account's link among them."""
    links = links_of(record)
    return record.principal == account.principal and links is not None and account.key in links


def asked_after(record: TaskRecord) -> int | None:
    """The event log's newest id when the run that asked `record`'s questions started: every account that became
    ACTIVE after it may be one its handler did not see. `None` for questions asked without it."""
    found = [entry.get("events_after") for entry in record.outstanding.values()]
    if not found or not all(isinstance(at, int) for at in found):
        return None
    return min(cast(list[int], found))


def resumed(
    record: TaskRecord,
    connected: Iterable[ActiveAccount],
    *,
    owner: str,
    lease: float,
    now: float,
    limits: Limits,
) -> TaskRecord | None:
    """What a task becomes once the accounts `connected` became ACTIVE: back to `working` under `owner`'s lease,
    with the links left unanswered (the answers already given to the round's other questions kept), when every
    question it still waits on is the link of one of its principal's accounts among them, and it may still wait (its
    flow deadline not passed). `None`: it stays as it is."""
    links = links_of(record)
    keys = {account.key for account in connected if account.principal == record.principal}
    if links is None or not links <= keys or overdue(record, now=now, limits=limits) is not None:
        return None
    return record.back_to_work(owner=owner, lease=lease, now=now)


class AccountWaits:
    """The reader of the shared event log on one instance, resuming through `runner` the tasks that waited only for
    an account that became ACTIVE. `start` reads the log's current end, then reads on in the background."""

    def __init__(self, runner: TaskRunner) -> None:
        self.runner = runner
        self._log = LogFollower("task accounts", self._seen, lambda: runner.config.round.clock)

    async def start(self, store: Store) -> None:
        self._store = store
        self.runner.on_waiting = self.check
        await self._log.start(store)

    async def aclose(self) -> None:
        self.runner.on_waiting = None
        await self._log.aclose()

    async def resume(self, store: Store, account: ActiveAccount) -> list[str]:
        """Resume every task of `account`'s principal waiting only for links, that account's among them, whose
        other accounts are connected too, when this instance wins it; their ids."""
        now = self.runner.config.round.clock.now()
        won: list[str] = []
        for record in await waiting_of(store, account.principal, now=now):
            if waits_for(record, account) and await self.check(store, record, seen=account):
                won.append(record.task_id)
        return won

    async def check(self, store: Store, record: TaskRecord, *, seen: ActiveAccount | None = None) -> bool:
        """Resume `record` (run it here) when it waits only for links and every one of those accounts became ACTIVE
        since the run that asked for them started (`seen`: one that just did); whether this instance won it."""
        links = links_of(record)
        if links is None or record.principal is None:
            return False
        connected = [] if seen is None else [seen]
        cursor = asked_after(record)
        if cursor is not None and not links <= {account.key for account in connected}:
            connected += await self._connected_since(store, cursor, record.principal)
        return await self.runner.go_on(
            store, record.task_id, partial(resumed, connected=connected), "the accounts it waited for are connected"
        )

    @staticmethod
    async def _connected_since(store: Store, cursor: int, principal: str) -> list[ActiveAccount]:
        """`principal`'s accounts that became ACTIVE after the event `cursor`."""
        found: list[ActiveAccount] = []
        while True:
            batch = await store.events.events_after(cursor, types=sorted(ACTIVE_EVENTS), limit=_BATCH)
            found += [a for a in map(active_account, batch) if a is not None and a.principal == principal]
            if len(batch) < _BATCH:
                return found
            cursor = batch[-1].id

    async def _seen(self, stored: StoredEvent) -> None:
        account = active_account(stored)
        if account is not None:
            await self.resume(self._store, account)
