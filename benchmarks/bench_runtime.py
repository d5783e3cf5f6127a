"""What the agent runtime costs with many calls parked: listing them, resuming one, and the memory it holds.

The runtime parks a call in its store when a server asks a person (2026-07-28 `input_required`), so nothing of a
parked call should stay in the runtime's memory, a person's inbox should list fast however many calls wait for
others, and a resume should cost little more than the server's round it sends. Against the askback demo server
(`askback serve askback.demo:server --workers 1`, SQLite, its own state key) and a runtime store in a fresh SQLite
file, with 10,000 calls parked:

1. Listing: `runtime.pending(principal=P)` (one person's questions) and `runtime.calls.listing()` of every parked
   call, p50/p90 over repeated runs, at a tenth of the calls parked and at all of them, so the ratio shows how each
   scales.
2. Resume of one: `runtime.resume(call_id)` of a real parked call whose question was answered (round 2 goes to the
   server and the call completes), against the same round sent to the same server by the bare SDK client on a fresh
   connection, two ways: the `tools/call` alone (the baseline of the target: resume minus it is the runtime's
   overhead), and `Client(url)` + `session.call_tool` as the SDK sends it (which also lists the tools, to check the
   result against the tool's output schema). The three take turns, so the machine's noise lands on all of them.
3. Memory: the process's RSS after opening the runtime and after parking a tenth, half and all of the calls.

Parking is cheap but honest: a few calls are real (`Runtime.call_tool(url, "deploy", ...)` against the server,
parked on its `pick_env` question); the rest are `ParkedCalls.add` rows carrying those calls' real
`InputRequiredResult`s, spread over 100 principals (they are listed, never resumed). Targets are printed beside the
figures, never asserted: a list under 100 ms, a resume under 20 ms plus the server's round, memory flat in the count.

    python benchmarks/bench_runtime.py            # about half a minute
    python benchmarks/bench_runtime.py --quick    # a few seconds, rough figures (the smoke test runs this)
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult, InputResponses

from askback.runtime import Answer, Completed, Parked, Runtime, WebInbox
from askback.runtime.parked_calls import new_call_id
from askback.settings import load_settings
from askback.testing import answered_by_hand, free_port, serving, text

MODE = "2026-07-28"
DEMO = "askback.demo:server"
TOOL = "deploy"
KEY = "pick_env"  # the demo's question when `deploy` is called without an environment
CHOICE = {"environment": "staging"}
ANSWERS: InputResponses = {KEY: ElicitResult(action="accept", content=CHOICE)}
TARGET_LIST_MS = 100.0
TARGET_OVERHEAD_MS = 20.0


class BenchError(RuntimeError):
    """A call did not park, resume or complete as it must: the figures would be meaningless."""


@dataclass(frozen=True)
class Plan:
    calls: int  # parked at the end
    resumes: int  # measured resumes (and bare rounds) at each size
    warmup: int  # unmeasured resumes (and bare rounds) first, at each size
    list_runs: int  # measured runs of each listing at each size
    principals: int

    @property
    def sizes(self) -> tuple[int, int]:
        """The two sizes the listing and the resume are measured at: a tenth of the calls, and all of them."""
        return (self.calls // 10, self.calls)

    @property
    def real(self) -> int:
        """Real parked calls: one per resume (warm-up included) at each size."""
        return 2 * (self.resumes + self.warmup)


def principal(n: int, plan: Plan) -> str:
    return f"person-{n % plan.principals:03d}"


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def rss_bytes() -> int:
    """The process's resident set size now (VmRSS; the peak from `resource` where /proc is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, db.with_name(db.name + "-wal")) if p.exists())


# --- sending round 2: the bare SDK client, and the runtime's resume ---------------------------------------------


async def bare_first_round(url: str, service: str) -> str:
    """Round 1 of `deploy` by the bare SDK client: the sealed `requestState` the server asks with."""
    async with Client(url, mode=MODE, elicitation_callback=answered_by_hand) as client:
        first = await client.session.call_tool(TOOL, {"service": service}, allow_input_required=True)
    if (
        not isinstance(first, InputRequiredResult)
        or first.request_state is None
        or KEY not in (first.input_requests or {})
    ):
        raise BenchError(f"round 1 of {TOOL} should ask {KEY!r}, got {first!r}")
    return first.request_state


