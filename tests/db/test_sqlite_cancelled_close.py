"""A query cancelled on SQLite must not leave a task that hangs the event loop's shutdown.

SQLAlchemy ends a connection invalidated under a cancellation with a shielded graceful close and a forced stop beside
it; aiosqlite's own close then waits for ever on a worker thread that has gone, and `asyncio.run` (or `askback serve`
after Ctrl-C) never returns. The scenario runs in a child process, bounded by a deadline: on a hang it is killed and
the test fails. Its worker threads must also not answer a closed event loop ("Event loop is closed" tracebacks).
And every connection of one engine opens the same file, wherever the process is when it is opened."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from askback.db.engine import create_engine, probe_sqlite_file

DEADLINE = 60.0  # seconds the child may take; it needs well under one

SCENARIO = textwrap.dedent(
    """
    import asyncio, sys
    import anyio
    from sqlalchemy import text
    from sqlalchemy.engine import make_url
    from askback.db.engine import create_engine, probe_sqlite_file

    async def main(checkpoints: int) -> None:
        url = make_url("sqlite+aiosqlite:///" + sys.argv[1])
        probe_sqlite_file(url)
        engine = create_engine(url)
        async with anyio.create_task_group() as tasks:
            async def query() -> None:
                while True:
                    async with engine.connect() as conn:
                        await conn.execute(text("SELECT 1"))
            tasks.start_soon(query)
            for _ in range(checkpoints):
                await asyncio.sleep(0)
            tasks.cancel_scope.cancel()
        await engine.dispose()

    for checkpoints in range(12):
        asyncio.run(main(checkpoints))
    print("every loop closed")
    """
)


@pytest.mark.http
def test_a_query_cancelled_on_sqlite_lets_the_event_loop_close_without_a_stray_worker_reply(tmp_path: Path) -> None:
    script = tmp_path / "cancelled.py"
    script.write_text(SCENARIO, encoding="utf-8")
    try:
        done = subprocess.run(
            [sys.executable, str(script), str(tmp_path / "askback.db")],
            capture_output=True,
            text=True,
            timeout=DEADLINE,
        )
    except subprocess.TimeoutExpired:
        raise AssertionError("an event loop did not close after a cancelled SQLite query (a close hangs)") from None
    assert done.returncode == 0, done.stderr
    assert "every loop closed" in done.stdout
    assert "Event loop is closed" not in done.stderr and "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_every_connection_of_one_engine_opens_the_file_its_relative_path_named_when_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    monkeypatch.chdir(first)
    url = make_url("sqlite+aiosqlite:///relative.db")
    probe_sqlite_file(url)
    engine = create_engine(url)
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (x INTEGER)"))
            await conn.execute(text("INSERT INTO t VALUES (7)"))
        monkeypatch.chdir(second)
        # Two connections at once: the second is opened now, in the other directory.
        async with engine.connect() as held, engine.connect() as opened_now:
            assert (await held.execute(text("SELECT x FROM t"))).scalar() == 7
            assert (await opened_now.execute(text("SELECT x FROM t"))).scalar() == 7
    finally:
        await engine.dispose()
    assert not (second / "relative.db").exists()
