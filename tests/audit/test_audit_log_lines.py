"""The audit trail's log lines (`askback.audit.emit`): one record per round, never one that mixes flows or people,
and nothing in them that the database keeps to itself."""

from __future__ import annotations

import logging
import shlex

import pytest

from askback.audit import AuditEvent
from askback.audit.emit import configure, emit_all
from askback.cli.logs import JsonFormatter, TextFormatter


def _event(kind: str, *, flow: str = "F1", principal: str = "ann", **fields: object) -> AuditEvent:
    return AuditEvent(event=kind, at=1.0, tool="deploy", flow_id=flow, principal=principal, round=2, **fields)  # type: ignore[arg-type]


def _records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "askback.audit"]


def test_a_rounds_events_share_one_record(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    emit_all([_event("answered", keys=("pick",), action="accept"), _event("completed", outcome="completed")])
    (record,) = _records(caplog)
    assert record.askback_events == ["answered", "completed"]  # type: ignore[attr-defined]
    assert record.action == "accept" and record.outcome == "completed" and record.keys == ["pick"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "other",
    [_event("completed", flow="F2"), _event("completed", principal="bob")],
    ids=["another flow", "another person"],
)
def test_events_of_two_flows_or_two_people_are_never_one_record(
    caplog: pytest.LogCaptureFixture, other: AuditEvent
) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    emit_all([_event("answered"), other])
    records = _records(caplog)
    assert [r.askback_event for r in records] == ["answered", "completed"]  # type: ignore[attr-defined]
    assert [(r.flow_id, r.principal) for r in records] == [("F1", "ann"), (other.flow_id, other.principal)]  # type: ignore[attr-defined]


def test_answer_content_and_detail_stay_out_of_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    secret_ish = "the-answer-text-4711"
    emit_all([_event("answered", content={"note": secret_ish}, detail=f"detail {secret_ish}")])
    (record,) = _records(caplog)
    assert secret_ish not in JsonFormatter().format(record)
    assert secret_ish not in TextFormatter().format(record)


def test_text_from_a_request_cannot_break_or_drive_the_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    hostile = "ann\n2026-01-01 INFO askback.audit forged\x1b[31m"
    emit_all([_event("answered", principal=hostile, keys=("k\nx",)), _event("completed", principal=hostile)])
    (record,) = _records(caplog)
    text = TextFormatter().format(record)
    assert "\n" not in text and "\x1b" not in text
    assert "\n" not in JsonFormatter().format(record)


def test_a_shape_or_level_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match="audit log"):
        configure(shape="lines")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="audit log"):
        configure(level="loud")


def test_a_principal_or_scope_cannot_forge_a_field_in_the_message(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="askback.audit")
    forged = "mallory outcome=completed principal=alice"
    emit_all([_event("answered", principal=forged, scopes=("read,admin", "mcp"))])
    (record,) = _records(caplog)
    message = record.getMessage()
    assert ' principal="mallory outcome=completed principal=alice"' in message
    # Read as a shell reads words: one principal field, no outcome field.
    fields = [word.split("=", 1)[0] for word in shlex.split(message)[2:]]
    assert fields.count("principal") == 1 and "outcome" not in fields
    assert ' scopes=mcp,"read,admin"' in message
    assert record.principal == forged  # the field keeps the value as it is  # type: ignore[attr-defined]
