"""`askback serve` writes one JSON line per audit event on stderr, formatted off the request path, and every line
queued before the server stops is written; an issuer it cannot reach is said at start and, however many tokens are
answered 503, once per interval."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import secrets
import signal
import socket
from pathlib import Path
from typing import Any

import httpx
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
    # One line per round: the first round asked; the second was answered and completed the flow.
    audit = [r for r in lines if r["logger"] == "askback.audit"]
    rounds = [(r.get("askback_event"), r.get("askback_events"), r["tool"], r["principal"]) for r in audit]
    assert rounds == [("asked", None, "deploy", "ada"), (None, ["answered", "completed"], "deploy", "ada")]
    assert audit[0]["flow_id"] == audit[1]["flow_id"]
    second = audit[1]
    assert second["level"] == "info" and second["keys"] == ["pick_env"] and second["outcome"] == "completed"
    assert second["message"].startswith("askback answered,completed tool=deploy ")


def _log_lines(server: Instance) -> list[dict[str, Any]]:
    return [json.loads(line) for line in server.log.read_text().splitlines() if line.startswith("{")]


async def test_an_unreachable_issuer_is_logged_once_at_start_and_once_for_a_run_of_503s(tmp_path: Path) -> None:
    # A port bound and never listened on: connections to the issuer are refused.
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as down:
        down.bind(("127.0.0.1", 0))
        issuer = f"http://127.0.0.1:{down.getsockname()[1]}"
        env = {
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
            "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'db'}",
            "ASKBACK_AUTH_ISSUER": issuer,
            "ASKBACK_AUTH_AUDIENCE": "https://askback.test/mcp",
        }
        server = Instance("tests.fixtures.identity_server:server", env)
        server.start()
        try:
            claims = {"iss": issuer, "sub": "alice", "aud": "https://askback.test/mcp"}
            token = ".".join(_b64(json.dumps(part).encode()) for part in ({"alg": "RS256"}, claims)) + ".c2ln"
            async with httpx.AsyncClient(timeout=30) as http:
                for _ in range(5):
                    reply = await http.post(server.url, json={}, headers={"Authorization": f"Bearer {token}"})
                    assert reply.status_code == 503, reply.text
                    assert reply.headers["retry-after"]
            assert server.proc is not None
            os.killpg(server.proc.pid, signal.SIGTERM)
            server.proc.wait(timeout=30)
            lines = _log_lines(server)
        finally:
            server.stop()
    about = [r for r in lines if r.get("logger") == "askback.identity" and issuer in r["message"]]
    assert [r["level"] for r in about] == ["warning", "warning"], lines
    at_start, on_503s = (r["message"] for r in about)
    assert "cannot be reached" in at_start and "503" in at_start and token not in at_start
    assert "1 bearer token(s) answered 503" in on_503s and token not in on_503s


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
