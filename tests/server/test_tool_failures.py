"""A call that fails with what nobody but the server's operator can act on (-32603): a typed confirmation asked
without `expect=` is refused before the question goes out, and every such failure leaves one line in the server's
log naming the tool and the exception, with its traceback, never the call's arguments."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, InputRequiredResult
from sqlalchemy.ext.asyncio import create_async_engine
from tests.server._tasks import call, serving_tasks, until_status

from askback import Askback, Confirm, DefinitionError, Flow, Link
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.errors import RoundInProgressError, StoreUnavailableError
from askback.testing import answered_by_hand, call_round, free_port
from infra import wait_until

pytestmark = pytest.mark.anyio

SECRET_ARGUMENT = "sk-live-never-in-the-log-5f1e"
typed = Confirm(key="confirm_project", message="Type the project's name.", field="project_name", typed=True)
pay = Link(key="pay", message="Pay.", url="https://pay.example.com/x")


def build(make_settings: Callable[..., Any], clock: FrozenClock) -> Askback:
    app = Askback("failures", settings=make_settings(), clock=clock)

    @app.tool(asks=[typed])
    async def delete_project(project_id: str, flow: Flow) -> str:
        if not flow.ask(typed):
            return "Cancelled."
        return f"Deleted {project_id}."

    @app.tool(asks=[typed])
    async def branch(project_id: str, flow: Flow) -> str:
        return str(flow.outcome(typed))

    @app.tool(asks=[pay])
    async def checkout(card_note: str, flow: Flow) -> str:
        flow.ask(pay)
        return "paid"

    @app.tool()
    async def busy(card_note: str) -> str:
        raise RoundInProgressError("another copy of this round has not finished; retry later")

    @app.tool()
    async def offline(card_note: str) -> str:
        raise StoreUnavailableError("the database cannot be reached")

    return app


@pytest.mark.parametrize("tool", ["delete_project", "branch"])
async def test_a_typed_confirmation_asked_without_expect_is_refused_before_the_question_goes_out(
    tool: str, make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    app = build(make_settings, clock)
    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        with pytest.raises(MCPError) as refused:
            result = await client.session.call_tool(tool, {"project_id": "prj_42"}, allow_input_required=True)
            assert not isinstance(result, InputRequiredResult), "the question went out"
        asked = await (await app.store()).audit_log.query(AuditFilter(event="asked"))
    error = refused.value.error
    assert error.code == -32603
    assert "'confirm_project'" in error.message and "expect=" in error.message
    assert ".py" not in error.message  # the server's file names stay on the server
    assert asked == []


async def test_a_minus_32603_failure_is_logged_once_at_error_with_the_tool_the_type_and_the_traceback(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = build(make_settings, clock)
    caplog.set_level(logging.INFO)
    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool("checkout", {"card_note": SECRET_ARGUMENT}, allow_input_required=True)
    assert refused.value.error.code == -32603
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    line = errors[0]
    assert line.name == "askback" and "'checkout'" in line.getMessage() and "DefinitionError" in line.getMessage()
    assert line.exc_info is not None and isinstance(line.exc_info[1], DefinitionError)
    assert getattr(line, "tool", None) == "checkout"
    assert "flow.ask(pay)" in caplog.text  # the traceback reaches the handler's own line
    assert SECRET_ARGUMENT not in caplog.text


async def test_a_retryable_minus_32603_failure_is_a_warning_without_a_traceback_and_a_database_error_is_logged(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = build(make_settings, clock)
    caplog.set_level(logging.INFO)
    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        for tool in ("busy", "offline"):
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool(tool, {"card_note": SECRET_ARGUMENT}, allow_input_required=True)
            assert refused.value.error.code == -32603
    lines = [r for r in caplog.records if r.name == "askback" and r.levelno >= logging.WARNING]
    assert [(r.levelname, getattr(r, "tool", None), r.exc_info is None) for r in lines] == [
        ("WARNING", "busy", True),
        ("WARNING", "offline", True),
    ]
    assert "RoundInProgressError" in lines[0].getMessage() and "may retry" in lines[0].getMessage()
    assert SECRET_ARGUMENT not in caplog.text


async def test_a_tool_error_and_an_answer_asked_for_leave_no_error_line(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = Askback("quiet", settings=make_settings(), clock=clock)
    go = Confirm(key="go", message="Go?")

    @app.tool(asks=[go])
    async def launch(flow: Flow) -> str:
        return "launched" if flow.ask(go) else "not launched"

    caplog.set_level(logging.INFO)
    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        first = await client.session.call_tool("launch", {}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_typed_confirmation_cannot_be_asked_first_by_a_task_tool(
    make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    app = Askback("first", settings=make_settings(), clock=clock)

    async def job(flow: Flow) -> str:
        return "done"

    with pytest.raises(DefinitionError) as refused:
        app.tool(name="job", task="optional", ask_first=[typed])(job)
    assert "'confirm_project'" in refused.value.message and "expect=" in refused.value.message
    assert "job" not in app.task_tools


@pytest.mark.http
async def test_a_task_whose_handler_crashes_is_logged_as_its_mrtr_call_is(
    db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with httpx.AsyncClient(timeout=20) as http, serving_tasks(db_url) as url:
        task_id = (await call(http, url, "boom", {}))["result"]["taskId"]
        task = await until_status(http, url, task_id, "completed", "failed")
    assert task["result"]["isError"] is True
    lines = [r for r in caplog.records if r.name == "askback" and r.levelno >= logging.ERROR]
    assert [(getattr(r, "tool", None), getattr(r, "error", None)) for r in lines] == [("boom", "RuntimeError")]
    assert lines[0].exc_info is not None and "hunter2" not in lines[0].getMessage()


async def test_a_meta_tool_failing_with_minus_32603_is_logged_with_its_name(
    make_settings: Callable[..., Any], clock: FrozenClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = Askback("no-accounts", settings=make_settings(expose="meta"), clock=clock)
    caplog.set_level(logging.INFO)
    async with app.running(), Client(app.mcp) as client:
        with pytest.raises(MCPError) as refused:
            await client.session.call_tool("connect_account", {"connection": "gmail"}, allow_input_required=True)
    assert refused.value.error.code == -32603 and "enable_accounts" in refused.value.error.message
    errors = [r for r in caplog.records if r.name == "askback" and r.levelno >= logging.ERROR]
    assert [(getattr(r, "tool", None), getattr(r, "error", None)) for r in errors] == [
        ("connect_account", "ConfigurationError")
    ]


SERVED_MODULE = """
from askback import Askback, Confirm, Flow

