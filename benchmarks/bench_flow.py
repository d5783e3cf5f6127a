"""What askback costs per flow, against the same flow written by hand on the bare SDK, with and without a ledger.

A flow is one tool call taken over several MRTR rounds: each round but the last answers `input_required` with its
questions and a sealed `requestState`; the last brings the answers back, runs the tool's write once and completes.
Two flow shapes:

- `write`: two rounds. Round one asks a yes/no confirmation; round two confirms and the tool appends an item.
- `deploy`: three rounds, the demo's production deploy. Round one asks for an environment, round two (production)
  asks for a confirmation, round three records the deployment in a SQLite table.

The servers:

- A, askback: the demo server (`askback.demo.build`, whose `deploy` tool is the demo's own) plus a `write` tool that
  asks a `Confirm` through `flow.ask` and appends through `flow.once`. Each flow pays for what askback adds: its state
  inside the SDK's sealing, the completion record and the effects ledger in a SQLite file, and the audit trail.
- A2, askback-2: a second, identical askback server (its own file), so that A/A2 shows the harness's noise floor.
- B, bare: the same wire exchange by hand on the SDK's `MCPServer`: a constant `requestState` sealed by the SDK, the
  answers checked, the write done. No audit, no ledger, no replay protection: the floor a hand-written server pays.
- C, bare+ledger: B plus an exactly-once ledger written by hand in a SQLite file: a flow id carried in the
  `requestState`, the write and its ledger row in one transaction, a replayed final round given the recorded outcome.

Three modes, interleaved flow by flow in one run (the order of the sides rotates each flow) so that the machine's
noise lands on every side alike:

- raw HTTP (the figure the targets apply to): pre-built JSON-RPC `tools/call` bodies, each round's `requestState`
  taken from the previous reply, sent over one kept-alive `httpx` connection per side to servers in their own
  uvicorn processes (one worker each) on 127.0.0.1. No SDK client in the loop.
- SDK client over HTTP: the same servers, a new official SDK client per flow over one kept-alive connection.
- in memory: the SDK's in-process client, one for the whole run: the server's own work with the least around it.

Figures are printed, never asserted: see benchmarks/README.md.

    python benchmarks/bench_flow.py            # under a minute on 2 cores
    python benchmarks/bench_flow.py --quick    # a few seconds, rough figures
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
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, Literal

import anyio
import httpx
import httpx2
import uvicorn
from mcp import Client
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.request_state import RequestStateSecurity
from mcp_types import (
    CallToolResult,
    ElicitRequest,
    ElicitRequestFormParams,
    ElicitResult,
    InputRequiredResult,
    InputResponses,
)

import askback
import askback.demo
from askback.server.http import build_app
from askback.testing import answered_by_hand, free_port, text

MODE = "2026-07-28"
TOOL = "write"
MESSAGE = "Write this item?"
# The state key reaches the server processes through the environment, not their command line.
KEY_ENV = "BENCH_FLOW_STATE_KEY"

ASKBACK, ASKBACK_2, BARE, LEDGER = "askback", "askback-2", "bare", "bare+ledger"
SIDES = (ASKBACK, ASKBACK_2, BARE, LEDGER)
KIND = {ASKBACK: "askback", ASKBACK_2: "askback", BARE: "bare", LEDGER: "ledger"}

# (numerator, denominator, {mode: target}); the verdict is on the flow's p50. A missing target prints a note instead.
RATIOS: tuple[tuple[str, str, dict[str, float]], ...] = (
    (ASKBACK, LEDGER, {"raw-http": 1.15}),
    (ASKBACK, BARE, {"raw-http": 1.25, "in-memory": 1.30}),
    (ASKBACK, ASKBACK_2, {}),
    (LEDGER, BARE, {}),
)
# Server CPU per flow, askback against the bare SDK (raw HTTP).
CPU_TARGET = 1.4
NOTES = {
    (ASKBACK, ASKBACK_2): "the harness's noise floor: two identical servers",
    (LEDGER, BARE): "what the hand-written ledger costs",
}

CONFIRM = askback.Confirm(key="confirm", message=MESSAGE, field="confirm", title="Confirm")
# What `CONFIRM` and the demo's two questions render to, written out by hand for the bare servers: every side asks
# the same questions.
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
    "required": ["confirm"],
}
ENVIRONMENTS = ("dev", "staging", "production")
PICK_ENV_MESSAGE = "Which environment should I deploy to?"
PICK_ENV_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"environment": {"type": "string", "title": "Environment", "enum": list(ENVIRONMENTS)}},
    "required": ["environment"],
}
CONFIRM_PROD_MESSAGE = "Deploy to production? This affects every user."
CONFIRM_PROD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Yes, deploy to production"}},
    "required": ["confirm"],
}
NO_ENV = "Cancelled: no environment was chosen; nothing was deployed."
NO_PROD = "Cancelled: production deploy not confirmed."

YES: InputResponses = {"confirm": ElicitResult(action="accept", content={"confirm": True})}


@dataclass(frozen=True)
class Shape:
    """A flow shape for the raw-HTTP mode: the tool, its one varying argument, the answers sent with each round
    (none with the first), and the text the last round completes with."""

    name: str
    tool: str
    argument: str
    answers: tuple[InputResponses | None, ...]
    done: str

    def completed(self, value: str) -> str:
        return self.done.format(value)


WRITE = Shape("write", TOOL, "item", (None, YES), "Wrote {}.")
DEPLOY = Shape(
    "deploy",
    "deploy",
    "service",
    (
        None,
        {"pick_env": ElicitResult(action="accept", content={"environment": "production"})},
        {"confirm_prod": ElicitResult(action="accept", content={"confirm": True})},
    ),
    "Deployed {} to production.",
)
SHAPES = (WRITE, DEPLOY)

FlowFn = Callable[[int], Awaitable[tuple[int, ...]]]
"""Runs flow number n and returns the nanoseconds each of its rounds took."""


class BenchError(RuntimeError):
    """A flow did not go as it must: the figures would be meaningless."""


# --- the servers ------------------------------------------------------------------------------------------------


def build_askback(database_url: str, key: str, writes: list[str]) -> askback.Askback:
    """The demo server (its `deploy` as it is) with the benchmark's `write` tool added."""
    settings = askback.load_settings(database_url=database_url, state_keys=key)
    app = askback.demo.build(settings)

    @app.tool(name=TOOL, asks=[CONFIRM])
    async def write(item: str, flow: askback.Flow) -> str:
        """Write an item after the user confirms."""
        if not flow.ask(CONFIRM):
            return "Not confirmed; nothing was written."

        async def append() -> str:
            writes.append(item)
            return item

        await flow.once("write", append)
        return f"Wrote {item}."

    return app


