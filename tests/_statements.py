"""What each kind of round costs the store, counted: the SQL statements and transactions a round runs, for each flow
shape, on SQLite or PostgreSQL. Shared by the test that pins the counts (tests/store/test_round_statements.py) and
the benchmark that prints them (benchmarks/bench_statements.py).

Every round is a raw 2026-07-28 JSON-RPC request to the real app (`build_app`) in this process, through httpx's ASGI
transport: no socket, and a task's background run is awaited (`TaskRunner.idle`), so nothing is timed or polled.

Counted from the drivers' side, everything any askback connection runs: on SQLite every `sqlite3` connection's own
trace (askback runs its rounds on a plain `sqlite3` connection, `askback.db.sqlite`, and the rest through the
engine's), on PostgreSQL SQLAlchemy's engine events. A transaction is a BEGIN ... COMMIT (or ROLLBACK), or one
statement run in autocommit (its own transaction on the server). A connection's set-up (PRAGMAs) and the pool's
pre-ping are not counted: they are paid per connection or checkout, not per round.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, event
from tests.server._tasks import rpc

from askback import Askback, Confirm, Flow, Form, load_settings
from askback.clock import FrozenClock
from askback.server.http import build_app
from askback.store import Store

__all__ = ["SHAPES", "Cost", "Rounds", "StatementCounter", "costs", "counting"]

go = Confirm(key="go", message="Go ahead?", field="ok", title="Go ahead")


class Item(BaseModel):
    name: str


item = Form(key="item", model=Item, message="Which item?")


@dataclass(frozen=True)
class Cost:
    """What one round ran: SQL statements (BEGIN, COMMIT and ROLLBACK not among them) and transactions."""

    statements: int
    transactions: int


class StatementCounter:
    """Statements and transactions run on every askback connection while `counting()` is open."""

    def __init__(self) -> None:
        self.statements = 0
        self.transactions = 0
        # Every statement counted, in order, as its first line (BEGIN marks where each transaction starts).
        self.log: list[str] = []

    def cost(self) -> Cost:
        return Cost(self.statements, self.transactions)

    def sqlite(self, connection: sqlite3.Connection) -> None:
        inside = False

        def trace(sql: str) -> None:
            nonlocal inside
            verb = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
            if verb == "BEGIN":
                inside = True
                self.transactions += 1
                self.log.append("BEGIN")
            elif verb in ("COMMIT", "ROLLBACK", "END"):
                inside = False
            elif verb != "PRAGMA":
                self.statements += 1
                self.log.append(sql.strip().splitlines()[0])
                if not inside:
                    self.transactions += 1

        connection.set_trace_callback(trace)

    def begin(self, conn: Any) -> None:
        if conn.dialect.name != "sqlite" and not _autocommit(conn):
            self.transactions += 1
            self.log.append("BEGIN")

    def execute(self, conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if conn.dialect.name == "sqlite":
            return  # seen by the connection's own trace
        self.statements += 1
        self.log.append(sql.strip().splitlines()[0])
        if _autocommit(conn):
            self.transactions += 1


def _autocommit(conn: Any) -> bool:
    return bool(conn.get_execution_options().get("isolation_level") == "AUTOCOMMIT")


@contextmanager
def counting() -> Iterator[StatementCounter]:
    """Count what every SQLAlchemy engine and every `sqlite3` connection opened meanwhile runs; open it before the
    app opens its store, so that the store's own connections are traced from the start."""
    counter = StatementCounter()
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        connection = connect(*args, **kwargs)
        counter.sqlite(connection)
        return connection

    event.listen(Engine, "begin", counter.begin)
    event.listen(Engine, "before_cursor_execute", counter.execute)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sqlite3, "connect", traced)
        try:
            yield counter
        finally:
            event.remove(Engine, "begin", counter.begin)
            event.remove(Engine, "before_cursor_execute", counter.execute)


def build(settings: Any, clock: FrozenClock) -> Askback:
    """The tools each shape calls."""
    app = Askback("statements", settings=settings, clock=clock)
    written: list[str] = []

    async def once(flow: Flow, name: str) -> str:
        async def append() -> str:
            written.append(name)
            return name

        return f"Wrote {await flow.once('write', append)}."

    @app.tool()
    async def hello(name: str) -> str:
        return f"Hello, {name}!"

    @app.tool(asks=[item])
    async def write(flow: Flow) -> str:
        return await once(flow, flow.ask(item).name)

    @app.tool(asks=[go])
    async def confirm(flow: Flow) -> str:
        return "Went ahead." if flow.ask(go) else "Stayed."

    @app.tool(task="optional")
    async def task_write(name: str, flow: Flow) -> str:
        return await once(flow, name) if flow.ask(go) else "Kept."

    @app.tool(task="optional")
    async def task_confirm(flow: Flow) -> str:
        return "Went ahead." if flow.ask(go) else "Stayed."

    return app


