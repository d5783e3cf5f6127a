"""What a write gated by an approval costs against the same write behind a plain `Confirm`, and what the approvals'
pages cost.

One server (`bench_approvals.py --serve`: uvicorn, one worker, a SQLite file, on 127.0.0.1) with three tools that
write through `flow.once` and complete with the same text:

- `plain(item)`, the floor: the write, asking nobody, in one round.

- `confirmed(item)`, the baseline: `flow.ask(Confirm)`, then the write. Round one answers `input_required` with the
  form; the retry brings the answer and the sealed `requestState`, and the write runs.
- `gated(item)`: `flow.approve(Approval)`, then the write. Round one makes the approval request (a row, its audit
  row and its event, in one transaction) and answers `input_required` with the link to its status page; then the
  decision, through `ApprovalService.decide` on the same SQLite file from this process (a second instance of the same
  app: the request read, then the vote, the status change, the audit row and the event in one transaction); then the
  retry, which reads the approved request, consumes it for this flow and runs the write.

Both are raw 2026-07-28 JSON-RPC over one kept-alive `httpx` connection per side, the caller authenticated with a
demo token (the requester must not be the approver), interleaved flow by flow (the order alternating) so that the
machine's noise lands on both alike. A flow's time is its steps summed: the gated flow's includes its decision.

Then the pages, on the same server: for each of N fresh requests (made untimed), the approver's request page opened
(`GET /approvals/requests/{id}`, signed in with the development sign-in's cookie) and the decision sent on its form
(`POST`, with the form token and `Origin`), each timed from sending to having read the whole reply.

Figures are printed, never asserted: see benchmarks/README.md.

    python benchmarks/bench_approvals.py            # under a minute on 2 cores
    python benchmarks/bench_approvals.py --quick    # a few seconds; rough figures
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import re
import secrets
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn

import askback
from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.pages import CSRF_COOKIE
from askback.approvals.records import Approver
from askback.approvals.service import ApprovalService
from askback.approvals.setup import ApprovalsSetup
from askback.server.http import build_app
from askback.testing import free_port

MODERN = "2026-07-28"
TOKEN = "demo-requester"
APPROVER = Approver("approver", frozenset({"ops"}), "bench")
KEY_ENV = "BENCH_APPROVALS_STATE_KEY"
SIGN_IN_ENV = "BENCH_APPROVALS_SIGN_IN_SECRET"
BASE_ENV = "BENCH_APPROVALS_BASE_URL"

CONFIRM = askback.Confirm(key="confirm", message="Write this item?", field="ok", title="Write")
GATE = askback.Approval(key="bench", title="Write an item", groups=frozenset({"ops"}))
LINK = "askback.approval.bench"
YES = {"action": "accept", "content": {"ok": True}}
OPENED = {"action": "accept"}


class BenchError(RuntimeError):
    """The server did not answer as the flow must: the figures would be meaningless."""


def build(database_url: str, key: str, sign_in_secret: str, base_url: str) -> tuple[askback.Askback, ApprovalsSetup]:
    """The benchmark's app and its approvals' extension: `confirmed` and `gated`, each writing once."""
    settings = askback.load_settings(database_url=database_url, state_keys=key, demo_auth=True)
    sign_in = DevelopmentSignIn(sign_in_secret, groups={APPROVER.principal: sorted(APPROVER.groups)})
    approvals = ApprovalsSetup(sign_in=sign_in, base_url=base_url)
    app = askback.Askback("bench-approvals", settings=settings, extensions=[approvals])
    written: list[str] = []

    async def write(item: str) -> str:
        written.append(item)
        return item

    @app.tool(asks=[CONFIRM])
    async def confirmed(item: str, flow: askback.Flow) -> str:
        """Write an item once the caller confirms."""
        if not flow.ask(CONFIRM):
            return "Not written."
        return f"Wrote {await flow.once('write', lambda: write(item))}."

    @app.tool()
    async def plain(item: str, flow: askback.Flow) -> str:
        """Write an item, asking nobody."""
        return f"Wrote {await flow.once('write', lambda: write(item))}."

    @app.tool()
    async def gated(item: str, flow: askback.Flow) -> str:
        """Write an item once someone in ops approves."""
        await flow.approve(GATE, summary=f"Write {item}")
        return f"Wrote {await flow.once('write', lambda: write(item))}."

    return app, approvals


def _quiet_logging() -> None:
    # askback logs every audit event at INFO: made and formatted (that cost is askback's), written to /dev/null.
    sink = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    logging.basicConfig(level=logging.INFO, handlers=[logging.StreamHandler(sink)], force=True)


def serve(port: int, database: str) -> None:
    """The body of the server process: `bench_approvals.py --serve --port P --database URL`."""
    _quiet_logging()
    app, _ = build(database, os.environ[KEY_ENV], os.environ[SIGN_IN_ENV], os.environ[BASE_ENV])
    config = uvicorn.Config(build_app(app), host="127.0.0.1", port=port, log_level="warning", access_log=False)
    uvicorn.Server(config).run()


# --- raw requests -------------------------------------------------------------------------------------------------


class Wire:
    """Raw 2026-07-28 `tools/call`s to one server over one kept-alive connection, each timed."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url

    async def call(self, tool: str, params: dict[str, Any]) -> tuple[dict[str, Any], int]:
        """The result of one `tools/call`, and the nanoseconds from sending it to having read the reply."""
        meta = {
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientInfo": {"name": "bench-approvals", "version": "0.1.0"},
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        }
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, **params, "_meta": meta}}
        headers = {
            "Authorization": f"Bearer {TOKEN}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        }
        content = json.dumps(body, separators=(",", ":"))
        start = time.perf_counter_ns()
        reply = await self.http.post(self.url, content=content, headers=headers)
        took = time.perf_counter_ns() - start
        text = reply.text
        if not text.lstrip().startswith("{"):
            text = "".join(line[5:].strip() for line in text.splitlines() if line.startswith("data:"))
        message = json.loads(text)
        if "result" not in message:
            raise BenchError(f"{tool}: {message}")
        result: dict[str, Any] = message["result"]
        return result, took


def _asked(result: dict[str, Any], key: str) -> dict[str, Any]:
    asked = (result.get("inputRequests") or {}).get(key)
    if result.get("resultType") != "input_required" or not isinstance(asked, dict):
        raise BenchError(f"expected input_required asking {key}, got {result}")
    params: dict[str, Any] = asked.get("params") or {}
    return params


def _wrote(result: dict[str, Any], item: str) -> None:
    said = " ".join(c.get("text", "") for c in result.get("content", []))
    if result.get("isError") or said != f"Wrote {item}.":
        raise BenchError(f"expected 'Wrote {item}.', got {result}")


def _approval_id(status_url: str) -> str:
    found = re.search(r"/requests/([^/]+)/status$", status_url)
    if found is None:
        raise BenchError(f"not a status page: {status_url}")
    return found.group(1)


async def confirm_flow(wire: Wire, n: int) -> tuple[int, ...]:
    """Round one (asked), round two (answered, written)."""
    params: dict[str, Any] = {"arguments": {"item": f"c{n}"}}
    first, asked = await wire.call("confirmed", params)
    _asked(first, "confirm")
    retry = {**params, "inputResponses": {"confirm": YES}, "requestState": first["requestState"]}
    done, answered = await wire.call("confirmed", retry)
    _wrote(done, f"c{n}")
    return asked, answered


async def plain_flow(wire: Wire, n: int) -> tuple[int, ...]:
    """One round: written."""
    done, took = await wire.call("plain", {"arguments": {"item": f"p{n}"}})
    _wrote(done, f"p{n}")
    return (took,)


async def request(wire: Wire, item: str) -> tuple[dict[str, Any], str, int]:
    """Round one of `gated(item)`: its result, the request's id and the time it took."""
    first, took = await wire.call("gated", {"arguments": {"item": item}})
    return first, _approval_id(str(_asked(first, LINK).get("url", ""))), took


async def gated_flow(wire: Wire, service: ApprovalService, n: int) -> tuple[int, ...]:
    """The request (round one), the decision through the service, the retry (consumed, written)."""
    item = f"g{n}"
    first, approval_id, requested = await request(wire, item)
    start = time.perf_counter_ns()
    record = await service.get(approval_id)
    if record is None:
        raise BenchError(f"no request {approval_id}")
    decided = await service.decide(APPROVER, approval_id, "approve", "", digest=record.digest)
    deciding = time.perf_counter_ns() - start
    if not decided.counted or decided.record.status != "approved":
        raise BenchError(f"the decision was not counted: {decided}")
    retry = {"arguments": {"item": item}, "inputResponses": {LINK: OPENED}, "requestState": first["requestState"]}
    done, retried = await wire.call("gated", retry)
    _wrote(done, item)
    return requested, deciding, retried


# --- the run ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    warmup: int
    flows: int
    pages: int
    limit: float


def _us(ns: float) -> str:
    return f"{ns / 1000:8.0f}"


def _p99(values: Sequence[int]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def _cells(values: Sequence[int]) -> str:
    """p50 and p99, in microseconds."""
    return f"{_us(statistics.median(values))} {_us(_p99(values))}"


async def flows(plan: Plan, wire: Wire, service: ApprovalService) -> None:
    print(
        f"\n(a) {plan.flows} flows of each tool, interleaved, after {plan.warmup} warm-up flows each; p50 and p99 in "
        "microseconds, a flow being its steps summed"
    )
    times: dict[str, list[tuple[int, ...]]] = {"approval": [], "confirm": [], "plain": []}
    sides = ("approval", "confirm", "plain")
    with anyio.fail_after(plan.limit):
        for n in range(plan.warmup + plan.flows):
            for side in sides[n % 3 :] + sides[: n % 3]:  # the order rotates flow by flow
                if side == "approval":
                    took = await gated_flow(wire, service, n)
                else:
                    took = await (confirm_flow(wire, n) if side == "confirm" else plain_flow(wire, n))
                if n >= plan.warmup:
                    times[side].append(took)
    steps = {"approval": ("request", "decide", "retry"), "confirm": ("round 1", "round 2"), "plain": ("round 1",)}
    flow_p50: dict[str, float] = {}
    flow_p99: dict[str, float] = {}
    print(f"{'':<14} {'':<4} {'p50':>8} {'p99':>8}   each step: its p50 and p99")
    for side in ("plain", "confirm", "approval"):
        columns = [[t[i] for t in times[side]] for i in range(len(steps[side]))]
        total = [sum(t) for t in times[side]]
        flow_p50[side], flow_p99[side] = statistics.median(total), _p99(total)
        cells = "  ".join(f"{name} {_cells(col)}" for name, col in zip(steps[side], columns, strict=True))
        print(f"{side + ' flow':<14} flow {_cells(total)}   {cells}")
    for side, base in (("approval", "confirm"), ("approval", "plain"), ("confirm", "plain")):
        print(
            f"ratio {side}/{base:<8} p50 {flow_p50[side] / flow_p50[base]:.2f}x  "
            f"p99 {flow_p99[side] / flow_p99[base]:.2f}x"
        )
    # What the gate adds to the round that runs the write: the retry against the same write asking nobody.
    retry = statistics.median(t[2] for t in times["approval"])
    alone = statistics.median(t[0] for t in times["plain"])
    print(f"the gated write's round (retry) against the same write ungated: p50 {retry / alone:.2f}x")


async def pages(plan: Plan, wire: Wire, base_url: str, sign_in_secret: str) -> None:
    print(
        f"\n(b) the approvals' pages, {plan.pages} requests made untimed, each page opened by the approver and its "
        "decision sent; p50 and p99 in microseconds"
    )
    token = secrets.token_urlsafe(32)
    cookies = {
        DevelopmentSignIn.COOKIE: DevelopmentSignIn(sign_in_secret).cookie_value(APPROVER.principal),
        CSRF_COOKIE: token,
    }
    opened: list[int] = []
    posted: list[int] = []
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
    async with httpx.AsyncClient(base_url=base_url, cookies=cookies, timeout=30, limits=limits) as browser:
        with anyio.fail_after(plan.limit):
            for n in range(plan.pages):
                _, approval_id, _ = await request(wire, f"p{n}")
                path = f"/approvals/requests/{approval_id}"
                start = time.perf_counter_ns()
                page = await browser.get(path)
                opened.append(time.perf_counter_ns() - start)
                digest = re.search(r'name="digest" value="([0-9a-f]{64})"', page.text)
                if page.status_code != 200 or digest is None:
                    raise BenchError(f"the request page answered {page.status_code}: {page.text[-500:]}")
                form = {"decision": "approve", "reason": "", "digest": digest.group(1), "csrf": token}
                start = time.perf_counter_ns()
                decided = await browser.post(path, data=form, headers={"Origin": base_url})
                posted.append(time.perf_counter_ns() - start)
                if decided.status_code != 200 or "the call goes on" not in decided.text:
                    raise BenchError(f"the decision answered {decided.status_code}: {decided.text[-500:]}")
    for name, values in (("request page GET", opened), ("decision POST", posted)):
        print(f"{name:<17} p50 {_us(statistics.median(values))}  p99 {_us(_p99(values))}")


def statuses(database: Path) -> str:
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as db:
        found = db.execute("SELECT status, COUNT(*) FROM askback_approval_requests GROUP BY status ORDER BY status")
        return ", ".join(f"{status} {count}" for status, count in found)


async def run(plan: Plan, url: str, database: Path, base_url: str, key: str, sign_in_secret: str) -> None:
    # This process is a second instance of the same app on the same file: the decisions go through its service.
    app, approvals = build(f"sqlite:///{database}", key, sign_in_secret, base_url)
    async with app.running():
        service = await approvals.service()
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)
        async with httpx.AsyncClient(timeout=30, limits=limits) as http:
            wire = Wire(http, url)
            await flows(plan, wire, service)
            await pages(plan, wire, base_url, sign_in_secret)
    print(
        f"\nrequests in the store: {statuses(database)} (each gated flow's consumed once, each page's decision "
        "approved and not called again)"
    )


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def server_process(database: Path, log: Path, port: int, env: dict[str, str]) -> Iterator[str]:
    """`bench_approvals.py --serve` in its own process until the block ends; yields its /mcp URL."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, __file__, "--serve", "--port", str(port), "--database", f"sqlite:///{database}"],
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"the server did not start:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Plan]:
    parser = argparse.ArgumentParser(description="What a write gated by an approval costs against a Confirm.")
    parser.add_argument("--flows", type=int, default=None, help="measured flows per tool (400; quick 30)")
    parser.add_argument("--pages", type=int, default=None, help="requests decided on the pages (200; quick 20)")
    parser.add_argument("--quick", action="store_true", help="a few seconds: rough figures, for a smoke test")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    plan = Plan(
        warmup=5 if args.quick else 30,
        flows=args.flows or (30 if args.quick else 400),
        pages=args.pages or (20 if args.quick else 200),
        limit=120.0 if args.quick else 900.0,
    )
    if plan.flows < 2 or plan.pages < 2:
        parser.error("--flows and --pages take at least 2")
    return args, plan


def main(argv: Sequence[str] | None = None) -> int:
    args, plan = parse(argv)
    if args.serve:
        serve(args.port, args.database)
        return 0
    _quiet_logging()
    started = time.monotonic()
    print(
        f"askback approvals bench: python {platform.python_version()}, mcp {version('mcp')}, "
        f"askback {version('askback')}, {os.cpu_count()} CPU(s)"
    )
    port = free_port()
    base_url = f"http://127.0.0.1:{port}"
    key, sign_in_secret = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    env = {KEY_ENV: key, SIGN_IN_ENV: sign_in_secret, BASE_ENV: base_url}
    with tempfile.TemporaryDirectory(prefix="askback-bench-approvals-") as tmp:
        database = Path(tmp) / "approvals.db"
        with server_process(database, Path(tmp) / "server.log", port, env) as url:
            print(f"server: bench_approvals.py --serve (uvicorn, one worker, SQLite) at {url}")
            anyio.run(run, plan, url, database, base_url, key, sign_in_secret)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