class HandDb:
    """The SQLite file of the hand-written servers, as a careful user writes it: one plain `sqlite3` connection on
    the event loop, WAL with `synchronous=NORMAL` (askback's own durability), a `deployments` table, and a ledger
    keyed by flow id. `once` runs an effect and records its outcome in one transaction; a second run of the same
    flow gets the recorded outcome and runs nothing."""

    def __init__(self, path: str) -> None:
        # One worker, one connection, used only from the event loop's thread.
        self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.db.execute("PRAGMA journal_mode = WAL")
        self.db.execute("PRAGMA synchronous = NORMAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS ledger (flow_id TEXT PRIMARY KEY, outcome TEXT NOT NULL)")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS deployments "
            "(id INTEGER PRIMARY KEY, service TEXT NOT NULL, environment TEXT NOT NULL)"
        )

    def record(self, service: str, environment: str) -> None:
        self.db.execute("INSERT INTO deployments (service, environment) VALUES (?, ?)", (service, environment))

    def once(self, flow_id: str, effect: Callable[[], str]) -> str:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute("SELECT outcome FROM ledger WHERE flow_id = ?", (flow_id,)).fetchone()
            if row is not None:
                self.db.execute("ROLLBACK")
                return str(row[0])
            outcome = effect()
            self.db.execute("INSERT INTO ledger (flow_id, outcome) VALUES (?, ?)", (flow_id, outcome))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        return outcome