class Rounds:
    """Raw JSON-RPC requests to one app in this process, each measured by `counter`."""

    def __init__(self, app: Askback, http: httpx.AsyncClient, counter: StatementCounter) -> None:
        self.app = app
        self.http = http
        self.counter = counter

    async def rpc(self, method: str, params: dict[str, Any], *, tasks: bool = False) -> dict[str, Any]:
        message = await rpc(self.http, "http://127.0.0.1/mcp", method, params, tasks=tasks)
        assert "result" in message, message
        result: dict[str, Any] = message["result"]
        return result

    async def measured(self, method: str, params: dict[str, Any], *, tasks: bool = False) -> tuple[Cost, Any]:
        """The request's answer, and what it cost (with the task run it started, when it started one)."""
        before = self.counter.cost()
        result = await self.rpc(method, params, tasks=tasks)
        task_id = result.get("taskId", params.get("taskId"))
        if task_id is not None:
            await self.app.tasks.runner.idle(task_id)
        after = self.counter.cost()
        return Cost(after.statements - before.statements, after.transactions - before.transactions), result


async def _no_question(rounds: Rounds) -> dict[str, Cost]:
    cost, result = await rounds.measured("tools/call", {"name": "hello", "arguments": {"name": "Ada"}})
    assert result["content"][0]["text"] == "Hello, Ada!"
    return {"call": cost}


async def _two_rounds(rounds: Rounds, tool: str, answers: dict[str, Any]) -> tuple[Cost, Cost, dict[str, Any], Any]:
    ask, first = await rounds.measured("tools/call", {"name": tool, "arguments": {}})
    assert first["resultType"] == "input_required", first
    final = {"name": tool, "arguments": {}, "inputResponses": answers, "requestState": first["requestState"]}
    answer, result = await rounds.measured("tools/call", final)
    return ask, answer, final, result


async def _write(rounds: Rounds) -> dict[str, Cost]:
    ask, answer, _, result = await _two_rounds(rounds, "write", {"item": _accept(name="lamp")})
    assert result["content"][0]["text"] == "Wrote lamp."
    return {"ask": ask, "answer": answer}


async def _confirm(rounds: Rounds) -> dict[str, Cost]:
    ask, answer, _, result = await _two_rounds(rounds, "confirm", {"go": _accept(ok=True)})
    assert result["content"][0]["text"] == "Went ahead."
    return {"ask": ask, "answer": answer}


async def _replay(rounds: Rounds) -> dict[str, Cost]:
    _, _, final, result = await _two_rounds(rounds, "write", {"item": _accept(name="desk")})
    again, replayed = await rounds.measured("tools/call", final)
    assert replayed == result
    return {"replay": again}


async def _task(rounds: Rounds, tool: str, arguments: dict[str, Any], text: str) -> dict[str, Cost]:
    ask, created = await rounds.measured("tools/call", {"name": tool, "arguments": arguments}, tasks=True)
    task_id = created["taskId"]
    waiting_get, waiting = await rounds.measured("tasks/get", {"taskId": task_id}, tasks=True)
    assert waiting["status"] == "input_required", waiting
    (key,) = waiting["inputRequests"]
    answers = {"taskId": task_id, "inputResponses": {key: _accept(ok=True)}}
    answer, _ = await rounds.measured("tasks/update", answers, tasks=True)
    done_get, done = await rounds.measured("tasks/get", {"taskId": task_id}, tasks=True)
    assert done["status"] == "completed" and done["result"]["content"][0]["text"] == text, done
    return {"ask": ask, "get (asked)": waiting_get, "answer": answer, "get (done)": done_get}


async def _task_write(rounds: Rounds) -> dict[str, Cost]:
    return await _task(rounds, "task_write", {"name": "chair"}, "Wrote chair.")


async def _task_confirm(rounds: Rounds) -> dict[str, Cost]:
    return await _task(rounds, "task_confirm", {}, "Went ahead.")


def _accept(**content: Any) -> dict[str, Any]:
    return {"action": "accept", "content": content}


# Each shape, by name: its rounds, in order, each with what it cost. A task's rounds: its `tools/call` with the run
# that asks, the `tasks/get` that finds the question, the `tasks/update` with the run that ends it, the `tasks/get`
# that finds the result.
SHAPES = {
    "no question": _no_question,
    "write (form + effect)": _write,
    "confirm": _confirm,
    "replayed answer": _replay,
    "task (confirm + effect)": _task_write,
    "task (confirm)": _task_confirm,
}


@asynccontextmanager
async def serving(database_url: str, counter: StatementCounter) -> AsyncIterator[Rounds]:
    """The shapes' app on `database_url`, its store open and its ASGI app started, requests measured by `counter`."""
    settings = load_settings(database_url=database_url, state_keys=secrets.token_urlsafe(32), demo_auth=True)
    app = build(settings, FrozenClock(at=1_800_000_000.0))
    asgi = build_app(app)
    async with app.running(), asgi.router.lifespan_context(asgi):
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            yield Rounds(app, http, counter)


async def costs(database_url: str) -> dict[str, dict[str, Cost]]:
    """Every shape's rounds and what each cost, on a new app on `database_url` (a database of its own, migrated on
    SQLite; run each shape once first, so that what is done once per process is not counted)."""
    if not database_url.startswith("sqlite"):
        await (await Store.open(database_url, migrate=True)).close()
    with counting() as counter:
        async with serving(database_url, counter) as rounds:
            for shape in SHAPES.values():
                await shape(rounds)  # warm: first-use reads, the first prune, a new audit chain's head
            return {name: await shape(rounds) for name, shape in SHAPES.items()}
