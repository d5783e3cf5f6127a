"""What one askback server holds in memory per question nobody answers: MRTR rounds, and 2025-11-25 pushed questions.

The demo server runs in its own process (`askback serve askback.demo:server --workers 1`, a SQLite file, a fixed state
key; `askback.testing.serving`), and its resident set size (`VmRSS` in `/proc/<pid>/status` of the serving child
process, the worker) is read as questions pile up:

- (a) MRTR: N `tools/call` of `deploy` sent as raw 2026-07-28 JSON-RPC, each answered `input_required` (the
  environment question) and never retried. The question and the flow's state travel in the reply, so the server
  should keep nothing: the growth per pending question should be flat, near zero.
- (b) 2025-11-25: N legacy sessions (the `initialize` handshake over Streamable HTTP), each calling `deploy`, whose
  `elicitation/create` push is left unanswered while the session and its response stream stay open. Each one holds
  its call, its session and its stream in the server until an answer, the flow deadline or the session's end.

Both use raw HTTP (httpx, a bounded connection pool), so the client side stays cheap. Everything is closed at the
end. Figures are printed, never asserted: see benchmarks/README.md.

    python benchmarks/bench_pending.py            # about two minutes on 2 cores
    python benchmarks/bench_pending.py --quick    # a few seconds; rough figures (the smoke test runs this)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx

from askback.testing import free_port, serving

TARGET = "askback.demo:server"
# Fixed, so that runs are alike; a benchmark's key, never a deployment's.
STATE_KEY = "bench-pending-fixed-state-key-0123456789abcdef"
TOKEN = "demo-bench"  # the demo's authentication: user `bench`
MODERN = "2026-07-28"
LEGACY = "2025-11-25"
ACCEPT = "application/json, text/event-stream"
ASKED = "pick_env"
SETTLE = 0.5  # seconds left to the server before its RSS is read, after the last reply of a step


class BenchError(RuntimeError):
    """The server did not answer as a pending question must: the figures would be meaningless."""


# --- the server's process -----------------------------------------------------------------------------------------


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: the fields after it are plain.
    return int(stat.rsplit(")", 1)[1].split()[1])


def children(pid: int) -> list[int]:
    return sorted(int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(int(p.name)) == pid)


def serving_worker() -> int:
    """The server's worker: the `askback serve` child of this process (with `--workers 1` uvicorn serves in that
    process itself; with more, each worker is a child of it, and the first is taken)."""
    found = [pid for pid in children(os.getpid()) if b"serve" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
    if len(found) != 1:
        raise BenchError(f"expected one `askback serve` child process, found {found}")
    workers = children(found[0])
    return workers[0] if workers else found[0]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise BenchError(f"no VmRSS in /proc/{pid}/status")


def database_kib(database: Path) -> int:
    """The database's size as SQLite sees it, the pages still in its write-ahead log included (the files' sizes would
    show the log's preallocation instead)."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size) // 1024


# --- raw requests -------------------------------------------------------------------------------------------------


def modern_call(n: int) -> bytes:
    """A 2026-07-28 `tools/call` of `deploy` with no environment: the server answers by asking for one."""
    message = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {
            "name": "deploy",
            "arguments": {"service": f"svc-{n}"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "bench-pending", "version": "0.1.0"},
                "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
            },
        },
    }
    return json.dumps(message, separators=(",", ":")).encode()


MODERN_HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Content-Type": "application/json",
    "Accept": ACCEPT,
    "MCP-Protocol-Version": MODERN,
    "Mcp-Method": "tools/call",
    "Mcp-Name": "deploy",
}


def reply_message(body: str) -> dict[str, Any]:
    """The JSON-RPC message in a body: plain JSON, or the `data:` of a one-event SSE stream."""
    if not body.lstrip().startswith("{"):
        body = "".join(line[5:].strip() for line in body.splitlines() if line.startswith("data:"))
    message: dict[str, Any] = json.loads(body)
    return message