def build_bare(key: str, writes: list[str], db: HandDb, *, ledger: bool = False) -> MCPServer[Any]:
    """B (`ledger=False`) or C (`ledger=True`). The `requestState` is `step[/value]` for B and `step[/value]/flow`
    for C, sealed by the SDK; C's final round goes through `db.once(flow, ...)`."""
    server: MCPServer[Any] = MCPServer(
        "bench-ledger" if ledger else "bench-bare", request_state_security=RequestStateSecurity(keys=[key])
    )

    def parse(state: str | None) -> tuple[list[str], str]:
        parts = (state or "").split("/")
        if ledger and len(parts) > 1:
            return parts[:-1], parts[-1]
        return parts, secrets.token_hex(8) if ledger else ""

    def ask(key_: str, message: str, schema: dict[str, Any], state: list[str], flow: str) -> InputRequiredResult:
        params = ElicitRequestFormParams(message=message, requested_schema=schema)
        sealed = "/".join([*state, flow] if ledger else state)
        return InputRequiredResult(input_requests={key_: ElicitRequest(params=params)}, request_state=sealed)

    def finish(flow: str, effect: Callable[[], str]) -> str:
        return db.once(flow, effect) if ledger else effect()

    @server.tool(name=TOOL)
    async def write(item: str, ctx: Context) -> str | InputRequiredResult:
        """Write an item after the user confirms."""
        (step, *_), flow = parse(ctx.request_state)
        answer = (ctx.input_responses or {}).get("confirm")
        if step != "confirm" or not isinstance(answer, ElicitResult):
            return ask("confirm", MESSAGE, CONFIRM_SCHEMA, ["confirm"], flow)
        if answer.action != "accept":
            return "Not confirmed; nothing was written."
        confirmed = (answer.content or {}).get("confirm")
        if not isinstance(confirmed, bool):
            return ask("confirm", MESSAGE, CONFIRM_SCHEMA, ["confirm"], flow)
        if not confirmed:
            return "Not confirmed; nothing was written."

        def append() -> str:
            writes.append(item)
            return f"Wrote {item}."

        return finish(flow, append)

    @server.tool(name="deploy")
    async def deploy(
        service: str, ctx: Context, environment: Literal["dev", "staging", "production"] | None = None
    ) -> str | InputRequiredResult:
        """Deploy a service. Without `environment` the user picks one; production asks for confirmation."""
        state, flow = parse(ctx.request_state)
        responses = ctx.input_responses or {}
        env = environment
        if env is None:
            if state[0] == "pick_env":
                answer = responses.get("pick_env")
                if isinstance(answer, ElicitResult) and answer.action != "accept":
                    return NO_ENV
                chosen = (answer.content or {}).get("environment") if isinstance(answer, ElicitResult) else None
                env = chosen if chosen in ENVIRONMENTS else None
            elif state[0] == "confirm_prod" and len(state) == 2 and state[1] in ENVIRONMENTS:
                env = state[1]
            if env is None:
                return ask("pick_env", PICK_ENV_MESSAGE, PICK_ENV_SCHEMA, ["pick_env"], flow)
        if env == "production":
            answer = responses.get("confirm_prod") if state[0] == "confirm_prod" else None
            if isinstance(answer, ElicitResult) and answer.action != "accept":
                return NO_PROD
            confirmed = (answer.content or {}).get("confirm") if isinstance(answer, ElicitResult) else None
            if not isinstance(confirmed, bool):
                return ask("confirm_prod", CONFIRM_PROD_MESSAGE, CONFIRM_PROD_SCHEMA, ["confirm_prod", env], flow)
            if not confirmed:
                return NO_PROD
        deployed = env

        def record() -> str:
            db.record(service, deployed)
            return f"Deployed {service} to {deployed}."

        return finish(flow, record)

    return server


# --- driving flows: the SDK client ------------------------------------------------------------------------------


async def two_rounds(session: ClientSession, item: str) -> tuple[int, int]:
    start = time.perf_counter_ns()
    first = await session.call_tool(TOOL, {"item": item}, allow_input_required=True)
    between = time.perf_counter_ns()
    if not isinstance(first, InputRequiredResult) or first.request_state is None:
        raise BenchError(f"round one should ask, got {first!r}")
    second = await session.call_tool(
        TOOL, {"item": item}, input_responses=YES, request_state=first.request_state, allow_input_required=True
    )
    end = time.perf_counter_ns()
    if not isinstance(second, CallToolResult) or second.is_error:
        raise BenchError(f"round two should complete, got {second!r}")
    said = text(second)
    if said != f"Wrote {item}.":
        raise BenchError(f"round two completed with {said!r}")
    return between - start, end - between


@contextlib.asynccontextmanager
async def in_memory(server: MCPServer[Any]) -> AsyncIterator[FlowFn]:
    """One in-process client for the whole run: what is measured is the server's work and the SDK's dispatch."""
    async with Client(server, mode=MODE, elicitation_callback=answered_by_hand) as client:
        await client.list_tools()

        async def flow(n: int) -> tuple[int, ...]:
            return await two_rounds(client.session, f"item-{n}")

        yield flow


