"""What one transaction of the approvals' service noted beside its rows: the audit events (onto the chain) and the
shared log's events, written at the transaction's end (`ApprovalService._change`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from askback.approvals.events import event_data
from askback.approvals.records import ApprovalRecord
from askback.audit import AuditEvent
from askback.audit.emit import instance_id
from askback.audit.event import EventKind

__all__ = ["Changes"]


@dataclass
class Changes:
    """What one transaction wrote beside its rows: the audit events and the log's events, written at its end."""

    at: float
    audit: list[AuditEvent] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def note(
        self,
        kind: EventKind,
        record: ApprovalRecord,
        *,
        principal: str | None,
        approver: str | None = None,
        method: str | None = None,
        action: str | None = None,
        reason: str | None = None,
        flow_id: str | None = None,
    ) -> None:
        content = {
            "approval": record.id,
            # The digest as stored, keyed by the state keys: it names the exact call, and gives no way to check a
            # guess of a hidden argument (the call's own digest is made from the hidden values too).
            "digest": record.digest,
            "requester": record.requester,
            "approver": approver,
            "method": method,
            "status": record.status,
        }
        self.audit.append(
            AuditEvent(
                event=kind,
                at=self.at,
                tool=record.tool,
                flow_id=flow_id or record.flow_id,
                principal=principal,
                keys=(record.approval.key,),
                action=action,
                content={k: v for k, v in content.items() if v is not None},
                outcome=record.status,
                detail=reason,
                instance=instance_id(),
            )
        )

    def event(self, kind: str, record: ApprovalRecord) -> None:
        self.events.append((kind, event_data(record)))
