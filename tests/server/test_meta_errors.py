"""What a client is told when the database behind a call goes away: a retryable -32603 saying so, directly and through
META's `execute_tool`, with nothing of the server's database URL (host, port, user, database name) in it. The
PostgreSQL database is dropped under the running server, over real HTTP on loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from tests.infra import Postgres, _as_postgres, _pg_bin
from tests.server._tasks import call, serving_tasks

from askback.store import Store

pytestmark = pytest.mark.anyio


def drop(pg: Postgres, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    subprocess.run(
        _as_postgres(
            [_pg_bin("dropdb"), "--force", "-h", "127.0.0.1", "-p", str(pg.port), "-U", "askback", name],
        ),
        check=True,
        capture_output=True,
        env={**os.environ, "PGPASSWORD": pg.password},
    )


async def test_a_database_gone_is_a_retryable_error_naming_neither_its_url_nor_its_host_directly_or_through_meta(
    http: httpx.AsyncClient, pg: Postgres, fresh_pg_url: str, tmp_path: Path
) -> None:
    await (await Store.open(fresh_pg_url, migrate=True)).close()
    async with serving_tasks(fresh_pg_url, expose="both") as url:
        assert "result" in await call(http, url, "execute_tool", {"name": "greet", "arguments": {"name": "A"}})
        drop(pg, fresh_pg_url)
        # A tool that asks: its first round must record what it asks, and cannot.
        given = {"filename": "a.txt", "log": str(tmp_path / "effects")}
        direct = await call(http, url, "confirm_delete", given, tasks=False)
        through_meta = await call(
            http, url, "execute_tool", {"name": "confirm_delete", "arguments": given}, tasks=False
        )
    for reply in (direct, through_meta):
        error = reply["error"]
        assert error["code"] == -32603 and error["data"] == {"retryable": True}, reply
        assert "database is unavailable" in error["message"] and "retry" in error["message"]
        parts = urlsplit(fresh_pg_url)
        for secret in ("postgresql", "127.0.0.1", str(parts.port), parts.path.lstrip("/"), "askback:"):
            assert secret not in error["message"], (secret, error["message"])