@contextlib.asynccontextmanager
async def over_http(url: str) -> AsyncIterator[FlowFn]:
    """A new SDK client per flow (a flow is a new conversation), all sharing one kept-alive HTTP connection."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:

        async def flow(n: int) -> tuple[int, ...]:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=MODE, elicitation_callback=answered_by_hand) as client:
                # The client checks a result against the tool's listed output schema, listing the tools first if
                # it has not: list them here, outside the timed rounds (every server answers tools/list with
                # `ttlMs: 0`, so a shared response cache would not spare the request).
                await client.list_tools()
                return await two_rounds(client.session, f"item-{n}")

        yield flow


# --- driving flows: raw HTTP ------------------------------------------------------------------------------------

# What the SDK client sends with every 2026-07-28 request: the headers, and `_meta` naming the protocol version,
# the client and its capabilities (elicitation, which a server needs before it asks).
RAW_META: dict[str, Any] = {
    "io.modelcontextprotocol/protocolVersion": MODE,
    "io.modelcontextprotocol/clientInfo": {"name": "bench-raw", "version": "0.1.0"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
}
ARG = b"@@ARG@@"
STATE = b"@@STATE@@"


def raw_bodies(shape: Shape) -> list[bytes]:
    """The JSON-RPC body of each round, built once: the argument's value and the `requestState` are placeholders,
    replaced byte for byte when the round is sent (neither needs JSON escaping)."""
    bodies: list[bytes] = []
    for n, answers in enumerate(shape.answers):
        params: dict[str, Any] = {"name": shape.tool, "arguments": {shape.argument: ARG.decode()}, "_meta": RAW_META}
        if answers is not None:
            params["inputResponses"] = {k: v.model_dump(mode="json", exclude_none=True) for k, v in answers.items()}
        if n:
            params["requestState"] = STATE.decode()
        message = {"jsonrpc": "2.0", "id": n + 1, "method": "tools/call", "params": params}
        bodies.append(json.dumps(message, separators=(",", ":")).encode())
    return bodies


def raw_headers(tool: str) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODE,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
    }


def rpc_result(reply: httpx.Response) -> dict[str, Any]:
    """The `result` of the JSON-RPC reply in a body (plain JSON, or the `data:` of a one-event SSE stream)."""
    body = reply.text
    if not body.lstrip().startswith("{"):
        body = "".join(line[5:].strip() for line in body.splitlines() if line.startswith("data:"))
    message = json.loads(body)
    if reply.status_code != 200 or "result" not in message:
        raise BenchError(f"HTTP {reply.status_code}: {message!r}")
    result: dict[str, Any] = message["result"]
    return result


class RawFlow:
    """Flows of one shape against one server over one kept-alive connection; each round timed from sending its
    body to having read the whole reply."""

    def __init__(self, http: httpx.AsyncClient, url: str, shape: Shape) -> None:
        self.http = http
        self.url = url
        self.shape = shape
        self.bodies = raw_bodies(shape)
        self.headers = raw_headers(shape.tool)
        self.last: tuple[bytes, str] | None = None  # the last flow's final body and what it completed with

    async def __call__(self, n: int) -> tuple[int, ...]:
        value = f"{self.shape.argument}-{n}"
        arg = value.encode()
        state = b""
        times: list[int] = []
        for r, template in enumerate(self.bodies):
            body = template.replace(ARG, arg).replace(STATE, state)
            start = time.perf_counter_ns()
            reply = await self.http.post(self.url, content=body, headers=self.headers)
            times.append(time.perf_counter_ns() - start)
            result = rpc_result(reply)
            if r + 1 < len(self.bodies):
                if result.get("resultType") != "input_required" or not result.get("requestState"):
                    raise BenchError(f"{self.shape.name} round {r + 1} should ask, got {result!r}")
                wanted = self.shape.answers[r + 1] or {}
                if set(result.get("inputRequests") or {}) != set(wanted):
                    raise BenchError(f"{self.shape.name} round {r + 1} asked {result.get('inputRequests')!r}")
                state = result["requestState"].encode()
            else:
                said = self.completed(result)
                if said != self.shape.completed(value):
                    raise BenchError(f"{self.shape.name} completed with {said!r}")
                self.last = (body, said)
        return tuple(times)

    def completed(self, result: dict[str, Any]) -> str:
        if result.get("resultType", "complete") != "complete" or result.get("isError"):
            raise BenchError(f"{self.shape.name}'s last round should complete, got {result!r}")
        return " ".join(c.get("text", "") for c in result.get("content", []))

    async def replay(self) -> bool:
        """Send the last flow's final round again: True when it completes with what it completed with."""
        assert self.last is not None, "replay() after a flow"
        body, said = self.last
        reply = await self.http.post(self.url, content=body, headers=self.headers)
        return self.completed(rpc_result(reply)) == said


@contextlib.asynccontextmanager
async def raw_http(url: str, shape: Shape) -> AsyncIterator[RawFlow]:
    # One connection, kept alive: no TCP set-up in the figures, and requests never overlap.
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as http:
        yield RawFlow(http, url, shape)


