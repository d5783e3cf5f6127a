"""What a task round costs against the same tool's MRTR round, and what a waiting task holds in the store and in
memory.

One tool, `approve(item)`: it asks one `Confirm` (`flow.ask`), records the item through `flow.once` and completes.
Declared `task="optional"`, so the same tool on the same server runs either way, as the request chooses:

- MRTR round (the baseline): `tools/call` answered `input_required` with a sealed `requestState`, then the retry
  with the answer and that state, answered with the result. Two requests.
- task round: `tools/call` declaring `io.modelcontextprotocol/tasks`, answered with the flat `CreateTaskResult` once
  the row is committed; `tasks/get` until `input_required` (the handler runs in the background and asks); one
  `tasks/update` with the answer; `tasks/get` until `completed`. The client polls with no pause, so the figure is
  the time to the result, and the polls it took are printed with it (a real client waits `pollIntervalMs`).

Both are raw 2026-07-28 JSON-RPC over one kept-alive `httpx` connection per side, to one server in its own process
(`bench_tasks.py --serve`, uvicorn, one worker, a SQLite file) on 127.0.0.1, interleaved round by round (the order
rotating) so that the machine's noise lands on both alike.

Then, on the same server: N tasks left waiting (`input_required`), the SQLite file's size (page count times page
size, the write-ahead log's pages included) and the server process's RSS read before and after, per waiting task.
Last, in this process with an injected clock: tasks left waiting, the clock moved past their time to live, and the
rows counted before and after the next `tasks/get`, which prunes them (no scheduler).

Figures are printed, never asserted: see benchmarks/README.md.

    python benchmarks/bench_tasks.py            # under half a minute on 2 cores
    python benchmarks/bench_tasks.py --quick    # a few seconds; rough figures
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import logging
import os
import platform
import secrets
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

import askback
from askback.clock import Clock, FrozenClock
from askback.server.http import build_app
from askback.testing import free_port

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TOKEN = "demo-bench"
KEY_ENV = "BENCH_TASKS_STATE_KEY"
APPROVE = askback.Confirm(key="approve", message="Approve this change?", field="ok", title="Approve")
SETTLE = 0.3  # seconds left to the server before its RSS is read
YES = {"action": "accept", "content": {"ok": True}}
FLOOR_METHOD = "bench/unknown"


class BenchError(RuntimeError):
    """The server did not answer as the round must: the figures would be meaningless."""


def build(database_url: str, key: str, clock: Clock | None = None, ttl: float = 3600.0) -> askback.Askback:
    """The benchmark's server: one task-capable tool that asks once and records once."""
    # One caller leaves thousands of tasks waiting on purpose: the per-caller cap is raised past what is measured.
    settings = askback.load_settings(
        database_url=database_url, state_keys=key, demo_auth=True, task_ttl=ttl, tasks_per_principal=100_000
    )
    app = askback.Askback("bench-tasks", settings=settings, clock=clock)
    recorded: list[str] = []

    @app.tool(task="optional")
    async def approve(item: str, flow: askback.Flow) -> str:
        """Record an item once the user approves it."""
        if not flow.ask(APPROVE):
            return "Not approved."

        async def record() -> str:
            recorded.append(item)
            return item

        return f"Approved {await flow.once('record', record)}."

    return app


def _quiet_logging() -> None:
    # askback logs every audit event at INFO: made and formatted (that cost is askback's), written to /dev/null.
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(sink)], force=True)


def serve(port: int, database: str) -> None:
    """The body of the server process: `bench_tasks.py --serve --port P --database URL`."""
    _quiet_logging()
    app = build_app(build(database, os.environ[KEY_ENV]))
    uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)).run()


# --- raw requests -------------------------------------------------------------------------------------------------


