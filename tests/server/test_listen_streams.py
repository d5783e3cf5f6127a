"""Stopping `askback serve` while a client keeps a listen stream open (a 2025-11-25 session's standalone GET on
`/mcp`, as the MCP Inspector does): the stream is ended at once, cleanly, and the server exits long before its
graceful timeout, with no error in its log. The server is a real `askback serve` process whose SSE library does not
end streams by itself, so what ends this one is askback's own closing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from askback.testing import free_port
from infra import ROOT, wait_until

pytestmark = [pytest.mark.http]

GRACEFUL = 120  # seconds; the server must be gone well within half of it
LEGACY = "2025-11-25"


def initialize(http: httpx.Client, url: str) -> str:
    """A 2025-11-25 session, initialized; its id."""
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "listener", "version": "1"}}
    opened = http.post(url, headers=accept, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    headers = {**accept, "mcp-session-id": session, "mcp-protocol-version": LEGACY}
    done = http.post(url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert done.status_code == 202, done.text
    return session


@pytest.mark.parametrize("workers", [1, 2])
def test_a_listen_stream_is_closed_when_the_server_stops_and_the_server_exits_at_once(
    tmp_path: Path, workers: int
) -> None:
    port = free_port()
    log = tmp_path / "serve.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    env = {**clean, "ASKBACK_STATE_KEYS": "k" * 64, "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'listen.db'}"}
    argv = [sys.executable, "-m", "askback", "serve", "tests.fixtures.undrained_server:server", "--port", str(port)]
    argv += ["--workers", str(workers), "--graceful-timeout", str(GRACEFUL), "--log-format", "json"]
    with log.open("w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            assert proc.poll() is None, log.read_text()
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(healthy, timeout=60, what="askback serve")
        # One connection for the whole session: with several workers, its requests all reach the session's worker.
        with httpx.Client(timeout=httpx.Timeout(GRACEFUL / 2), limits=httpx.Limits(max_connections=1)) as http:
            session = initialize(http, f"{base}/mcp")
            listen = {"Accept": "text/event-stream", "mcp-session-id": session, "mcp-protocol-version": LEGACY}
            with http.stream("GET", f"{base}/mcp", headers=listen) as stream:
                assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
                stopped_at = time.monotonic()
                os.killpg(proc.pid, signal.SIGTERM)
                # The stream ends, cleanly (its last chunk sent), rather than running into the read timeout.
                for _ in stream.iter_bytes():
                    pass
        proc.wait(timeout=GRACEFUL / 2)
        assert time.monotonic() - stopped_at < GRACEFUL / 2
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    lines = log.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.startswith("{")]
    assert [r for r in records if r.get("level") in ("error", "critical")] == [], lines
    assert not any("Traceback" in line for line in lines), lines
