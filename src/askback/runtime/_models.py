"""The tables the agent runtime keeps, in the shared store under their own migration history.

A parked call is one row (`askback_runtime_calls`): what was called on which server, the round the server is
waiting on (its `InputRequiredResult` as JSON, `requestState` included, exactly as the server sealed it), who must
answer, until when, and the claim of the process resuming it; a call the server made a task also keeps the task's
id and poll interval. Every answer is a row keyed by (call, round, input
key), never by position, so answers reach the call and the round they belong to and no other. Every round the
call went through is kept in `askback_runtime_rounds`. Every signed webhook the runtime's receiver took in is a row
of `askback_runtime_webhooks`, keyed by its `webhook-id`, so that a redelivery is acted on once. A change here needs
a new migration beside it.
"""

from __future__ import annotations

from sqlalchemy import Float, Index, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from askback.db.orm import product_metadata

__all__ = ["VERSION_TABLE", "AnswerRow", "Base", "CallRow", "RoundRow", "WebhookRow"]

VERSION_TABLE = "askback_runtime_alembic_version"


class Base(DeclarativeBase):
    metadata = product_metadata()


class CallRow(Base):
    """One call the runtime made: parked on a round, being resumed, completed or failed."""

    __tablename__ = "askback_runtime_calls"
    # Listings read newest first, of everyone or of one person, without sorting the rows (a backward index scan).
    __table_args__ = (
        Index("ix_askback_runtime_calls_status_created", "status", "created_at", "id"),
        Index("ix_askback_runtime_calls_principal_status", "principal", "status", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    run_id: Mapped[str | None] = mapped_column(String(255), index=True)
    principal: Mapped[str] = mapped_column(String(255))
    server: Mapped[str] = mapped_column(Text)
    # The name the server gave itself (`serverInfo`) when the call was made: shown with its questions.
    server_name: Mapped[str | None] = mapped_column(Text)
    protocol: Mapped[str | None] = mapped_column(String(32))
    method: Mapped[str] = mapped_column(String(32))
    target: Mapped[str] = mapped_column(Text)
    arguments: Mapped[str | None] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))
    round: Mapped[int] = mapped_column(Integer)
    pending: Mapped[str | None] = mapped_column(Text)  # the server's InputRequiredResult for `round`, as JSON
    waiting: Mapped[int] = mapped_column(Integer)  # questions of `round` with no answer yet
    deadline: Mapped[float | None] = mapped_column(Float)
    result: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    claim: Mapped[str | None] = mapped_column(String(64))
    claimed_until: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    # A call the server made a task (the tasks extension): its id and the poll interval it asked for, in seconds.
    task_id: Mapped[str | None] = mapped_column(String(255))
    poll_interval: Mapped[float | None] = mapped_column(Float)


class AnswerRow(Base):
    """A person's answer to one question of one round of one call."""

    __tablename__ = "askback_runtime_answers"

    call_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    action: Mapped[str] = mapped_column(String(8))
    content: Mapped[str | None] = mapped_column(Text)
    answered_by: Mapped[str | None] = mapped_column(String(255))
    answered_at: Mapped[float] = mapped_column(Float)


class RoundRow(Base):
    """One round of a call: what the server asked and, once resumed, what was sent back."""

    __tablename__ = "askback_runtime_rounds"

    call_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    round: Mapped[int] = mapped_column(Integer, primary_key=True)
    asked: Mapped[str] = mapped_column(Text)
    asked_at: Mapped[float] = mapped_column(Float)
    sent: Mapped[str | None] = mapped_column(Text)
    sent_at: Mapped[float | None] = mapped_column(Float)


class WebhookRow(Base):
    """A webhook the receiver took in, by its `webhook-id`: being acted on (`claim`, until `claimed_until`) or done."""

    __tablename__ = "askback_runtime_webhooks"

    id: Mapped[str] = mapped_column(String(255), primary_key=True)
    type: Mapped[str] = mapped_column(String(64))
    received_at: Mapped[float] = mapped_column(Float)
    claim: Mapped[str | None] = mapped_column(String(64))
    claimed_until: Mapped[float | None] = mapped_column(Float)
    done_at: Mapped[float | None] = mapped_column(Float)
