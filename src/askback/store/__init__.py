"""The store every askback product shares: one database, opened once per process, with the server kit's tables
(the effects and rounds ledgers, flow completions, the audit log, the event log) and room for each product's own.

Several server processes (one machine with SQLite, many with PostgreSQL) answer rounds of the same flow, so
anything that must happen once is decided by the database, never in memory (see `ledger.py`). Everything here is
plain async I/O; the decisions about what a flow does live in `askback.core`. Driver failures become
`StoreUnavailableError` at this boundary (`askback.db.classify`); a duplicate key is not a failure but the
answer to "who was first".

The schema is created by each component's Alembic history (the server kit's is `migrations/` beside this module),
run by `Database.upgrade` through the engine's own connection. SQLite databases are migrated on open; PostgreSQL
ones only by `askback db upgrade`, so that one deliberate step changes a shared database.

A `Store` is composed, not inherited: a `Database` (`askback.db.database`: the engine, transactions, locks,
migrations) and the repositories built on it, each in a private module: `_flows` (`Flows`: the ledgers, the end of a
round as one `RoundRecord`, held answers; the server kit's), `_audit_log` (`AuditLog`: the audit trail and its
chains) and `_events` (`EventLog`: the event log every instance reads; `append_event` in a product's transaction,
`StoredEvent`s read by cursor). `_store` composes them. A product is handed the parts it uses: the runtime and the
accounts a `Database` (and an `EventLog`), never the server kit's ledgers.
"""

from __future__ import annotations

from askback.db.database import Database, hold_lock
from askback.store._audit_log import AuditLog
from askback.store._events import EventLog, StoredEvent, append_event, chosen_types
from askback.store._flows import Flows, HeldAnswers, RoundRecord
from askback.store._store import MIGRATIONS, Store
from askback.store.ledger import Completion, EffectClaim, RoundClaim

__all__ = [
    "MIGRATIONS",
    "AuditLog",
    "Completion",
    "Database",
    "EffectClaim",
    "EventLog",
    "Flows",
    "HeldAnswers",
    "RoundClaim",
    "RoundRecord",
    "Store",
    "StoredEvent",
    "append_event",
    "chosen_types",
    "hold_lock",
]