app = Askback("served-failures")
typed = Confirm(key="confirm_project", message="Type the project's name.", field="project_name", typed=True)


@app.tool(asks=[typed])
async def delete_project(project_id: str, flow: Flow) -> str:
    if not flow.ask(typed):
        return "Cancelled."
    return "Deleted."
"""


@contextmanager
def serving_with_log(folder: Path) -> Iterator[tuple[str, Path]]:
    """`askback serve served_failures:app` in `folder` (JSON logs on its stderr, into a file) until the block ends;
    its /mcp URL and the file."""
    (folder / "served_failures.py").write_text(SERVED_MODULE, encoding="utf-8")
    port, log = free_port(), folder / "server.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    env.update(ASKBACK_DATABASE_URL=f"sqlite:///{folder / 'askback.db'}", ASKBACK_LOG_FORMAT="json")
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "askback", "serve", "served_failures:app", "--port", str(port)],
            cwd=folder,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _healthy(port) or proc.poll() is not None, timeout=60, what="the server")
        yield f"http://127.0.0.1:{port}/mcp", log
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.http
async def test_a_served_call_refused_for_a_typed_confirmation_without_expect_leaves_one_error_line_on_stderr(
    tmp_path: Path,
) -> None:
    with serving_with_log(tmp_path) as (url, log):
        got = await call_round(url, "delete_project", {"project_id": SECRET_ARGUMENT})
    assert got.error is not None and got.error.code == -32603 and "expect=" in got.error.message
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    errors = [r for r in records if r["level"] == "error"]
    assert [(r["logger"], r["tool"], r["error"]) for r in errors] == [("askback", "delete_project", "DefinitionError")]
    assert "served_failures.py" in errors[0]["exception"]
    assert SECRET_ARGUMENT not in log.read_text()


@pytest.mark.parametrize(
    "raised", [FileNotFoundError("/etc/app/missing.toml"), TimeoutError("the pricing service did not answer")]
)
async def test_a_tools_own_os_error_or_timeout_is_its_failure_not_a_database_outage(
    raised: OSError, make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    app = Askback("own-errors", settings=make_settings(), clock=clock)

    @app.tool()
    async def read_config() -> str:
        raise raised

    async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
        result = await client.session.call_tool("read_config", {}, allow_input_required=True)
    assert isinstance(result, CallToolResult) and result.is_error
    assert result.content[0].text == "Error executing tool read_config"  # type: ignore[union-attr]


async def test_a_refused_connection_from_the_tools_own_database_is_an_outage(
    make_settings: Callable[..., Any], clock: FrozenClock
) -> None:
    app = Askback("own-database", settings=make_settings(), clock=clock)
    # Nothing listens on port 1 of loopback: the driver's connection is refused at once.
    engine = create_async_engine("postgresql+asyncpg://app:secret@127.0.0.1:1/app")

    @app.tool()
    async def report() -> str:
        async with engine.connect() as conn:
            return str((await conn.execute(sa.text("SELECT 1"))).scalar())

    try:
        async with app.running(), Client(app.mcp, elicitation_callback=answered_by_hand) as client:
            with pytest.raises(MCPError) as refused:
                await client.session.call_tool("report", {}, allow_input_required=True)
    finally:
        await engine.dispose()
    assert refused.value.error.code == -32603 and refused.value.error.data == {"retryable": True}
    assert "database is unavailable" in refused.value.error.message and "secret" not in refused.value.error.message
