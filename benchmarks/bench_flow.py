"""What askback costs per flow, against the same flow written by hand on the bare SDK.

One flow is two MRTR rounds of one tool call: round one asks a yes/no confirmation (`input_required` with a sealed
`requestState`), round two brings the answer back, the tool runs its write once and completes with a text.

- A, askback: an `Askback` tool that asks a `Confirm` through `flow.ask` and writes through `flow.once`, so each flow
  pays for what askback adds: its own state inside the SDK's sealing, the completion record and the effects ledger in
  a SQLite file, and the audit trail (database rows and log records).
- B, bare: the same wire exchange on the SDK's `MCPServer` by hand: a constant `requestState` sealed by the SDK, a
  boolean check, an append. No audit, no ledger, no replay protection: the floor a hand-written server pays.

Both run in one process run, interleaved flow by flow (A then B, then B then A, ...) so that the machine's noise
lands on both sides alike, in two modes: in memory (the SDK's in-process client) and over real HTTP on loopback
(each server in its own uvicorn process, one worker; one SDK client per flow over a kept-alive connection). The
timed part of a flow is its two `tools/call` requests; client set-up and the `tools/list` the SDK client makes
before it validates a result are outside it. Figures are printed, never asserted: see benchmarks/README.md.

    python benchmarks/bench_flow.py            # about a minute
    python benchmarks/bench_flow.py --quick    # a few seconds, rough figures
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import logging
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
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
from askback.server.http import build_app
from askback.testing import answered_by_hand, free_port, text

MODE = "2026-07-28"
TOOL = "write"
MESSAGE = "Write this item?"
TARGET_HTTP_RATIO = 1.15
# The state key reaches the server processes through the environment, not their command line.
KEY_ENV = "BENCH_FLOW_STATE_KEY"

CONFIRM = askback.Confirm(key="confirm", message=MESSAGE, field="confirm", title="Confirm")
# What `CONFIRM` renders to, written out by hand for the bare server: both sides ask the same question.
CONFIRM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
    "required": ["confirm"],
}
YES: InputResponses = {"confirm": ElicitResult(action="accept", content={"confirm": True})}

FlowFn = Callable[[int], Awaitable[int]]
"""Runs flow number n and returns the nanoseconds its two rounds took."""


class BenchError(RuntimeError):
    """A flow did not go as a two-round flow must: the figures would be meaningless."""


# --- the two servers -------------------------------------------------------------------------------------------


def build_askback(database_url: str, key: str, writes: list[str]) -> askback.Askback:
    app = askback.Askback("bench", settings=askback.load_settings(database_url=database_url, state_keys=key))

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


def build_bare(key: str, writes: list[str]) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer("bench-bare", request_state_security=RequestStateSecurity(keys=[key]))

    def ask() -> InputRequiredResult:
        params = ElicitRequestFormParams(message=MESSAGE, requested_schema=CONFIRM_SCHEMA)
        return InputRequiredResult(input_requests={"confirm": ElicitRequest(params=params)}, request_state="confirm")

    @server.tool(name=TOOL)
    async def write(item: str, ctx: Context) -> str | InputRequiredResult:
        """Write an item after the user confirms."""
        responses = ctx.input_responses or {}
        answer = responses.get("confirm")
        if ctx.request_state != "confirm" or not isinstance(answer, ElicitResult):
            return ask()
        if answer.action != "accept":
            return "Not confirmed; nothing was written."
        confirmed = (answer.content or {}).get("confirm")
        if not isinstance(confirmed, bool):
            return ask()
        if not confirmed:
            return "Not confirmed; nothing was written."
        writes.append(item)
        return f"Wrote {item}."

    return server


# --- driving flows ----------------------------------------------------------------------------------------------


async def two_rounds(session: ClientSession, item: str) -> int:
    start = time.perf_counter_ns()
    first = await session.call_tool(TOOL, {"item": item}, allow_input_required=True)
    if not isinstance(first, InputRequiredResult) or first.request_state is None:
        raise BenchError(f"round one should ask, got {first!r}")
    second = await session.call_tool(
        TOOL, {"item": item}, input_responses=YES, request_state=first.request_state, allow_input_required=True
    )
    elapsed = time.perf_counter_ns() - start
    if not isinstance(second, CallToolResult) or second.is_error:
        raise BenchError(f"round two should complete, got {second!r}")
    said = text(second)
    if said != f"Wrote {item}.":
        raise BenchError(f"round two completed with {said!r}")
    return elapsed


@contextlib.asynccontextmanager
async def in_memory(server: MCPServer[Any]) -> AsyncIterator[FlowFn]:
    """One in-process client for the whole run: what is measured is the server's work and the SDK's dispatch."""
    async with Client(server, mode=MODE, elicitation_callback=answered_by_hand) as client:
        await client.list_tools()

        async def flow(n: int) -> int:
            return await two_rounds(client.session, f"item-{n}")

        yield flow


@contextlib.asynccontextmanager
async def over_http(url: str) -> AsyncIterator[FlowFn]:
    """A new SDK client per flow (a flow is a new conversation), all sharing one kept-alive HTTP connection."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30.0)) as http:

        async def flow(n: int) -> int:
            transport = streamable_http_client(url, http_client=http)
            async with Client(transport, mode=MODE, elicitation_callback=answered_by_hand) as client:
                # The client checks a result against the tool's listed output schema, listing the tools first if
                # it has not: list them here, outside the timed rounds (both servers answer tools/list with
                # `ttlMs: 0`, so a shared response cache would not spare the request).
                await client.list_tools()
                return await two_rounds(client.session, f"item-{n}")

        yield flow