async def ask_unanswered(http: httpx.AsyncClient, url: str, first: int, count: int, concurrency: int) -> None:
    """Calls `first` .. `first + count - 1`, `concurrency` at a time; each must come back `input_required`."""
    numbers = iter(range(first, first + count))

    async def sender() -> None:
        for n in numbers:
            reply = await http.post(url, content=modern_call(n), headers=MODERN_HEADERS)
            result = reply_message(reply.text).get("result") or {}
            if reply.status_code != 200 or result.get("resultType") != "input_required":
                raise BenchError(f"call {n} should ask, got HTTP {reply.status_code}: {reply.text[:300]}")
            if set(result.get("inputRequests") or {}) != {ASKED}:
                raise BenchError(f"call {n} asked {result.get('inputRequests')!r}")

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(sender)


class LegacySessions:
    """2025-11-25 sessions, each with one `deploy` call whose pushed question is never answered. A session's task
    opens it (`initialize`, `notifications/initialized`), starts the call, reads its response stream up to the
    `elicitation/create` push, and then holds the stream open until `release`; then it ends the session (DELETE).
    At most `concurrency` sessions are being opened or closed at a time."""

    def __init__(self, http: httpx.AsyncClient, url: str, concurrency: int) -> None:
        self.http = http
        self.url = url
        self.limiter = anyio.CapacityLimiter(concurrency)
        self.release = anyio.Event()
        self.waiting = 0

    def headers(self, session: str | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "Accept": ACCEPT}
        if session is not None:
            headers |= {"Mcp-Session-Id": session, "MCP-Protocol-Version": LEGACY}
        return headers

    async def _open(self) -> str:
        initialize = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {
                "protocolVersion": LEGACY,
                "capabilities": {"elicitation": {"form": {}}},
                "clientInfo": {"name": "bench-pending", "version": "0.1.0"},
            },
        }
        reply = await self.http.post(self.url, json=initialize, headers=self.headers())
        session = reply.headers.get("mcp-session-id")
        if reply.status_code != 200 or session is None or "result" not in reply_message(reply.text):
            raise BenchError(f"initialize failed: HTTP {reply.status_code}: {reply.text[:300]}")
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        reply = await self.http.post(self.url, json=note, headers=self.headers(session))
        if reply.status_code != 202:
            raise BenchError(f"notifications/initialized: HTTP {reply.status_code}: {reply.text[:300]}")
        return session

    async def session(self, n: int, pushed: anyio.Event) -> None:
        params = {"name": "deploy", "arguments": {"service": f"legacy-{n}"}}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
        # The limiter is held while the session opens and until its question is pushed, then given back while the
        # stream stays open; it is taken again to end the session.
        await self.limiter.acquire()
        opening = True
        try:
            session = await self._open()
            async with self.http.stream("POST", self.url, json=call, headers=self.headers(session)) as response:
                await self._pushed(response)
                self.limiter.release()
                opening = False
                self.waiting += 1
                pushed.set()
                try:
                    await self.release.wait()
                finally:
                    self.waiting -= 1
        finally:
            if opening:
                self.limiter.release()
        async with self.limiter:
            reply = await self.http.delete(self.url, headers=self.headers(session))
            if reply.status_code != 200:
                raise BenchError(f"DELETE of a legacy session: HTTP {reply.status_code}: {reply.text[:300]}")

    @staticmethod
    async def _pushed(response: httpx.Response) -> None:
        """Read the call's event stream up to its first message, which must be the pushed question."""
        if response.status_code != 200:
            raise BenchError(f"tools/call in a legacy session: HTTP {response.status_code}")
        async for line in response.aiter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("method") != "elicitation/create":
                    raise BenchError(f"expected a pushed question, got {message!r}")
                return
        raise BenchError("the call's stream ended without a pushed question")


# --- the run ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    mrtr_warmup: int
    mrtr_steps: tuple[int, ...]
    legacy_warmup: int
    legacy_steps: tuple[int, ...]
    concurrency: int
    limit: float  # seconds each part may take at most