class Wire:
    """Raw 2026-07-28 JSON-RPC to one server: the request bodies and headers a client sends, and the result read."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.requests = 0
        self.timings: dict[str, list[float]] = {}
        """Seconds per request, by method (`tasks/get` by the status it answered)."""

    async def message(self, method: str, params: dict[str, Any], *, name: str, tasks: bool) -> dict[str, Any]:
        """The JSON-RPC message answering one request (a result or an error)."""
        capabilities: dict[str, Any] = {"elicitation": {"form": {}}}
        if tasks:
            capabilities["extensions"] = {TASKS: {}}
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench-tasks", "version": "0.1.0"},
            "io.modelcontextprotocol/clientCapabilities": capabilities,
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**params, "_meta": meta}}
        headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
            "Mcp-Name": name,
        }
        started = time.perf_counter()
        reply = await self.http.post(self.url, content=json.dumps(body, separators=(",", ":")), headers=headers)
        self.requests += 1
        text = reply.text
        if not text.lstrip().startswith("{"):
            text = "".join(line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
        message: dict[str, Any] = json.loads(text)
        took = time.perf_counter() - started
        status = message.get("result", {}).get("status") if method == "tasks/get" else None
        self.timings.setdefault(f"{method} ({status})" if status else method, []).append(took)
        return message

    async def rpc(self, method: str, params: dict[str, Any], *, name: str, tasks: bool) -> dict[str, Any]:
        """The result of one request; an error is the benchmark's failure."""
        message = await self.message(method, params, name=name, tasks=tasks)
        if "result" not in message:
            raise BenchError(f"{method}: {message}")
        result: dict[str, Any] = message["result"]
        return result

    async def create(self, item: str) -> str:
        created = await self.rpc(
            "tools/call", {"name": "approve", "arguments": {"item": item}}, name="approve", tasks=True
        )
        if created.get("resultType") != "task":
            raise BenchError(f"expected a task, got {created}")
        task_id: str = created["taskId"]
        return task_id

    async def until(self, task_id: str, status: str) -> dict[str, Any]:
        deadline = time.monotonic() + 30
        while True:
            task = await self.rpc("tasks/get", {"taskId": task_id}, name=task_id, tasks=True)
            if task["status"] == status:
                return task
            if task["status"] in ("failed", "cancelled") or time.monotonic() > deadline:
                raise BenchError(f"task {task_id[:6]}... is {task['status']}, not {status}: {task}")


async def task_round(wire: Wire, n: int) -> None:
    task_id = await wire.create(f"t{n}")
    (key,) = (await wire.until(task_id, "input_required"))["inputRequests"]
    await wire.rpc("tasks/update", {"taskId": task_id, "inputResponses": {key: YES}}, name=task_id, tasks=True)
    done = await wire.until(task_id, "completed")
    if done["result"]["content"][0]["text"] != f"Approved t{n}.":
        raise BenchError(f"unexpected result {done['result']}")


async def floor_request(wire: Wire, n: int) -> None:
    """A request for a method the server does not have: what any request costs through this server (HTTP, the
    middleware, the SDK's parsing and dispatch, the error's answer) before any work of its own."""
    message = await wire.message(FLOOR_METHOD, {}, name=FLOOR_METHOD, tasks=False)
    if message.get("error", {}).get("code") != -32601:
        raise BenchError(f"{FLOOR_METHOD}: expected -32601, got {message}")


async def mrtr_round(wire: Wire, n: int) -> None:
    params: dict[str, Any] = {"name": "approve", "arguments": {"item": f"m{n}"}}
    asked = await wire.rpc("tools/call", params, name="approve", tasks=False)
    if asked.get("resultType") != "input_required":
        raise BenchError(f"expected input_required, got {asked}")
    retry = {**params, "inputResponses": {"approve": YES}, "requestState": asked["requestState"]}
    done = await wire.rpc("tools/call", retry, name="approve", tasks=False)
    if done["content"][0]["text"] != f"Approved m{n}.":
        raise BenchError(f"unexpected result {done}")


# --- measures -----------------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchError(f"no VmRSS in /proc/{pid}/status")


def database_bytes(database: Path) -> int:
    """The database's size as SQLite sees it, the pages still in its write-ahead log included."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


def task_rows(database: Path, status: str | None = None) -> int:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        if status is None:
            return int(db.execute("SELECT COUNT(*) FROM askback_tasks").fetchone()[0])
        return int(db.execute("SELECT COUNT(*) FROM askback_tasks WHERE status = ?", (status,)).fetchone()[0])


def row_bytes(database: Path) -> float:
    """The mean size of a waiting task's stored values (every column's, as SQLite stores them)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(askback_tasks)")]
        total = " + ".join(f"COALESCE(LENGTH(CAST({c} AS BLOB)), 0)" for c in columns)
        found = db.execute(f"SELECT AVG({total}) FROM askback_tasks WHERE status = 'input_required'").fetchone()[0]
    return float(found or 0)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.2f} ms"


def _p90(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=10)[-1] if len(values) >= 2 else values[0]


async def waiting(wire: Wire, first: int, count: int, concurrency: int) -> None:
    """`count` tasks created and left `input_required`, `concurrency` at a time."""
    numbers = iter(range(first, first + count))

    async def one() -> None:
        for n in numbers:
            await wire.until(await wire.create(f"w{n}"), "input_required")

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(one)


@dataclass(frozen=True)
class Plan:
    warmup: int
    rounds: int
    steps: tuple[int, ...]
    pruned: int
    concurrency: int
    limit: float


