"""The tables askback keeps in its database, as SQLAlchemy 2 declarative models.

These models are what `Store` queries with and what `alembic check` compares against; the schema itself is
created by the hand-written migrations in `migrations/versions/`, never by `create_all`. A change here needs a
new migration next to it. Types are the portable ones (String, Text, Float, Integer) so that one migration
serves SQLite and PostgreSQL alike; JSON lives in Text columns, written with sorted keys.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.db.orm import product_metadata

__all__ = [
    "VERSION_TABLE",
    "AuditChainRow",
    "AuditRow",
    "Base",
    "EffectRow",
    "EventRow",
    "FlowRow",
    "HeldAnswersRow",
    "RoundRow",
    "TaskRow",
]

# Our own name rather than Alembic's default, so that an application keeping its own Alembic history in the
# same database does not collide with ours.
VERSION_TABLE = "askback_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class EffectRow(Base):
    """One side effect of one flow: 'running' while an attempt holds it, 'done' with its outcome after."""

    __tablename__ = "askback_effects"

    flow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    name: Mapped[str] = mapped_column(String(255), primary_key=True)
    status: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str | None] = mapped_column(Text)
    instance: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class RoundRow(Base):
    """One answered round of one flow: 'running' while the attempt that claimed it runs the handler, 'done' with
    what that attempt answered (a complete result, or the next questions and state). Copies of the same round
    that arrive meanwhile wait for it and answer the same."""

    __tablename__ = "askback_rounds"

    flow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    status: Mapped[str] = mapped_column(String(16))
    outcome: Mapped[str | None] = mapped_column(Text)
    instance: Mapped[str | None] = mapped_column(String(255))
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float)


class FlowRow(Base):
    """The first complete result of a flow; later replays of the same flow read this back."""

    __tablename__ = "askback_flows"

    flow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    tool: Mapped[str] = mapped_column(String(255))
    principal: Mapped[str | None] = mapped_column(String(255))
    result: Mapped[str] = mapped_column(Text)
    completed_at: Mapped[float] = mapped_column(Float)


class AuditRow(Base):
    """One audit event: a question asked, an answer given, a flow completed or a request rejected.

    `chain`, `seq`, `prev` and `hash` link it into its serving process's hash chain (`askback.audit.chain`); they
    are NULL on rows written before revision 0003. `scopes` are the caller's token scopes, sorted and
    space-separated; NULL when none were recorded, as on every row written before revision 0005."""

    __tablename__ = "askback_audit"
    __table_args__ = (Index("ix_askback_audit_chain", "chain", "seq", unique=True),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[float] = mapped_column(Float, index=True)
    event: Mapped[str] = mapped_column(String(32))
    # Not indexed: a tool's rows are found newest first through `at` (migration 0010).
    tool: Mapped[str | None] = mapped_column(String(255))
    flow_id: Mapped[str | None] = mapped_column(String(128), index=True)
    principal: Mapped[str | None] = mapped_column(String(255), index=True)
    round: Mapped[int | None] = mapped_column(Integer)
    keys: Mapped[str] = mapped_column(Text)
    mode: Mapped[str | None] = mapped_column(String(32))
    action: Mapped[str | None] = mapped_column(String(16))
    content: Mapped[str | None] = mapped_column(Text)
    outcome: Mapped[str | None] = mapped_column(Text)
    detail: Mapped[str | None] = mapped_column(Text)
    instance: Mapped[str | None] = mapped_column(String(255))
    chain: Mapped[str | None] = mapped_column(String(255))
    seq: Mapped[int | None] = mapped_column(Integer)
    prev: Mapped[str | None] = mapped_column(String(64))
    hash: Mapped[str | None] = mapped_column(String(64))
    scopes: Mapped[str | None] = mapped_column(Text)


class AuditChainRow(Base):
    """The head of one audit chain (one per serving process start): its last `seq` and that row's `hash`, moved
    in the same transaction as the rows, so that a tail cut off the chain no longer matches it."""

    __tablename__ = "askback_audit_chains"

    chain: Mapped[str] = mapped_column(String(255), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer)
    head: Mapped[str] = mapped_column(String(64))
    started_at: Mapped[float] = mapped_column(Float)


class HeldAnswersRow(Base):
    """A flow's answers so far, sealed, kept on the server between rounds (`ASKBACK_ANSWERS=server`) instead of in
    the `requestState` the client holds; deleted when the flow completes or expires."""

    __tablename__ = "askback_held_answers"

    flow_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    sealed: Mapped[str] = mapped_column(Text)
    expires_at: Mapped[float] = mapped_column(Float, index=True)


class EventRow(Base):
    """One event of the shared event log (`askback.store._events`): its `id` is the readers' cursor, `type` its name
    (`account.connected`), `data` a JSON object. Written in the transaction of the change it reports."""

    __tablename__ = "askback_events"
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    type: Mapped[str] = mapped_column(String(64), index=True)
    at: Mapped[float] = mapped_column(Float)
    data: Mapped[str] = mapped_column(Text)


class TaskRow(Base):
    """One durable task (`askback.server.tasks`): who made it, the tool call it runs, where it stands (`status`,
    the flow's state and the questions it waits on), what it ended with, and which instance holds its lease while
    the handler runs, and when it first started an effect. JSON lives in Text columns; times are epoch seconds."""

    __tablename__ = "askback_tasks"

    task_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    principal: Mapped[str | None] = mapped_column(String(255))
    scopes: Mapped[str | None] = mapped_column(Text)
    tool: Mapped[str] = mapped_column(String(255))
    arguments: Mapped[str] = mapped_column(Text)
    capabilities: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    status_message: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    ttl_ms: Mapped[int] = mapped_column(Integer)
    poll_ms: Mapped[int] = mapped_column(Integer)
    flow: Mapped[str] = mapped_column(Text)
    outstanding: Mapped[str] = mapped_column(Text)
    responses: Mapped[str] = mapped_column(Text)
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    lease_owner: Mapped[str | None] = mapped_column(String(255))
    lease_until: Mapped[float | None] = mapped_column(Float)
    # When the task first claimed an effect (set in the claim's transaction, never cleared): a cancel after it is
    # refused, even when the effect raised and its claim was released.
    effect_started_at: Mapped[float | None] = mapped_column(Float)
    # Who acts for the caller (the token's `act` chain), as a JSON list, so that every run of the handler carries
    # them; null for a task made before the column.
    actors: Mapped[str | None] = mapped_column(Text)
