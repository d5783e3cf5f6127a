"""A connected account's lifecycle as events, delivered on every instance: the catalogue (which status change is
which event, no I/O) and the subscription (`AccountEvents`, reading the store's shared event log).

```python
async for event in accounts.events(types=["account.connected", "account.recovered"], principal="alice"):
    ...  # worth retrying alice's parked call: the grant landed
```

| event               | the change                                                                         |
|---------------------|------------------------------------------------------------------------------------|
| `account.connected` | to ACTIVE by a grant from PENDING (the first grant) or REVOKED (connected again)   |
| `account.refreshed` | ACTIVE to ACTIVE with a new credential (a refresh, or a grant while still ACTIVE)  |
| `account.expired`   | to EXPIRED: the provider refused the refresh; the person must connect again        |
| `account.error`     | to ERROR: the provider failed or could not be reached (each failed attempt again)  |
| `account.recovered` | EXPIRED or ERROR to ACTIVE                                                         |
| `account.revoked`   | to REVOKED: the grant was revoked and the credential deleted                       |

Creating an account (none to PENDING, when its first link is issued) is no event: nothing is connected yet, and
nobody can act on it. Every other change in `status.TRANSITIONS` is one of the six. An event carries the account's
id, principal, connection and label, its old and new status and the change's reason, never a credential: the
repository writes it in the same transaction as the change (`append_event`), so it exists exactly when the change
does, whichever instance made it.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from askback.accounts.status import Event, Status
from askback.store import EventLog, Store, StoredEvent, chosen_types

__all__ = [
    "ACCOUNT_EVENT_TYPES",
    "CONNECTED",
    "ERROR",
    "EXPIRED",
    "RECOVERED",
    "REFRESHED",
    "REVOKED",
    "AccountEvent",
    "AccountEvents",
    "event_data",
    "event_type",
    "from_stored",
]

CONNECTED: Final = "account.connected"
REFRESHED: Final = "account.refreshed"
EXPIRED: Final = "account.expired"
ERROR: Final = "account.error"
RECOVERED: Final = "account.recovered"
REVOKED: Final = "account.revoked"
ACCOUNT_EVENT_TYPES: Final = (CONNECTED, REFRESHED, EXPIRED, ERROR, RECOVERED, REVOKED)
_FAMILY = "account.*"


@dataclass(frozen=True)
class AccountEvent:
    """One lifecycle change of a connected account, as a subscriber sees it. `id` is `evt_<cursor>`, stable and the
    same on every instance (`cursor` gives the number back, for `events(since=...)`); `at` is epoch seconds."""

    id: str
    type: str
    at: float
    account_id: str
    principal: str
    connection: str
    label: str
    old_status: Status | None
    new_status: Status
    reason: str | None

    @property
    def cursor(self) -> int:
        """The event log's cursor of this event: `events(since=event.cursor)` goes on after it."""
        return int(self.id.removeprefix("evt_"))


def event_type(event: Event, before: Status | None, after: Status) -> str | None:
    """The lifecycle event a change from `before` (`None`: no account yet) to `after` on `event` is, or `None` when
    it is none (an account created PENDING)."""
    if after is Status.REVOKED:
        return REVOKED
    if after is Status.EXPIRED:
        return EXPIRED
    if after is Status.ERROR:
        return ERROR
    if after is Status.ACTIVE:
        if before in (Status.EXPIRED, Status.ERROR):
            return RECOVERED
        if before is Status.ACTIVE:
            return REFRESHED
        if event is Event.CONNECTED:
            return CONNECTED
    return None


def event_data(
    *,
    account_id: str,
    principal: str,
    connection: str,
    label: str,
    before: Status | None,
    after: Status,
    reason: str | None,
) -> dict[str, Any]:
    """The `data` an account event is stored with: the account and the change, nothing secret."""
    return {
        "account_id": account_id,
        "principal": principal,
        "connection": connection,
        "label": label,
        "old_status": None if before is None else before.value,
        "new_status": after.value,
        "reason": reason,
    }


def from_stored(stored: StoredEvent) -> AccountEvent:
    """The account event a row of the event log holds."""
    data: Mapping[str, Any] = stored.data
    old = data.get("old_status")
    return AccountEvent(
        id=f"evt_{stored.id}",
        type=stored.type,
        at=stored.at,
        account_id=str(data["account_id"]),
        principal=str(data["principal"]),
        connection=str(data["connection"]),
        label=str(data.get("label", "")),
        old_status=None if old is None else Status(old),
        new_status=Status(data["new_status"]),
        reason=data.get("reason"),
    )


class AccountEvents:
    """The account events in `events` (a store's event log), as they happen on any instance sharing the database
    (woken by PostgreSQL's NOTIFY, or by polling on SQLite), `wait` seconds at most per wait for the next one."""

    def __init__(self, events: EventLog | Store, *, batch: int = 500, wait: float = 30.0) -> None:
        if isinstance(events, Store):
            warnings.warn(
                "AccountEvents(store) is deprecated: give it the store's event log, AccountEvents(store.events)",
                DeprecationWarning,
                stacklevel=2,
            )
            events = events.events
        self.log = events
        self.batch = batch
        self.wait = wait

    async def events(
        self,
        *,
        types: Sequence[str] = (_FAMILY,),
        principal: str | None = None,
        connection: str | None = None,
        since: int | None = None,
    ) -> AsyncIterator[AccountEvent]:
        """Every account event of `types` (names from the catalogue, or `account.*`), of `principal` and of
        `connection` when given, oldest first, without end. `since=None`: only events after the subscription
        starts; `since=N`: those after cursor N too (`0`: from the first). Refuses an unknown type
        (`ConfigurationError`) rather than wait for it forever."""
        wanted = chosen_types(types, ACCOUNT_EVENT_TYPES, family=_FAMILY, what="account")
        async for stored in self.log.follow(wanted, since=since, batch=self.batch, wait=self.wait):
            event = from_stored(stored)
            if principal is not None and event.principal != principal:
                continue
            if connection is not None and event.connection != connection:
                continue
            yield event
