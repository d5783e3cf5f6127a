"""Arguments that do not fit a tool's input schema: the caller is told which argument and why, by either exposure,
and neither the answer nor the audit row (nor its log line) quotes the value given, which may be anything."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import sqlalchemy as sa
from mcp import Client

from askback import Askback, load_settings
from askback.audit import AuditFilter

pytestmark = pytest.mark.anyio

VALUE = "sk-live-d0-not-keep-7f3a"


async def test_an_argument_value_never_reaches_the_answer_or_the_audit_rows_by_either_exposure(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32), expose="both"
    )
    app = Askback("arguments", settings=settings)

    @app.tool()
    async def open_issue(title: str, priority: int = 3) -> str:
        """Open an issue with this title."""
        return f"Opened {title!r}."

    async with app.running(), Client(app.mcp, mode="2026-07-28") as client:
        direct = await client.call_tool("open_issue", {"title": [VALUE], "priority": VALUE})
        meta = await client.call_tool("execute_tool", {"name": "open_issue", "arguments": {"title": {"k": VALUE}}})
        store = await app.store()
        refused = await store.audit_log.query(AuditFilter(event="rejected"))
        async with store.database.engine.connect() as conn:
            rows = [str(tuple(row)) for row in await conn.execute(sa.text("SELECT * FROM askback_audit"))]
    told = [r.content[0].text for r in (direct, meta)]  # type: ignore[union-attr]
    assert direct.is_error and meta.is_error
    assert told[0].startswith("Error executing tool open_issue: the arguments do not fit its input schema: title: ")
    assert "priority: Input should be a valid integer" in told[0] and "title: Input should be a valid string" in told[1]
    assert [(e.tool, e.outcome) for e in refused] == [("open_issue", "invalid_arguments")] * 2
    assert refused[0].detail == told[0] and told[1].endswith(f": {refused[1].detail}")
    for text in [*told, *rows, caplog.text]:
        assert VALUE not in text and "input_value" not in text and "errors.pydantic.dev" not in text