async def bare_round_alone(url: str, service: str, state: str) -> float:
    """Round 2 by the bare SDK client on a fresh connection, the `tools/call` alone; seconds taken.

    The SDK's `call_tool` checks a complete result against the tool's output schema and lists the tools to learn
    it. That listing is done here before the timed round and left out; no connection is kept alive, so the timed
    `tools/call` opens its own TCP connection as a resume does. The HTTP client reuses one TLS context made once (as
    the runtime does), since building one loads the CA bundle and would dwarf the round."""
    start = time.perf_counter()
    async with httpx2.AsyncClient(
        timeout=httpx2.Timeout(30.0), limits=httpx2.Limits(max_keepalive_connections=0), verify=_TLS
    ) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=MODE, elicitation_callback=answered_by_hand) as client:
            opened = time.perf_counter()
            await client.list_tools()
            listed = time.perf_counter()
            second = await client.session.call_tool(
                TOOL, {"service": service}, input_responses=ANSWERS, request_state=state, allow_input_required=True
            )
    elapsed = time.perf_counter() - start - (listed - opened)
    _completed(second, service)
    return elapsed


async def bare_call_tool(url: str, service: str, state: str) -> float:
    """Round 2 as the bare SDK client sends it: `Client(url)` and `session.call_tool` on a fresh connection, which
    also lists the tools to check the result against the tool's output schema; seconds taken."""
    start = time.perf_counter()
    async with Client(url, mode=MODE, elicitation_callback=answered_by_hand) as client:
        second = await client.session.call_tool(
            TOOL, {"service": service}, input_responses=ANSWERS, request_state=state, allow_input_required=True
        )
    elapsed = time.perf_counter() - start
    _completed(second, service)
    return elapsed


def _completed(result: object, service: str) -> None:
    if not isinstance(result, CallToolResult) or text(result) != f"Deployed {service} to staging.":
        raise BenchError(f"round 2 of {TOOL} should complete, got {result!r}")


async def runtime_resume(runtime: Runtime, call_id: str, service: str) -> float:
    """The person answers (untimed, as the inbox would), then the timed `runtime.resume`; seconds taken."""
    record = await runtime.calls.get(call_id)
    await runtime.answer(call_id, KEY, Answer("accept", CHOICE), by=record.principal)
    start = time.perf_counter()
    outcome = await runtime.resume(call_id)
    elapsed = time.perf_counter() - start
    if not isinstance(outcome, Completed) or outcome.text != f"Deployed {service} to staging.":
        raise BenchError(f"resuming {call_id} should complete it, got {outcome!r}")
    return elapsed


# --- parking ------------------------------------------------------------------------------------------------------


@dataclass
class Parking:
    """Parks calls in the runtime's store: real ones through the server, filler rows from their real results."""

    runtime: Runtime
    url: str
    plan: Plan
    templates: list[Mapping[str, Any]]
    made: int = 0
    filled: int = 0
    fill_seconds: float = 0.0
    pending_bytes: int = 0  # the parked round's JSON of one real call, as stored

    async def real(self, n: int) -> list[tuple[str, str]]:
        """`n` real calls of `deploy` parked by `Runtime.call_tool`: [(call id, service)]."""
        parked: list[tuple[str, str]] = []
        for _ in range(n):
            service = f"svc-{self.made}"
            outcome = await self.runtime.call_tool(
                self.url, TOOL, {"service": service}, principal=principal(self.made, self.plan)
            )
            if not isinstance(outcome, Parked) or outcome.missing != (KEY,):
                raise BenchError(f"calling {TOOL} without an environment should park on {KEY!r}, got {outcome!r}")
            record = await self.runtime.calls.get(outcome.call_id)
            assert record.pending is not None and record.pending_json is not None
            self.templates.append(record.pending)
            self.pending_bytes = len(record.pending_json)
            parked.append((outcome.call_id, service))
            self.made += 1
        return parked

    async def fill(self, count: int) -> None:
        """Add filler rows until `count` calls are parked."""
        missing = count - await self.runtime.calls.count()
        start = time.perf_counter()
        for _ in range(missing):
            now = self.runtime.clock.now()
            await self.runtime.calls.add(
                call_id=new_call_id(),
                run_id=None,
                principal=principal(self.made, self.plan),
                server=self.url,
                protocol=MODE,
                method="tools/call",
                target=TOOL,
                arguments={"service": f"svc-{self.made}"},
                outcome=self.templates[self.made % len(self.templates)],
                sent=None,
                deadline=now + self.runtime.settings.answer_wait,
                now=now,
            )
            self.made += 1
            self.filled += 1
        self.fill_seconds += time.perf_counter() - start