async def rounds(plan: Plan, url: str) -> None:
    print(
        f"\n(a) one round of approve, {plan.rounds} of each side interleaved after {plan.warmup} warm-up rounds each: "
        "a task round (create, tasks/get until input_required, tasks/update, tasks/get until completed) against an "
        "MRTR round (input_required, retry, result)"
    )
    samples: dict[str, list[float]] = {"task": [], "mrtr": [], "floor": []}
    requests: dict[str, int] = {"task": 0, "mrtr": 0, "floor": 0}
    async with contextlib.AsyncExitStack() as stack:
        wires = {side: Wire(await stack.enter_async_context(httpx.AsyncClient(timeout=30)), url) for side in samples}
        drivers = {"task": task_round, "mrtr": mrtr_round, "floor": floor_request}
        with anyio.fail_after(plan.limit):
            for n in range(plan.warmup + plan.rounds):
                order = ("task", "mrtr", "floor") if n % 2 == 0 else ("floor", "mrtr", "task")
                for side in order:
                    before = wires[side].requests
                    started = time.perf_counter()
                    await drivers[side](wires[side], n)
                    if n >= plan.warmup:
                        samples[side].append(time.perf_counter() - started)
                        requests[side] += wires[side].requests - before
                    elif n == plan.warmup - 1:
                        wires[side].timings.clear()
    for side in ("mrtr", "task"):
        values = samples[side]
        print(
            f"{side + ' round':<11} p50 {_ms(statistics.median(values))}  p90 {_ms(_p90(values))}  "
            f"{requests[side] / len(values):5.1f} requests/round"
        )
    p50 = statistics.median(samples["task"]) / statistics.median(samples["mrtr"])
    p90 = _p90(samples["task"]) / _p90(samples["mrtr"])
    print(f"ratio task/mrtr  p50 {p50:.2f}  p90 {p90:.2f}   (target p50 <= 1.20)")
    for side in ("mrtr", "task"):
        parts = ", ".join(f"{kind} {statistics.median(v) * 1000:.2f}" for kind, v in wires[side].timings.items())
        print(f"  {side} requests, p50 ms: {parts}")
    # A task round is four requests where an MRTR round is two (the protocol's shape), and every request pays what
    # any request costs through this server and this client. Taken off, what is left is each round's own work.
    floor = statistics.median(samples["floor"])
    per_round = {side: requests[side] / len(samples[side]) for side in ("task", "mrtr")}
    own = {side: statistics.median(samples[side]) - per_round[side] * floor for side in ("task", "mrtr")}
    print(
        f"floor: a request for an unknown method, p50 {_ms(floor)}; beyond {per_round['task']:.1f} and "
        f"{per_round['mrtr']:.1f} floors, a task round's own work {_ms(own['task'])} against an MRTR round's "
        f"{_ms(own['mrtr'])}: {own['task'] / own['mrtr']:.2f}"
    )


async def growth(plan: Plan, url: str, pid: int, database: Path) -> None:
    print(
        f"\n(b) tasks left waiting (input_required) on the same server, {plan.concurrency} created at a time: the SQLite "
        "file (page count x page size, the WAL's pages included) and the server process's RSS"
    )
    async with httpx.AsyncClient(timeout=30) as http:
        wire = Wire(http, url)
        with anyio.fail_after(plan.limit):
            base_db, base_rss = database_bytes(database), rss_kib(pid)
            print(
                f"{'waiting':>8} {'rows':>6} {'db KiB':>8} {'db B/task':>10} {'step B/task':>12} {'RSS KiB':>9} "
                f"{'RSS B/task':>11} {'step B/task':>12}"
            )
            print(f"{0:>8,} {task_rows(database):>6,} {base_db // 1024:>8,} {'':>10} {'':>12} {base_rss:>9,}")
            last = (0, base_db, base_rss)
            for step in plan.steps:
                await waiting(wire, 1 + last[0], step - last[0], plan.concurrency)
                await anyio.sleep(SETTLE)
                size, rss = database_bytes(database), rss_kib(pid)
                n = step - last[0]
                print(
                    f"{step:>8,} {task_rows(database):>6,} {size // 1024:>8,} {(size - base_db) / step:>10,.0f} "
                    f"{(size - last[1]) / n:>12,.0f} {rss:>9,} {(rss - base_rss) * 1024 / step:>11,.0f} "
                    f"{(rss - last[2]) * 1024 / n:>12,.0f}"
                )
                last = (step, size, rss)
            if task_rows(database, "input_required") < last[0]:
                raise BenchError("not every task is waiting")
    print(
        f"a waiting task's row holds {row_bytes(database):,.0f} B of values (its flow state, the question it waits on, "
        "arguments, declared capabilities); db B/task adds the page overhead, the index on expires_at and its "
        "`asked` audit event. RSS grows with the SQLite file while its pages fit SQLite's page cache (2 MiB a "
        "connection by default), not with the tasks as such: the Python heap, in (c), stays within a few hundred "
        "bytes a task"
    )