class Table:
    """RSS readings as they are taken: the growth from the first reading, per pending question since then and since
    the previous reading (in bytes, or with `kib` in KiB)."""

    def __init__(self, part: str, base: int, *, kib: bool, extra: str = "") -> None:
        self.part = part
        self.base = base
        self.kib = kib
        self.last = (0, base)
        unit = "KiB/q" if kib else "B/q"
        print(
            f"{part:<7} {'when':<22} {'pending':>8} {'RSS KiB':>9} {'growth KiB':>11} {unit:>9} "
            f"{f'step {unit}':>11}{extra}"
        )

    def _per(self, kib: int, questions: int, width: int) -> str:
        if questions <= 0:
            return f"{'':>{width}}"
        return f"{kib / questions:>{width},.1f}" if self.kib else f"{kib * 1024 / questions:>{width},.0f}"

    def add(self, phase: str, pending: int, rss: int, extra: str = "") -> None:
        growth = rss - self.base
        last_pending, last_rss = self.last
        overall = self._per(growth, pending, 9)
        step = self._per(rss - last_rss, pending - last_pending, 11)
        print(f"{self.part:<7} {phase:<22} {pending:>8,} {rss:>9,} {growth:>+11,} {overall} {step}{extra}".rstrip())
        if pending:
            self.last = (pending, rss)