# --- measuring ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listed:
    what: str
    parked: int
    rows: int
    times: list[float]


async def time_listing(what: str, parked: int, fn: Callable[[], Awaitable[int]], runs: int) -> Listed:
    rows = await fn()  # warm-up: connections opened, statements compiled
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        rows = await fn()
        times.append(time.perf_counter() - start)
    return Listed(what, parked, rows, times)


RESUME = "runtime.resume"
ALONE = "bare: the round alone"
# One TLS context for every bare connection, made once (see `bare_round_alone`).
_TLS = httpx2.create_ssl_context()
SDK = "bare: Client + call_tool"


@dataclass(frozen=True)
class Resumed:
    parked: int
    times: dict[str, list[float]]  # by side: RESUME, ALONE, SDK


async def time_resumes(
    parking: Parking, parked: int, calls: list[tuple[str, str]], bare: list[tuple[str, str, str, str]]
) -> Resumed:
    """Resume the real parked calls and send the two bare rounds, in turns (who goes first rotates each time).
    After each resume one filler row is parked, so `parked` calls wait throughout."""
    url, runtime = parking.url, parking.runtime
    times: dict[str, list[float]] = {RESUME: [], ALONE: [], SDK: []}
    for n, ((call_id, service), (alone, alone_state, sdk, sdk_state)) in enumerate(zip(calls, bare, strict=True)):
        turn: list[tuple[str, Callable[[], Awaitable[float]]]] = [
            (RESUME, partial(runtime_resume, runtime, call_id, service)),
            (ALONE, partial(bare_round_alone, url, alone, alone_state)),
            (SDK, partial(bare_call_tool, url, sdk, sdk_state)),
        ]
        gc.collect()
        for side, fn in turn[n % 3 :] + turn[: n % 3]:
            took = await fn()
            if n >= parking.plan.warmup:
                times[side].append(took)
        await parking.fill(parked)
    return Resumed(parked, times)


# --- the run ------------------------------------------------------------------------------------------------------


@dataclass
class Figures:
    listed: list[Listed]
    resumed: list[Resumed]
    memory: list[tuple[str, int, int]]  # (when, parked, RSS bytes)
    default_listing: int
    real: int
    filled: int
    fill_seconds: float
    pending_bytes: int  # the parked round's JSON of one call, as stored
    store_bytes: int = 0