async def rotate(
    flows_by_side: Mapping[str, FlowFn],
    *,
    flows: int,
    warmup: int,
    cpu: Callable[[], dict[str, float]] | None = None,
    spent: dict[str, float] | None = None,
) -> dict[str, list[tuple[int, ...]]]:
    """Warm every side up, then run flow n on every side, the order rotating by one side each flow. With `cpu` (each
    side's CPU seconds so far), `spent` gets each side's CPU seconds over the measured flows."""
    sides = list(flows_by_side)
    for n in range(warmup):
        for side in sides:
            await flows_by_side[side](n)
    gc.collect()
    times: dict[str, list[tuple[int, ...]]] = {side: [] for side in sides}
    before = cpu() if cpu is not None else {}
    for n in range(warmup, warmup + flows):
        k = n % len(sides)
        for side in sides[k:] + sides[:k]:
            times[side].append(await flows_by_side[side](n))
    if cpu is not None and spent is not None:
        after = cpu()
        spent.update({side: after[side] - before[side] for side in before})
    return times


# --- memory -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Memory:
    flows: int
    peak: int
    retained: int
    rss_growth: int | None


def _rss() -> int | None:
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE")


async def measure_memory(flow: FlowFn, *, flows: int, first: int) -> Memory:
    """tracemalloc's peak above the starting point while `flows` flows run, and what is still held after them."""
    gc.collect()
    rss_before = _rss()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for n in range(first, first + flows):
            await flow(n)
        gc.collect()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rss_after = _rss()
    growth = rss_after - rss_before if rss_before is not None and rss_after is not None else None
    return Memory(flows=flows, peak=peak - base, retained=current - base, rss_growth=growth)


# --- serving over HTTP --------------------------------------------------------------------------------------------


def _quiet_logging() -> None:
    # The SDK's MCPServer installs a rich console handler at INFO when the root logger has none, and askback logs
    # every audit event at INFO. Records are still made and formatted here (that cost is askback's), but written
    # to /dev/null instead of rendered on a terminal, as a production log pipeline would take them.
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    handler = logging.StreamHandler(sink)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)


