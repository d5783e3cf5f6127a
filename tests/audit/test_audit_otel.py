"""Audit events reach OpenTelemetry spans as attributes, and the database, with who, what and where."""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from askback import Askback
from askback.audit import AuditFilter
from askback.testing import accept, answering, text

pytestmark = pytest.mark.anyio

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module", autouse=True)
def tracing() -> None:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
    trace.set_tracer_provider(provider)


async def test_span_attributes_and_stored_events_name_the_flow_and_the_answer(demo: Askback) -> None:
    _EXPORTER.clear()

    answer = answering(project_name=accept(project_name="billing-legacy"))
    async with Client(demo.mcp, elicitation_callback=answer) as client:
        result = await client.call_tool("delete_project", {"project_id": "prj_99"})
    assert text(result) == "Deleted billing-legacy."

    attrs: dict[str, Any] = {}
    for span in _EXPORTER.get_finished_spans():
        attrs.update(span.attributes or {})
    assert attrs["askback.asked.keys"] == ("confirm_project",)
    assert attrs["askback.asked.mode"] == "form"
    assert attrs["askback.answered.action"] == "accept"
    assert attrs["askback.completed.outcome"] == "completed"
    flow_id = attrs["askback.asked.flow_id"]
    assert attrs["askback.completed.flow_id"] == flow_id

    events = await (await demo.store()).audit_log.query(AuditFilter(flow_id=flow_id))
    assert [e.event for e in events] == ["asked", "answered", "completed"]
    assert events[1].content == {"project_name": "billing-legacy"}
    assert events[0].round == 1 and events[0].mode == "form" and events[0].keys == ("confirm_project",)
    assert all(e.instance and ":" in e.instance for e in events)
    assert all(e.tool == "delete_project" for e in events)