async def alternate(a: FlowFn, b: FlowFn, *, flows: int, warmup: int) -> tuple[list[int], list[int]]:
    """Warm both up, then run them in turns, swapping who goes first each time."""
    for n in range(warmup):
        await a(n)
        await b(n)
    gc.collect()
    times_a: list[int] = []
    times_b: list[int] = []
    for n in range(warmup, warmup + flows):
        if n % 2:
            times_b.append(await b(n))
            times_a.append(await a(n))
        else:
            times_a.append(await a(n))
            times_b.append(await b(n))
    return times_a, times_b


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


def serve(side: str, port: int, database_url: str) -> None:
    """The body of a server process: `bench_flow.py --serve askback|bare`."""
    _quiet_logging()
    key = os.environ[KEY_ENV]
    writes: list[str] = []
    if side == "askback":
        app: Any = build_app(build_askback(database_url, key, writes))
    else:
        app = build_bare(key, writes).streamable_http_app(stateless_http=True, json_response=True)
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

    def __init__(self, sides: dict[str, str], *, key: str, logs: Path) -> None:
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int, Path]] = {}
        for side, database_url in sides.items():
            port = free_port()
            log = logs / f"server-{side}.log"
            # To a file, not a pipe: nobody reads a pipe during the run, and a full one would stall the server.
            with log.open("wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, __file__, "--serve", side, "--port", str(port), "--database-url", database_url],
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
    flows: int
    http_flows: int
    warmup: int
    memory_flows: int
    overlap_start: bool


@dataclass(frozen=True)
class Timing:
    mode: str
    askback: list[int]
    bare: list[int]


def _us(ns: float) -> float:
    return ns / 1000


def _p90(values: Sequence[int]) -> float:
    return statistics.quantiles(values, n=10, method="inclusive")[8]


def _ratio_line(timing: Timing) -> str:
    median = statistics.median(timing.askback) / statistics.median(timing.bare)
    p90 = _p90(timing.askback) / _p90(timing.bare)
    line = f"{timing.mode:<9} ratio askback/bare: median {median:.2f}x, p90 {p90:.2f}x"
    if timing.mode == "http":
        verdict = "within target" if median <= TARGET_HTTP_RATIO else "ABOVE target"
        line += f"   (target: askback <= {TARGET_HTTP_RATIO:.2f}x over HTTP; {verdict})"
    return line


def report_timing(timing: Timing) -> None:
    for side, values in (("askback", timing.askback), ("bare", timing.bare)):
        print(
            f"{timing.mode:<9} {side:<8} {len(values):>6} {_us(statistics.median(values)):>10.0f} "
            f"{_us(_p90(values)):>10.0f}"
        )
    print(_ratio_line(timing))


def _kib(n: float) -> str:
    return f"{n / 1024:,.1f} KiB"


def report_memory(side: str, mem: Memory) -> None:
    rss = _kib(mem.rss_growth) if mem.rss_growth is not None else "n/a"
    print(
        f"memory    {side:<8} {mem.flows:>6} {_kib(mem.peak):>12} {_kib(mem.retained):>12} "
        f"{mem.retained / mem.flows:>10,.0f} B {rss:>12}"
    )


async def measure_in_memory(plan: Plan, workdir: Path, key: str) -> tuple[Timing, tuple[Memory, Memory] | None]:
    writes_a: list[str] = []
    writes_b: list[str] = []
    app = build_askback(f"sqlite:///{workdir / 'bench-memory.db'}", key, writes_a)
    bare = build_bare(key, writes_b)
    memory: tuple[Memory, Memory] | None = None
    async with app.running(), in_memory(app.mcp) as flow_a, in_memory(bare) as flow_b:
        times_a, times_b = await alternate(flow_a, flow_b, flows=plan.flows, warmup=plan.warmup)
        if plan.memory_flows:
            first = plan.warmup + plan.flows
            memory = (
                await measure_memory(flow_a, flows=plan.memory_flows, first=first),
                await measure_memory(flow_b, flows=plan.memory_flows, first=first),
            )
    if len(writes_a) != len(writes_b) or len(set(writes_a)) != len(writes_a):
        raise BenchError(f"askback wrote {len(writes_a)} items and bare {len(writes_b)}; expected one per flow")
    return Timing("in-memory", times_a, times_b), memory


async def measure_http(plan: Plan, servers: Servers) -> Timing:
    urls = servers.ready()
    async with over_http(urls["askback"]) as flow_a, over_http(urls["bare"]) as flow_b:
        times_a, times_b = await alternate(flow_a, flow_b, flows=plan.http_flows, warmup=plan.warmup)
    return Timing("http", times_a, times_b)


async def run(plan: Plan, workdir: Path) -> None:
    key = secrets.token_urlsafe(36)  # 48 characters
    print(
        f"askback bench: a two-round flow (ask one Confirm, then one write), askback against the bare SDK; "
        f"python {platform.python_version()}, mcp {version('mcp')}, askback {version('askback')}, "
        f"{os.cpu_count()} CPU(s)"
    )
    print("time per complete flow (both tools/call rounds), in microseconds; lower is better")
    if plan.overlap_start:
        print("--quick: few flows, and the in-memory ones run while the HTTP servers start: rough figures only")
    print()
    print(f"{'mode':<9} {'side':<8} {'flows':>6} {'median µs':>10} {'p90 µs':>10}")
    servers: Servers | None = None
    memory: tuple[Memory, Memory] | None = None
    if "http" in plan.modes:
        # Started first so that their start-up (imports, askback's migration) is not waited for twice; in the full
        # run the in-memory figures are not taken until they are up, so their start-up does not disturb them.
        sides = {"askback": f"sqlite:///{workdir / 'bench-http.db'}", "bare": ""}
        servers = Servers(sides, key=key, logs=workdir)
    try:
        if servers is not None and not plan.overlap_start:
            servers.ready()
        if "memory" in plan.modes:
            timing, memory = await measure_in_memory(plan, workdir, key)
            report_timing(timing)
        if servers is not None:
            report_timing(await measure_http(plan, servers))
    except BaseException:
        if servers is not None:
            servers.show_logs()
        raise
    finally:
        if servers is not None:
            servers.stop()
    if memory is not None:
        mem_a, mem_b = memory
        print(
            f"\nmemory, in memory mode, {mem_a.flows} more flows per side under tracemalloc (Python allocations only): "
            "peak above the start, kept after the flows (total and per flow), and the process RSS growth"
        )
        print(f"{'memory':<9} {'side':<8} {'flows':>6} {'peak':>12} {'kept':>12} {'kept/flow':>12} {'RSS growth':>12}")
        report_memory("askback", mem_a)
        report_memory("bare", mem_b)


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(
        description="Time a two-round MRTR flow on askback against the same flow on the bare MCP SDK.",
    )
    parser.add_argument("--flows", type=int, default=None, help="measured flows per side in memory (default 500)")
    parser.add_argument("--http-flows", type=int, default=None, help="measured flows per side over HTTP (default 250)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured flows per side first (default 50)")
    parser.add_argument(
        "--memory-flows", type=int, default=None, help="flows per side under tracemalloc, 0 to skip (default 100)"
    )
    parser.add_argument(
        "--modes", default="memory,http", help="comma-separated: memory, http (default both; memory also measures RAM)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="few flows, a few seconds: rough figures, for a smoke test"
    )
    parser.add_argument("--serve", choices=["askback", "bare"], help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    quick = args.quick
    modes = tuple(m.strip() for m in args.modes.split(",") if m.strip())
    unknown = set(modes) - {"memory", "http"}
    if unknown or not modes:
        parser.error(f"--modes takes memory and/or http, not {args.modes!r}")

    def pick(value: int | None, default: int, quick_default: int, name: str, minimum: int = 1) -> int:
        chosen = value if value is not None else (quick_default if quick else default)
        if chosen < minimum:
            parser.error(f"--{name} must be at least {minimum}")
        return chosen

    plan = Plan(
        modes=modes,
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
        serve(args.serve, args.port, args.database_url)
        return 0
    _quiet_logging()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="askback-bench-") as tmp:
        anyio.run(run, plan, Path(tmp))
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
