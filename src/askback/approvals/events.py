"""An approval request's life as events, delivered on every instance: the catalogue (which change is which event,
and what it carries; no I/O) and the subscription (`ApprovalEvents`, reading the store's shared event log).

```python
async for event in approvals.events(types=["approval.decided"], requester="alice"):
    ...  # alice's call may go on (approved) or is over (denied): retry it
```

| event                | the change                                                                      |
|----------------------|---------------------------------------------------------------------------------|
| `approval.requested` | a new request, pending                                                          |
| `approval.decided`   | pending to approved (the quorum completed) or denied (the first denial)         |
| `approval.withdrawn` | pending to withdrawn: the requester declined or cancelled                       |
| `approval.expired`   | pending to expired: its time passed (written by the read that noticed)          |
| `approval.consumed`  | approved to consumed: the flow named ran the effect it gates                    |

An event carries the request's id, key, tool, requester and flow, and for a decision its status and approvers; never
the call's arguments, the answers, the summary or the call's digest (made from hidden values too, it would let a
receiver check a guess of one). The service writes it in the same transaction as
the change (`append_event`), so it exists exactly when the change does, whichever instance made it. A vote that does
not decide the request is in the audit trail (`approval.approved`), not here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from askback.approvals.records import ApprovalRecord
from askback.store import EventLog, StoredEvent, chosen_types

__all__ = [
    "APPROVAL_EVENT_TYPES",
    "CONSUMED",
    "DECIDED",
    "EXPIRED",
    "REQUESTED",
    "WITHDRAWN",
    "ApprovalEvent",
    "ApprovalEvents",
    "event_data",
    "from_stored",
]

REQUESTED: Final = "approval.requested"
DECIDED: Final = "approval.decided"
WITHDRAWN: Final = "approval.withdrawn"
EXPIRED: Final = "approval.expired"
CONSUMED: Final = "approval.consumed"
APPROVAL_EVENT_TYPES: Final = (REQUESTED, DECIDED, WITHDRAWN, EXPIRED, CONSUMED)
_FAMILY = "approval.*"


@dataclass(frozen=True)
class ApprovalEvent:
    """One change of an approval request, as a subscriber sees it. `id` is `evt_<cursor>`, the same on every
    instance; `status` the request's status after the change; `approvers` who approved it so far."""

    id: str
    type: str
    at: float
    approval_id: str
    key: str
    tool: str
    requester: str | None
    flow_id: str
    status: str
    approvers: tuple[str, ...]
    consumed_by_flow: str | None

    @property
    def cursor(self) -> int:
        """The event log's cursor of this event: `events(since=event.cursor)` goes on after it."""
        return int(self.id.removeprefix("evt_"))


def event_data(record: ApprovalRecord) -> dict[str, Any]:
    """The `data` an approval event is stored with, from the request as the change left it: nothing the call
    carried (arguments, answers, summary, nor its digest)."""
    return {
        "id": record.id,
        "key": record.approval.key,
        "tool": record.tool,
        "requester": record.requester,
        "flow_id": record.flow_id,
        "status": record.status,
        "approvers": list(record.approvers),
        "consumed_by_flow": record.consumed_by_flow,
    }


def from_stored(stored: StoredEvent) -> ApprovalEvent:
    """The approval event a row of the event log holds."""
    data: Mapping[str, Any] = stored.data
    return ApprovalEvent(
        id=f"evt_{stored.id}",
        type=stored.type,
        at=stored.at,
        approval_id=str(data["id"]),
        key=str(data["key"]),
        tool=str(data["tool"]),
        requester=data.get("requester"),
        flow_id=str(data["flow_id"]),
        status=str(data["status"]),
        approvers=tuple(data.get("approvers", ())),
        consumed_by_flow=data.get("consumed_by_flow"),
    )


class ApprovalEvents:
    """The approval events in `events` (a store's event log), as they happen on any instance sharing the database,
    `wait` seconds at most per wait for the next one."""

    def __init__(self, events: EventLog, *, batch: int = 500, wait: float = 30.0) -> None:
        self.log = events
        self.batch = batch
        self.wait = wait

    async def events(
        self,
        *,
        types: Sequence[str] = (_FAMILY,),
        requester: str | None = None,
        since: int | None = None,
    ) -> AsyncIterator[ApprovalEvent]:
        """Every approval event of `types` (names from the catalogue, or `approval.*`), of `requester` when given,
        oldest first, without end. `since=None`: only events after the subscription starts; `since=N`: those after
        cursor N too (`0`: from the first). Refuses an unknown type (`ConfigurationError`)."""
        wanted = chosen_types(types, APPROVAL_EVENT_TYPES, family=_FAMILY, what="approval")
        async for stored in self.log.follow(wanted, since=since, batch=self.batch, wait=self.wait):
            event = from_stored(stored)
            if requester is None or event.requester == requester:
                yield event