async def mrtr(plan: Plan, url: str, pid: int, database: Path) -> None:
    print(
        f"\n(a) MRTR: tools/call of deploy answered input_required ({ASKED}) and never answered; {plan.concurrency} "
        f"requests at a time over a pool of {plan.concurrency} connections; growth from after {plan.mrtr_warmup:,} "
        "warm-up calls"
    )
    limits = httpx.Limits(max_connections=plan.concurrency, max_keepalive_connections=plan.concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as http:
        with anyio.fail_after(plan.limit):
            await ask_unanswered(http, url, 1, plan.mrtr_warmup, plan.concurrency)
            await anyio.sleep(SETTLE)
            base, disk_base = rss_kib(pid), database_kib(database)
            table = Table("mrtr", base, kib=False, extra=f" {'db KiB':>8} {'db B/q':>7}")
            table.add("after warm-up", 0, base, f" {disk_base:>8,}")
            sent, first = 0, 1 + plan.mrtr_warmup
            marks: list[tuple[int, int, int]] = []
            elapsed = 0.0
            for step in plan.mrtr_steps:
                started = time.monotonic()
                await ask_unanswered(http, url, first + sent, step - sent, plan.concurrency)
                elapsed += time.monotonic() - started
                sent = step
                await anyio.sleep(SETTLE)
                rss, disk = rss_kib(pid), database_kib(database)
                marks.append((step, rss, disk))
                disk_per = (disk - disk_base) * 1024 / step
                table.add(f"{step:,} pending", step, rss, f" {disk:>8,} {disk_per:>7,.0f}")
    (n0, rss0, _), (n1, rss1, _) = marks[0], marks[-1]
    if n1 > n0:
        print(
            f"mrtr: from {n0:,} to {n1:,} pending, {(rss1 - rss0) * 1024 / (n1 - n0):,.1f} B of RSS per further pending "
            f"question (flat: the server keeps nothing for a question it sent back); {n1 / elapsed:,.0f} calls/s"
        )
    print(
        "mrtr: the db columns are the SQLite database's size (its pages, the write-ahead log's included) and its growth "
        "per question: each round's audit events, kept on disk, not in memory"
    )


async def legacy(plan: Plan, url: str, pid: int) -> None:
    most = max(plan.legacy_steps)
    pool = most + plan.concurrency
    print(
        f"\n(b) 2025-11-25: legacy sessions, each with a deploy call whose pushed {ASKED} question is never answered "
        f"while the session and its stream stay open; a pool of {pool} connections (one stream per waiting session), "
        f"{plan.concurrency} sessions opened at a time; growth from after {plan.legacy_warmup} sessions opened and "
        "closed"
    )
    limits = httpx.Limits(max_connections=pool, max_keepalive_connections=plan.concurrency)
    async with httpx.AsyncClient(timeout=httpx.Timeout(30.0), limits=limits) as http:
        with anyio.fail_after(plan.limit):
            warm = LegacySessions(http, url, plan.concurrency)
            async with anyio.create_task_group() as tg:
                for n in range(plan.legacy_warmup):
                    pushed = anyio.Event()
                    tg.start_soon(warm.session, n, pushed)
                    await pushed.wait()
                warm.release.set()
            await anyio.sleep(SETTLE)
            base = rss_kib(pid)
            table = Table("legacy", base, kib=True)
            table.add("after warm-up", 0, base)
            sessions = LegacySessions(http, url, plan.concurrency)
            marks: list[tuple[int, int]] = []
            async with anyio.create_task_group() as tg:
                opened = 0
                for step in plan.legacy_steps:
                    events = []
                    for n in range(opened, step):
                        pushed = anyio.Event()
                        tg.start_soon(sessions.session, 10_000 + n, pushed)
                        events.append(pushed)
                    for pushed in events:
                        await pushed.wait()
                    opened = step
                    await anyio.sleep(SETTLE)
                    rss = rss_kib(pid)
                    marks.append((step, rss))
                    table.add(f"{step:,} waiting", step, rss)
                sessions.release.set()
            await anyio.sleep(SETTLE)
            closed = rss_kib(pid)
            table.add("all closed (DELETE)", 0, closed)
    (n0, rss0), (n1, rss1) = marks[0], marks[-1]
    if n1 > n0:
        print(
            f"legacy: from {n0:,} to {n1:,} waiting, {(rss1 - rss0) / (n1 - n0):,.1f} KiB of RSS per further pending "
            "pushed question (its session, its call and its open stream)"
        )


async def run(plan: Plan, url: str, pid: int, database: Path) -> None:
    await mrtr(plan, url, pid, database)
    await legacy(plan, url, pid)


def parse(argv: Sequence[str] | None) -> Plan:
    parser = argparse.ArgumentParser(
        description="Memory of one askback server per pending question: MRTR rounds and 2025-11-25 pushed questions."
    )
    parser.add_argument(
        "--mrtr", default=None, help="comma-separated cumulative counts of MRTR calls (default 1000,10000,50000)"
    )
    parser.add_argument(
        "--legacy", default=None, help="comma-separated cumulative counts of legacy sessions (default 100,300,600)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="requests or session openings at a time (8)")
    parser.add_argument("--quick", action="store_true", help="a few seconds: rough figures, for a smoke test")
    args = parser.parse_args(argv)

    def steps(value: str | None, default: str, quick: str, name: str) -> tuple[int, ...]:
        try:
            counts = tuple(int(v) for v in (value or (quick if args.quick else default)).split(","))
        except ValueError:
            parser.error(f"--{name} takes comma-separated counts, such as {default}")
        if not counts or min(counts) < 1 or list(counts) != sorted(set(counts)):
            parser.error(f"--{name} takes increasing counts of at least 1, such as {default}")
        return counts

    if args.concurrency < 1:
        parser.error("--concurrency must be at least 1")
    return Plan(
        mrtr_warmup=100 if args.quick else 1000,
        mrtr_steps=steps(args.mrtr, "1000,10000,50000", "100,400", "mrtr"),
        legacy_warmup=5 if args.quick else 20,
        legacy_steps=steps(args.legacy, "100,300,600", "10,30", "legacy"),
        concurrency=args.concurrency,
        limit=120.0 if args.quick else 600.0,
    )


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse(argv)
    started = time.monotonic()
    print(
        f"askback pending bench: server memory per unanswered question; python {platform.python_version()}, "
        f"mcp {version('mcp')}, askback {version('askback')}, {os.cpu_count()} CPU(s)"
    )
    with tempfile.TemporaryDirectory(prefix="askback-bench-pending-") as tmp:
        database = Path(tmp) / "pending.db"
        env = {
            "ASKBACK_STATE_KEYS": STATE_KEY,
            "ASKBACK_DATABASE_URL": f"sqlite:///{database}",
            # Room for every waiting session and the warm-up's (the default cap is 1,000 in one process).
            "ASKBACK_MAX_PENDING_PUSHES": str(max(plan.legacy_steps) + plan.legacy_warmup + 100),
        }
        with serving(TARGET, port=free_port(), workers=1, env=env, cwd=tmp) as url:
            pid = serving_worker()
            print(
                f"server: askback serve {TARGET} --workers 1 (SQLite) at {url}, worker pid {pid}, "
                f"up in {time.monotonic() - started:.1f} s; RSS is that process's VmRSS, in KiB"
            )
            anyio.run(run, plan, url, pid, database)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