class _Started(uvicorn.Server):
    """uvicorn, with an event set once it has started (or given up)."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


def _traced() -> int:
    gc.collect()
    return tracemalloc.get_traced_memory()[0]


async def pruning(plan: Plan, workdir: Path) -> None:
    ttl = 300.0
    print(
        f"\n(c) in this process, under an injected clock, on a server with ASKBACK_TASK_TTL={ttl:.0f}: twice "
        f"{plan.pruned} tasks left waiting after {plan.warmup} warm-up ones (tracemalloc, server and client together), "
        "then the clock moved past the TTL and one tasks/get sent"
    )
    database = workdir / "pruned.db"
    clock = FrozenClock(at=time.time())
    app = build_app(build(f"sqlite:///{database}", secrets.token_urlsafe(32), clock=clock, ttl=ttl))
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        server = _Started(uvicorn.Config(app, log_level="warning", access_log=False))
        async with anyio.create_task_group() as tg, httpx.AsyncClient(timeout=30) as http:
            tg.start_soon(server.serve, [listener])
            with anyio.fail_after(plan.limit):
                await server.ready.wait()
                if not server.started:
                    raise BenchError("uvicorn did not start the in-process server")
                wire = Wire(http, f"http://127.0.0.1:{listener.getsockname()[1]}/mcp")
                first = await wire.create("p0")
                await wire.until(first, "input_required")
                await waiting(wire, 1, plan.warmup - 1, plan.concurrency)
                tracemalloc.start()
                try:
                    traced = [_traced()]
                    for n in range(2):
                        await waiting(wire, 1000 * (n + 1), plan.pruned, plan.concurrency)
                        traced.append(_traced())
                    print(
                        f"waiting: {task_rows(database):,} rows, db {database_bytes(database) // 1024:,} KiB; traced "
                        f"memory per waiting task: {(traced[1] - traced[0]) / plan.pruned:+,.0f} B over the first "
                        f"{plan.pruned}, {(traced[2] - traced[1]) / plan.pruned:+,.0f} B over the next {plan.pruned}"
                    )
                    clock.advance(ttl + 1)
                    print(f"past the TTL, before any request: {task_rows(database):,} rows (they read as unknown)")
                    gone = await wire.message("tasks/get", {"taskId": first}, name=first, tasks=True)
                    code = gone.get("error", {}).get("code")
                    after = _traced()
                finally:
                    tracemalloc.stop()
                print(
                    f"after one tasks/get (answered {code}): {task_rows(database):,} rows left, the file still "
                    f"{database_bytes(database) // 1024:,} KiB (its pages free for reuse); traced memory "
                    f"{(after - traced[0]) / 1024:+,.0f} KiB from before the {2 * plan.pruned} tasks"
                )
            server.should_exit = True


async def run(plan: Plan, url: str, pid: int, database: Path, workdir: Path) -> None:
    await rounds(plan, url)
    await growth(plan, url, pid, database)
    await pruning(plan, workdir)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def server_process(database: Path, log: Path) -> Any:
    """`bench_tasks.py --serve` in its own process until the block ends; yields (its /mcp URL, its pid)."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--port", str(port), "--database", f"sqlite:///{database}"],
            env={**os.environ, KEY_ENV: secrets.token_urlsafe(32)},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the server did not start: see {log}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description="What a task round costs against an MRTR round, and a waiting task.")
    parser.add_argument("--rounds", type=int, default=None, help="measured rounds per side (300; quick 30)")
    parser.add_argument("--waiting", type=int, default=None, help="tasks left waiting, at most 2,000 (500; quick 100)")
    parser.add_argument("--quick", action="store_true", help="a few seconds: rough figures, for a smoke test")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    rounds_ = args.rounds or (30 if args.quick else 300)
    most = args.waiting or (100 if args.quick else 500)
    if rounds_ < 2 or not 2 <= most <= 2000:
        parser.error("--rounds takes at least 2, --waiting 2 to 2,000")
    plan = Plan(
        warmup=10 if args.quick else 30,
        rounds=rounds_,
        steps=(most // 5, most // 2, most),
        pruned=min(most, 50 if args.quick else 200),
        concurrency=4,
        limit=120.0 if args.quick else 600.0,
    )
    return args, plan


def main(argv: Sequence[str] | None = None) -> int:
    args, plan = parse(argv)
    if args.serve:
        serve(args.port, args.database)
        return 0
    started = time.monotonic()
    print(
        f"askback tasks bench: python {platform.python_version()}, mcp {version('mcp')}, askback {version('askback')}, "
        f"{os.cpu_count()} CPU(s)"
    )
    with tempfile.TemporaryDirectory(prefix="askback-bench-tasks-") as tmp:
        database = Path(tmp) / "tasks.db"
        with server_process(database, Path(tmp) / "server.log") as (url, pid):
            print(f"server: bench_tasks.py --serve (uvicorn, one worker, SQLite) at {url}, pid {pid}")
            anyio.run(run, plan, url, pid, database, Path(tmp))
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