def serve(kind: str, port: int, database: str) -> None:
    """The body of a server process: `bench_flow.py --serve askback|bare|ledger` (askback takes a database URL,
    the others a SQLite file)."""
    _quiet_logging()
    key = os.environ[KEY_ENV]
    writes: list[str] = []
    if kind == "askback":
        app: Any = build_app(build_askback(database, key, writes))
    else:
        server = build_bare(key, writes, HandDb(database), ledger=kind == "ledger")
        app = server.streamable_http_app(stateless_http=True, json_response=True)
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Servers:
    """One server process per side, started together; `ready()` waits until each listens and gives the URLs."""

    def __init__(self, sides: dict[str, tuple[str, str]], *, key: str, logs: Path) -> None:
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
        for side, (kind, database) in sides.items():
            port = free_port()
            log = logs / f"server-{kind}-{port}.log"
            # To a file, not a pipe: nobody reads a pipe during the run, and a full one would stall the server.
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, __file__, "--serve", kind, "--port", str(port), "--database", database],
                    env={**os.environ, KEY_ENV: key},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.procs[side] = (proc, port, log)

    def ready(self, timeout: float = 30.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        waiting = dict(self.procs)
        while waiting:
            for side, (proc, port, log) in list(waiting.items()):
                if proc.poll() is not None:
                    raise BenchError(f"the {side} server stopped while starting:\n{log.read_text(errors='replace')}")
                # uvicorn listens only once the app's start-up (for askback: store opened, migrated) is done.
                if _listening(port):
                    del waiting[side]
            if waiting and time.monotonic() > deadline:
                raise BenchError(f"the {', '.join(waiting)} server(s) did not start within {timeout:g} seconds")
            time.sleep(0.05)
        return {side: f"http://127.0.0.1:{port}/mcp" for side, (_, port, _) in self.procs.items()}

    def cpu(self) -> dict[str, float]:
        """Each server process's CPU seconds so far, user and system (Linux's /proc)."""
        tick = os.sysconf("SC_CLK_TCK")
        seconds = {}
        for side, (proc, _, _) in self.procs.items():
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            seconds[side] = (int(fields[11]) + int(fields[12])) / tick
        return seconds

    def show_logs(self) -> None:
        for side, (_, _, log) in self.procs.items():
            output = log.read_text(errors="replace").strip()
            if output:
                print(f"--- {side} server output ---\n{output[-4000:]}", file=sys.stderr)

    def stop(self) -> None:
        for proc, _, _ in self.procs.values():
            proc.terminate()
        for proc, _, _ in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# --- the run ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    modes: tuple[str, ...]
    raw_flows: int
    flows: int
    http_flows: int
    warmup: int
    memory_flows: int
    overlap_start: bool


@dataclass(frozen=True)
class Timing:
    mode: str
    shape: str
    rounds: int
    by_side: dict[str, list[tuple[int, ...]]]
    # Server CPU seconds per side over the measured flows (raw HTTP only).
    cpu: dict[str, float] | None = None

    def column(self, side: str, r: int | None) -> list[int]:
        """One round's times (0-based), or with `None` each flow's: the sum of its rounds."""
        return [sum(t) if r is None else t[r] for t in self.by_side[side]]


def _us(ns: float) -> float:
    return ns / 1000


def _p50(values: Sequence[int]) -> float:
    return statistics.median(values)


def _p90(values: Sequence[int]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _columns(timing: Timing) -> list[int | None]:
    return [*range(timing.rounds), None]


def header(timing: Timing) -> str:
    cells = "".join(
        f" {f'round {r + 1} p50':>13} {'p90':>7}" if r is not None else f" {'flow p50':>13} {'p90':>7}"
        for r in _columns(timing)
    )
    return f"{'mode':<9} {'flow':<7} {'side':<30} {'flows':>6}{cells}"


def report_timing(timing: Timing) -> None:
    print(header(timing))
    for side in timing.by_side:
        cells = "".join(
            f" {_us(_p50(timing.column(side, r))):>13.0f} {_us(_p90(timing.column(side, r))):>7.0f}"
            for r in _columns(timing)
        )
        print(f"{timing.mode:<9} {timing.shape:<7} {side:<30} {len(timing.by_side[side]):>6}{cells}")
    for num, den, targets in RATIOS:
        if num not in timing.by_side or den not in timing.by_side:
            continue
        cells = "".join(
            f" {_p50(timing.column(num, r)) / _p50(timing.column(den, r)):>12.2f}x"
            f" {_p90(timing.column(num, r)) / _p90(timing.column(den, r)):>6.2f}x"
            for r in _columns(timing)
        )
        flow_ratio = _p50(timing.column(num, None)) / _p50(timing.column(den, None))
        target = targets.get(timing.mode)
        if target is not None:
            verdict = "within target" if flow_ratio <= target else "ABOVE target"
            note = f"target: flow p50 <= {target:.2f}x; {verdict}"
        else:
            note = NOTES.get((num, den), "no target in this mode")
        label = f"ratio {num}/{den}"
        print(f"{timing.mode:<9} {timing.shape:<7} {label:<30} {'':>6}{cells}   ({note})")
    if timing.cpu:
        report_cpu(timing)


def report_cpu(timing: Timing) -> None:
    """Server CPU per flow, each side, and askback's against the bare SDK's (what a busy deployment pays per core)."""
    assert timing.cpu is not None
    flows = {side: len(times) for side, times in timing.by_side.items()}
    per_flow = {side: seconds / flows[side] * 1e6 for side, seconds in timing.cpu.items()}
    cells = ", ".join(f"{side} {us:,.0f}" for side, us in per_flow.items())
    print(f"{timing.mode:<9} {timing.shape:<7} server CPU per flow, microseconds: {cells}")
    for num, den in ((ASKBACK, BARE), (ASKBACK, LEDGER), (ASKBACK, ASKBACK_2)):
        if per_flow.get(den):
            target = f"; target <= {CPU_TARGET:.2f}x" if den == BARE else ""
            print(
                f"{timing.mode:<9} {timing.shape:<7} server CPU ratio {num}/{den}: {per_flow[num] / per_flow[den]:.2f}x{target}"
            )


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def report_memory(side: str, mem: Memory) -> None:
    rss = _kib(mem.rss_growth) if mem.rss_growth is not None else "n/a"
    print(
        f"memory    {side:<12} {mem.flows:>6} {_kib(mem.peak):>12} {_kib(mem.retained):>12} "
        f"{mem.retained / mem.flows:>10,.0f} B {rss:>12}"
    )


async def measure_in_memory(plan: Plan, workdir: Path, key: str) -> tuple[Timing, dict[str, Memory]]:
    writes: dict[str, list[str]] = {side: [] for side in SIDES}
    app = build_askback(f"sqlite:///{workdir / 'memory-askback.db'}", key, writes[ASKBACK])
    app_2 = build_askback(f"sqlite:///{workdir / 'memory-askback-2.db'}", key, writes[ASKBACK_2])
    bare = build_bare(key, writes[BARE], HandDb(str(workdir / "memory-bare.db")))
    ledger = build_bare(key, writes[LEDGER], HandDb(str(workdir / "memory-ledger.db")), ledger=True)
    memory: dict[str, Memory] = {}
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(app.running())
        await stack.enter_async_context(app_2.running())
        flows = {
            ASKBACK: await stack.enter_async_context(in_memory(app.mcp)),
            ASKBACK_2: await stack.enter_async_context(in_memory(app_2.mcp)),
            BARE: await stack.enter_async_context(in_memory(bare)),
            LEDGER: await stack.enter_async_context(in_memory(ledger)),
        }
        times = await rotate(flows, flows=plan.flows, warmup=plan.warmup)
        if plan.memory_flows:
            first = plan.warmup + plan.flows
            for side in (ASKBACK, BARE, LEDGER):
                memory[side] = await measure_memory(flows[side], flows=plan.memory_flows, first=first)
    counts = {side: len(set(w)) for side, w in writes.items()}
    expected = {side: plan.warmup + plan.flows + (memory[side].flows if side in memory else 0) for side in SIDES}
    if counts != expected or any(len(set(w)) != len(w) for w in writes.values()):
        raise BenchError(f"distinct items written per side: {counts}; expected one per flow: {expected}")
    return Timing("in-memory", WRITE.name, 2, times), memory


async def measure_sdk_http(plan: Plan, urls: dict[str, str]) -> Timing:
    async with contextlib.AsyncExitStack() as stack:
        flows = {side: await stack.enter_async_context(over_http(url)) for side, url in urls.items()}
        times = await rotate(flows, flows=plan.http_flows, warmup=plan.warmup)
    return Timing("http", WRITE.name, 2, times)


async def measure_raw(
    plan: Plan, urls: dict[str, str], shape: Shape, cpu: Callable[[], dict[str, float]] | None = None
) -> tuple[Timing, list[str]]:
    """The raw-HTTP flows of one shape; also which sides, sent a final round again, completed as the first time."""
    async with contextlib.AsyncExitStack() as stack:
        raw = {side: await stack.enter_async_context(raw_http(url, shape)) for side, url in urls.items()}
        # Every side is warmed up by one flow here, whose final round is then sent again: the sides with a ledger
        # must answer with the recorded outcome and write nothing more (checked in the databases after the run).
        replayed = []
        for side in (ASKBACK, ASKBACK_2, LEDGER):
            await raw[side](-1)
            if not await raw[side].replay():
                raise BenchError(f"{side}: a replayed final {shape.name} round did not return the first outcome")
            replayed.append(side)
        await raw[BARE](-1)
        spent: dict[str, float] = {}
        times = await rotate(raw, flows=plan.raw_flows, warmup=plan.warmup, cpu=cpu, spent=spent)
    return Timing("raw-http", shape.name, len(shape.answers), times, cpu=spent or None), replayed


def deployments(database: Path, table: str) -> tuple[int, int]:
    """How many deployments a server's file holds, and how many distinct services they name."""
    with contextlib.closing(sqlite3.connect(database)) as db:
        total, distinct = db.execute(f"SELECT count(*), count(DISTINCT service) FROM {table}").fetchone()
    return int(total), int(distinct)


def check_deployments(plan: Plan, files: dict[str, tuple[Path, str]]) -> str:
    expected = plan.warmup + plan.raw_flows + 1
    found = {side: deployments(path, table) for side, (path, table) in files.items()}
    for side, (total, distinct) in found.items():
        if total != expected or distinct != expected:
            raise BenchError(f"{side} recorded {total} deployments of {distinct} services; expected {expected}")
    return f"deployments recorded: {expected} on every side, one per flow (replayed final rounds wrote nothing)"


async def run(plan: Plan, workdir: Path) -> None:
    key = secrets.token_urlsafe(36)  # 48 characters
    print(
        "askback bench: MRTR flows on askback against the same flows by hand on the bare SDK, with and without a "
        f"ledger; python {platform.python_version()}, mcp {version('mcp')}, askback {version('askback')}, "
        f"{os.cpu_count()} CPU(s)"
    )
    print("time per round and per complete flow (its rounds summed), p50 and p90 in microseconds; lower is better")
    if plan.overlap_start:
        print("--quick: few flows, and the in-memory ones run while the HTTP servers start: rough figures only")
    servers: Servers | None = None
    files = {
        ASKBACK: (workdir / "http-askback.db", "demo_deployments"),
        ASKBACK_2: (workdir / "http-askback-2.db", "demo_deployments"),
        BARE: (workdir / "http-bare.db", "deployments"),
        LEDGER: (workdir / "http-ledger.db", "deployments"),
    }
    if "raw" in plan.modes or "http" in plan.modes:
        # Started first so that their start-up (imports, askback's migration) is not waited for twice; in the full
        # run the in-memory figures are not taken until they are up, so their start-up does not disturb them.
        sides = {
            side: (KIND[side], f"sqlite:///{path}" if KIND[side] == "askback" else str(path))
            for side, (path, _) in files.items()
        }
        servers = Servers(sides, key=key, logs=workdir)
    raw: list[Timing] = []
    notes: list[str] = []
    sdk_http: Timing | None = None
    in_mem: Timing | None = None
    memory: dict[str, Memory] = {}
    try:
        if "memory" in plan.modes and plan.overlap_start:
            in_mem, memory = await measure_in_memory(plan, workdir, key)
        if servers is not None:
            urls = servers.ready()
            if "raw" in plan.modes:
                for shape in SHAPES:
                    print(f"measuring: raw HTTP, {shape.name}", file=sys.stderr)
                    timing, replayed = await measure_raw(plan, urls, shape, servers.cpu)
                    raw.append(timing)
                    notes.append(
                        f"replayed final {shape.name} round: {', '.join(replayed)} returned the recorded outcome"
                    )
                notes.append(check_deployments(plan, files))
            if "http" in plan.modes:
                print("measuring: SDK client over HTTP", file=sys.stderr)
                sdk_http = await measure_sdk_http(plan, urls)
        if "memory" in plan.modes and not plan.overlap_start:
            print("measuring: in memory", file=sys.stderr)
            in_mem, memory = await measure_in_memory(plan, workdir, key)
    except BaseException:
        if servers is not None:
            servers.show_logs()
        raise
    finally:
        if servers is not None:
            servers.stop()
    if raw:
        print(
            "\nraw HTTP: pre-built tools/call bodies over one kept-alive httpx connection per side, no SDK client "
            "(the targets apply here)"
        )
        for timing in raw:
            report_timing(timing)
        for note in notes:
            print(note)
    if sdk_http is not None:
        print("\nSDK client over HTTP: a new mcp.Client per flow over one kept-alive connection per side")
        report_timing(sdk_http)
    if in_mem is not None:
        print("\nin memory: one in-process mcp.Client per side for the whole run")
        report_timing(in_mem)
    if memory:
        flows = next(iter(memory.values())).flows
        print(
            f"\nmemory, in memory mode, {flows} more flows per side under tracemalloc (Python allocations only): "
            "peak above the start, kept after the flows (total and per flow), and the process RSS growth"
        )
        print(f"{'memory':<9} {'side':<12} {'flows':>6} {'peak':>12} {'kept':>12} {'kept/flow':>12} {'RSS growth':>12}")
        for side, mem in memory.items():
            report_memory(side, mem)


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(
        description="Time MRTR flows on askback against the same flows by hand on the bare MCP SDK, with and "
        "without a hand-written ledger.",
    )
    parser.add_argument(
        "--raw-flows", type=int, default=None, help="measured flows per side and shape over raw HTTP (default 500)"
    )
    parser.add_argument(
        "--http-flows", type=int, default=None, help="measured flows per side, SDK client (default 250)"
    )
    parser.add_argument("--flows", type=int, default=None, help="measured flows per side in memory (default 500)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured flows per side first (default 50)")
    parser.add_argument(
        "--memory-flows", type=int, default=None, help="flows per side under tracemalloc, 0 to skip (default 100)"
    )
    parser.add_argument(
        "--modes",
        default="raw,http,memory",
        help="comma-separated: raw (raw HTTP), http (SDK client over HTTP), memory (in memory, with RAM); default all",
    )
    parser.add_argument(
        "--quick", action="store_true", help="few flows, a few seconds: rough figures, for a smoke test"
    )
    parser.add_argument("--serve", choices=["askback", "bare", "ledger"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    # bench_scaleout.py starts `--serve bare` with no database: its `deploy` then records in memory.
    parser.add_argument("--database", "--database-url", dest="database", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve and args.database is None:
        if args.serve != "bare":
            parser.error(f"--serve {args.serve} needs --database")
        args.database = ":memory:"
    quick = args.quick
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = set(modes) - {"raw", "http", "memory"}
    if unknown or not modes:
        parser.error(f"--modes takes raw, http and/or memory, not {args.modes!r}")

    def pick(value: int | None, default: int, quick_default: int, name: str, minimum: int = 1) -> int:
        chosen = value if value is not None else (quick_default if quick else default)
        if chosen < minimum:
            parser.error(f"--{name} must be at least {minimum}")
        return chosen

    plan = Plan(
        modes=modes,
        raw_flows=pick(args.raw_flows, 500, 20, "raw-flows", 2),
        flows=pick(args.flows, 500, 30, "flows", 2),
        http_flows=pick(args.http_flows, 250, 16, "http-flows", 2),
        warmup=pick(args.warmup, 50, 4, "warmup", 0),
        memory_flows=pick(args.memory_flows, 100, 10, "memory-flows", 0),
        overlap_start=quick,
    )
    return args, plan


def main(argv: Sequence[str] | None = None) -> int:
    args, plan = parse(argv)
    if args.serve:
        serve(args.serve, args.port, args.database)
        return 0
    _quiet_logging()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="askback-bench-") as tmp:
        anyio.run(run, plan, Path(tmp))
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
