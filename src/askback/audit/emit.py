"""Emitting audit events beside their database write: each is logged as a structured line on the logger
`askback.audit` (fields in `extra`, so a JSON log formatter sees them as fields), and set as attributes on the
current OpenTelemetry span. Form answers are stored as given: form mode cannot carry secrets by construction
(see `askback.core.secret_words`), so nothing secret reaches the trail. `requestState` never does.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
from typing import Any

from opentelemetry import trace

from askback.audit.event import AuditEvent

__all__ = ["chain_id", "emit", "instance_id"]

logger = logging.getLogger("askback.audit")

_INSTANCE: str | None = None
_CHAIN: str | None = None


def instance_id() -> str:
    """`host:pid` of this serving process, recorded on every event."""
    global _INSTANCE
    pid = os.getpid()
    if _INSTANCE is None or not _INSTANCE.endswith(f":{pid}"):
        _INSTANCE = f"{socket.gethostname()}:{pid}"
    return _INSTANCE


def chain_id() -> str:
    """`host:pid:<random>`: the audit chain this serving process writes (see `askback.audit.chain`), new in every
    process start and after a fork, so that no two processes ever append to one chain."""
    global _CHAIN
    instance = instance_id()
    if _CHAIN is None or not _CHAIN.startswith(f"{instance}:"):
        _CHAIN = f"{instance}:{secrets.token_hex(4)}"
    return _CHAIN


def emit(event: AuditEvent) -> None:
    """Log the event and annotate the current span (the database write is the caller's, batched per request)."""
    span = trace.get_current_span()
    recording = span.is_recording()
    if not recording and not logger.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "askback_event": event.event,
        "tool": event.tool,
        "flow_id": event.flow_id,
        "principal": event.principal,
        "round": event.round,
        "keys": list(event.keys),
        "mode": event.mode,
        "action": event.action,
        "outcome": event.outcome,
        "instance": event.instance,
        "scopes": None if event.scopes is None else list(event.scopes),
    }
    if logger.isEnabledFor(logging.INFO):
        logger.info(
            "askback %s tool=%s flow=%s keys=%s principal=%s%s%s",
            event.event,
            event.tool,
            event.flow_id,
            ",".join(event.keys),
            event.principal,
            "" if event.scopes is None else f" scopes={','.join(event.scopes)}",
            f" outcome={event.outcome}" if event.outcome else "",
            extra={k: v for k, v in fields.items() if v is not None},
        )
    if recording:
        prefix = f"askback.{event.event}"
        for name, value in fields.items():
            if value is None or name == "askback_event":
                continue
            span.set_attribute(f"{prefix}.{name}", value if not isinstance(value, list) else [str(v) for v in value])
        span.add_event(prefix, {k: str(v) for k, v in fields.items() if v is not None})
