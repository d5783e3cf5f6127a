"""`askback serve` writes one JSON line per audit event on stderr, formatted off the request path, and every line
queued before the server stops is written."""

from __future__ import annotations

import json
import os
import secrets
import signal
from pathlib import Path

import pytest

from askback.testing import accept, call_round, state_of
from infra import Instance

pytestmark = [pytest.mark.anyio, pytest.mark.http]


async def test_each_audit_event_is_a_json_line_and_none_is_lost_when_the_server_stops(tmp_path: Path) -> None:
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48), "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'db'}"}
    server = Instance("askback.demo:server", env)
    server.start()
    try:
        first = await call_round(server.url, "deploy", {"service": "logged"}, token="demo-ada")
        await call_round(
            server.url,
            "deploy",
            {"service": "logged"},
            responses={"pick_env": accept(environment="dev")},
            request_state=state_of(first),
            token="demo-ada",
        )
        assert server.proc is not None
        os.killpg(server.proc.pid, signal.SIGTERM)
        server.proc.wait(timeout=30)
        lines = [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]
    finally:
        server.stop()
    events = [(r["askback_event"], r["tool"], r["principal"]) for r in lines if "askback_event" in r]
    assert events == [("asked", "deploy", "ada"), ("answered", "deploy", "ada"), ("completed", "deploy", "ada")]
    answered = next(r for r in lines if r.get("askback_event") == "answered")
    assert answered["logger"] == "askback.audit" and answered["level"] == "info" and answered["keys"] == ["pick_env"]
