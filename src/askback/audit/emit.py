"""Emitting audit events beside their database write: logged on the logger `askback.audit` (fields in `extra`, so a
JSON log formatter sees them as fields), and set as attributes on the current OpenTelemetry span. Form answers are
stored as given: form mode cannot carry secrets by construction (see `askback.core.secret_words`), so nothing secret
reaches the trail. `requestState` never does.

The log's shape is a setting of the process (as logging's own configuration is; `configure`, from the settings
`ASKBACK_AUDIT_LOG` and `ASKBACK_AUDIT_LOG_LEVEL`): one line per round (`round`, the default: a round's events share
a tool, a flow and a principal), one line per event (`event`), or none (`off`; the database and the span keep them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
import socket
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from opentelemetry import trace

from askback.audit.event import AuditEvent

__all__ = ["AUDIT_LOG_SHAPES", "AuditLogShape", "chain_id", "configure", "emit", "emit_all", "instance_id"]

logger = logging.getLogger("askback.audit")

AuditLogShape = Literal["round", "event", "off"]
AUDIT_LOG_SHAPES: tuple[AuditLogShape, ...] = ("round", "event", "off")

_INSTANCE: str | None = None
_CHAIN: str | None = None


def _forget_after_fork() -> None:
    global _INSTANCE, _CHAIN
    _INSTANCE = _CHAIN = None


os.register_at_fork(after_in_child=_forget_after_fork)


def instance_id() -> str:
    """`host:pid` of this serving process, recorded on every event (worked out again in a forked child)."""
    global _INSTANCE
    if _INSTANCE is None:
        _INSTANCE = f"{socket.gethostname()}:{os.getpid()}"
    return _INSTANCE


def chain_id() -> str:
    """`host:pid:<random>`: the audit chain this serving process writes (see `askback.audit.chain`), new in every
    process start and after a fork, so that no two processes ever append to one chain."""
    global _CHAIN
    if _CHAIN is None:
        _CHAIN = f"{instance_id()}:{secrets.token_hex(4)}"
    return _CHAIN


@dataclass(frozen=True)
class _Lines:
    shape: AuditLogShape = "round"
    level: int = logging.INFO


_lines = _Lines()


def configure(*, shape: AuditLogShape = "round", level: str = "info") -> None:
    """How audit events are logged in this process: their shape, and the level of their records."""
    global _lines
    number = logging.getLevelName(level.upper())
    if shape not in AUDIT_LOG_SHAPES or not isinstance(number, int):
        raise ValueError(
            f"audit log: shape one of {', '.join(AUDIT_LOG_SHAPES)} and a logging level, not {shape!r}, {level!r}"
        )
    _lines = _Lines(shape=shape, level=number)


def emit(event: AuditEvent) -> None:
    """Log one event and annotate the current span (the database write is the caller's)."""
    emit_all((event,))


def emit_all(events: Sequence[AuditEvent]) -> None:
    """Log the events one request produced (one round's: one line in the `round` shape) and annotate the span."""
    if not events:
        return
    span = trace.get_current_span()
    if span.is_recording():
        for event in events:
            _annotate(span, event)
    lines = _lines
    if lines.shape == "off" or not logger.isEnabledFor(lines.level):
        return
    first = events[0]
    if lines.shape == "event" or any(
        e.flow_id != first.flow_id or e.tool != first.tool or e.principal != first.principal for e in events
    ):
        for event in events:
            _log((event,), lines.level)
    else:
        _log(events, lines.level)


def _fields(events: Sequence[AuditEvent]) -> dict[str, Any]:
    """The record's fields: those of its one event, or, for a round's events, the kinds in order, the keys of all of
    them, and the last of each other field that is set."""
    last = events[-1]
    fields: dict[str, Any] = {}
    if len(events) == 1:
        fields["askback_event"] = last.event
    else:
        fields["askback_events"] = [e.event for e in events]
    keys = list(_unique(k for e in events for k in e.keys))
    values = {
        "tool": last.tool,
        "flow_id": last.flow_id,
        "principal": last.principal,
        "round": _last(e.round for e in events),
        "keys": keys,
        "mode": _last(e.mode for e in events),
        "action": _last(e.action for e in events),
        "outcome": _last(e.outcome for e in events),
        "instance": last.instance,
        "scopes": None if last.scopes is None else list(last.scopes),
    }
    fields.update((k, v) for k, v in values.items() if v is not None)
    return fields


# A word shown as it is: no whitespace (`\s` is exactly `str.isspace`), no quote, `=`, comma or backslash.
_PLAIN = re.compile(r'[^\s"=,\\]+')


def _word(value: object) -> str:
    """A value as the message's `key=value` shows it: a plain word as it is, anything else (a space, an `=`, a
    comma, a quote, nothing at all) quoted and escaped as JSON, so that text from a request cannot forge a field."""
    if value is None:
        return "None"
    text = str(value)
    if _PLAIN.fullmatch(text):
        return text
    return json.dumps(text, ensure_ascii=False)


def _words(values: Iterable[str]) -> str:
    return ",".join(_word(v) for v in values)


def _log(events: Sequence[AuditEvent], level: int) -> None:
    fields = _fields(events)
    last = events[-1]
    logger.log(
        level,
        "askback %s tool=%s flow=%s keys=%s principal=%s%s%s",
        ",".join(e.event for e in events),
        _word(last.tool),
        _word(last.flow_id),
        _words(fields["keys"]),
        _word(last.principal),
        "" if last.scopes is None else f" scopes={_words(last.scopes)}",
        f" outcome={_word(fields['outcome'])}" if "outcome" in fields else "",
        extra=fields,
    )


def _annotate(span: Any, event: AuditEvent) -> None:
    fields = {
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
    prefix = f"askback.{event.event}"
    for name, value in fields.items():
        if value is None:
            continue
        span.set_attribute(f"{prefix}.{name}", value if not isinstance(value, list) else [str(v) for v in value])
    span.add_event(prefix, {"askback_event": event.event, **{k: str(v) for k, v in fields.items() if v is not None}})


def _last(values: Iterable[Any]) -> Any:
    found = None
    for value in values:
        if value is not None:
            found = value
    return found


def _unique(values: Iterable[str]) -> Iterable[str]:
    seen: set[str] = set()
    for value in values:
        if value not in seen:
            seen.add(value)
            yield value