async def run(plan: Plan, url: str, db: Path) -> Figures:
    gc.collect()
    memory = [("before opening the runtime", 0, rss_bytes())]
    # MRTR rounds, as the baseline measures them: the demo's deploy would otherwise run as a task.
    runtime = await Runtime.open(f"sqlite:///{db}", renderers=[WebInbox()], settings=load_settings(call_tasks=False))
    try:
        gc.collect()
        memory.append(("after opening the runtime", 0, rss_bytes()))
        parking = Parking(runtime, url, plan, templates=[])
        real = await parking.real(plan.real)
        per_size = plan.resumes + plan.warmup
        by_size = {plan.sizes[0]: real[:per_size], plan.sizes[1]: real[per_size:]}
        bare: dict[int, list[tuple[str, str, str, str]]] = {}
        for size in plan.sizes:
            bare[size] = []
            for n in range(per_size):
                alone, sdk = f"alone-{size}-{n}", f"sdk-{size}-{n}"
                bare[size].append((alone, await bare_first_round(url, alone), sdk, await bare_first_round(url, sdk)))

        listed: list[Listed] = []
        resumed: list[Resumed] = []
        person = principal(0, plan)

        async def pending() -> int:
            return len(await runtime.pending(principal=person))

        async def everything(parked: int) -> int:
            return len(await runtime.calls.listing(limit=parked))

        for size in sorted({plan.sizes[0], plan.calls // 2, plan.calls}):
            await parking.fill(size)
            gc.collect()
            memory.append((f"after parking {size:,}", size, rss_bytes()))
            if size not in plan.sizes:
                continue
            listed.append(await time_listing(f"pending(principal={person})", size, pending, plan.list_runs))
            listed.append(await time_listing("calls.listing(), all", size, partial(everything, size), plan.list_runs))
            resumed.append(await time_resumes(parking, size, by_size[size], bare[size]))
            gc.collect()
            memory.append((f"after the measurements at {size:,}", size, rss_bytes()))
        return Figures(
            listed=listed,
            resumed=resumed,
            memory=memory,
            default_listing=len(await runtime.calls.listing()),
            real=parking.made - parking.filled,
            filled=parking.filled,
            fill_seconds=parking.fill_seconds,
            pending_bytes=parking.pending_bytes,
        )
    finally:
        await runtime.close()


# --- reporting ----------------------------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return seconds * 1000


def verdict(value_ms: float, target_ms: float) -> str:
    return "within target" if value_ms < target_ms else "ABOVE target"


def report(plan: Plan, figures: Figures) -> None:
    small, large = plan.sizes
    print(
        f"\nparked: {figures.real} real calls (Runtime.call_tool of {TOOL} against the server, parked on {KEY!r}; "
        f"all resumed below) and {figures.filled:,} filler rows ({figures.real} of them parked as the resumed calls "
        "completed; ParkedCalls.add with the real calls' "
        f"InputRequiredResult JSON, {figures.pending_bytes:,} bytes a call; "
        f"{figures.fill_seconds * 1e6 / max(figures.filled, 1):.0f} µs a row), over {plan.principals} principals"
    )

    print(f"\nlisting, {plan.list_runs} runs each after one warm-up, in ms (target: under {TARGET_LIST_MS:.0f} ms)")
    print(f"{'list':<32} {'parked':>7} {'rows':>7} {'p50 ms':>9} {'p90 ms':>9}")
    for item in figures.listed:
        p50 = ms(percentile(item.times, 0.5))
        p90 = ms(percentile(item.times, 0.9))
        print(
            f"{item.what:<32} {item.parked:>7,} {item.rows:>7,} {p50:9.2f} {p90:9.2f}   "
            f"(target < {TARGET_LIST_MS:.0f} ms: {verdict(p90, TARGET_LIST_MS)})"
        )
    for what in dict.fromkeys(item.what for item in figures.listed):
        a, b = (item for item in figures.listed if item.what == what)
        ratio = statistics.median(b.times) / statistics.median(a.times)
        print(f"scaling {what}: {large:,} / {small:,} parked, p50 {ratio:.2f}x ({b.rows:,} / {a.rows:,} rows)")
    if figures.default_listing < large:
        print(
            f"note: calls.listing() with its default limit returns {figures.default_listing:,} of the {large:,} "
            "parked calls (timed above with limit= the count); pending() without a principal reads through it"
        )

    print(
        f"\nresume of one answered call (round 2 goes to the server, the call completes), {plan.resumes} per size "
        f"after {plan.warmup} warm-up, in turns with the bare SDK sending the same round on a fresh connection"
    )
    print(
        f"{'resume':<6} {'parked':>7}  {'side':<26} {'p50 ms':>8} {'p90 ms':>8}  "
        f"{'resume - side p50':>17} {'ratio p50':>9}"
    )
    for resumed in figures.resumed:
        r50 = ms(percentile(resumed.times[RESUME], 0.5))
        for side, times in resumed.times.items():
            p50, p90 = ms(percentile(times, 0.5)), ms(percentile(times, 0.9))
            line = f"{'resume':<6} {resumed.parked:>7,}  {side:<26} {p50:8.2f} {p90:8.2f}"
            if side != RESUME:
                line += f"  {r50 - p50:14.2f} ms {r50 / p50:8.2f}x"
            if side == ALONE:
                line += f"   (target: overhead < {TARGET_OVERHEAD_MS:.0f} ms: {verdict(r50 - p50, TARGET_OVERHEAD_MS)})"
            print(line)
    if len(figures.resumed) == 2:
        first, last = figures.resumed
        ratio = statistics.median(last.times[RESUME]) / statistics.median(first.times[RESUME])
        print(f"scaling runtime.resume: {large:,} / {small:,} parked, p50 {ratio:.2f}x")

    print("\nmemory of this process (VmRSS), in KiB; growth per parked call in bytes (target: flat in the count)")
    print(f"{'memory':<36} {'parked':>7} {'RSS KiB':>9} {'growth KiB':>11} {'per call B':>11}")
    previous: tuple[int, int] | None = None
    for when, parked, rss in figures.memory:
        growth = per_call = ""
        if previous is not None:
            growth = f"{(rss - previous[1]) / 1024:+.0f}"
            if parked > previous[0]:
                per_call = f"{(rss - previous[1]) / (parked - previous[0]):.0f}"
        print(f"{when:<36} {parked:>7,} {rss / 1024:9.0f} {growth:>11} {per_call:>11}".rstrip())
        previous = (parked, rss)
    measured = next(rss for when, parked, rss in figures.memory if when == f"after the measurements at {small:,}")
    parked_all = next(rss for when, parked, rss in figures.memory if when == f"after parking {large:,}")
    if large > small:
        marginal = (parked_all - measured) / (large - small)
        print(
            f"from {small:,} to {large:,} parked (nothing but parking in between): {marginal:.0f} B of RSS per parked "
            f"call; the store file holds {figures.store_bytes / 1024 / 1024:.1f} MiB on disk "
            f"({figures.store_bytes / large:,.0f} B a call)"
        )


def parse(argv: Sequence[str] | None) -> Plan:
    parser = argparse.ArgumentParser(
        description="Time listing and resuming the agent runtime's parked calls, and its memory, with many parked."
    )
    parser.add_argument("--calls", type=int, default=None, help="calls parked at the end (default 10000)")
    parser.add_argument("--resumes", type=int, default=None, help="measured resumes at each size (default 30)")
    parser.add_argument("--warmup", type=int, default=None, help="unmeasured resumes first, at each size (default 3)")
    parser.add_argument("--list-runs", type=int, default=None, help="runs of each listing at each size (default 20)")
    parser.add_argument("--principals", type=int, default=100, help="people the calls are spread over (default 100)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="200 calls and a few resumes, a few seconds: rough figures, for a smoke test",
    )
    args = parser.parse_args(argv)

    def pick(value: int | None, default: int, quick_default: int, name: str, minimum: int) -> int:
        chosen = value if value is not None else (quick_default if args.quick else default)
        if chosen < minimum:
            parser.error(f"--{name} must be at least {minimum}")
        return chosen

    plan = Plan(
        calls=pick(args.calls, 10_000, 200, "calls", 10),
        resumes=pick(args.resumes, 30, 3, "resumes", 1),
        warmup=pick(args.warmup, 3, 1, "warmup", 0),
        list_runs=pick(args.list_runs, 20, 5, "list-runs", 1),
        principals=pick(args.principals, 100, 100, "principals", 1),
    )
    if plan.real > plan.sizes[0]:
        parser.error(
            f"{plan.real} real calls (2 x (--resumes + --warmup)) do not fit in the {plan.sizes[0]} parked at the "
            "first size (--calls / 10): raise --calls or lower --resumes"
        )
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    plan = parse(argv)
    started = time.monotonic()
    print(
        f"askback runtime bench: {plan.calls:,} parked calls; python {platform.python_version()}, "
        f"mcp {version('mcp')}, askback {version('askback')}, {os.cpu_count()} CPU(s)"
    )
    with tempfile.TemporaryDirectory(prefix="askback-bench-runtime-") as tmp:
        folder = Path(tmp)
        env = {
            "ASKBACK_STATE_KEYS": secrets.token_urlsafe(36),
            "ASKBACK_DATABASE_URL": f"sqlite:///{folder / 'server.db'}",
        }
        with serving(DEMO, port=free_port(), workers=1, env=env) as url:
            up = time.monotonic() - started
            print(f"server: askback serve {DEMO} --workers 1 (SQLite) at {url}, up in {up:.1f} s")
            db = folder / "runtime.db"
            figures = anyio.run(run, plan, url, db)
            figures.store_bytes = file_bytes(db)
    report(plan, figures)
    print(f"\ndone in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
