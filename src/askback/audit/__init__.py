"""The audit trail: who was asked what, who answered what, how each flow ended, and what was refused.

`AuditEvent` is one line of it; `AuditFilter` selects lines to read (`AuditLog.query`, a store's `audit_log`). Every event is written to the
database (table `askback_audit`, by the store, in the same transaction as the round's other writes), emitted as a
structured log line on the logger `askback.audit`, and set as attributes on the current OpenTelemetry span
(`emit`). Each database row is linked into its serving process's hash chain (`chain`), which `askback audit verify`
checks for rows edited, deleted, reordered, inserted or cut off.
"""

from __future__ import annotations

from askback.audit.event import AuditEvent, AuditFilter

__all__ = ["AuditEvent", "AuditFilter"]
