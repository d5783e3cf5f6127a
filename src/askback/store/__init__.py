"""The store every askback product shares: one database, opened once per process, with the server kit's tables
(the effects and rounds ledgers, flow completions, the audit log) and room for each product's own.

Several server processes (one machine with SQLite, many with PostgreSQL) answer rounds of the same flow, so
anything that must happen once is decided by the database, never in memory (see `ledger.py`). Everything here is
plain async I/O; the decisions about what a flow does live in `askback.core`. Driver failures become
`StoreUnavailableError` at this boundary (`askback.db.classify`); a duplicate key is not a failure but the
answer to "who was first".

The schema is created by each component's Alembic history (the server kit's is `migrations/` beside this module),
run by `Store.upgrade` through the engine's own connection. SQLite databases are migrated on open; PostgreSQL
ones only by `askback db upgrade`, so that one deliberate step changes a shared database.

This module is the face; the parts are private: `_store` (opening, schema, database-wide locks), `_flows` (the
ledgers, the end of a round as one `RoundRecord`, held answers), `_audit_log` (the audit trail and its chains),
`_events` (the event log every instance reads: `append_event` in a product's transaction, `StoredEvent`s read by
cursor), `hold_lock` (a lock by name inside a product's transaction) and `_base` (the connection and SQLite's fast path).
"""

from __future__ import annotations

from askback.store._base import MIGRATIONS
from askback.store._events import StoredEvent, append_event
from askback.store._flows import HeldAnswers, RoundRecord
from askback.store._store import Store, hold_lock
from askback.store.ledger import Completion, EffectClaim, RoundClaim

__all__ = [
    "MIGRATIONS",
    "Completion",
    "EffectClaim",
    "HeldAnswers",
    "RoundClaim",
    "RoundRecord",
    "Store",
    "StoredEvent",
    "append_event",
    "hold_lock",
]
