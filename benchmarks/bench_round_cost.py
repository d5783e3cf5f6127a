"""Where a round's server time goes: askback against the bare SDK with a hand-written ledger, in this process.

The same servers and the same raw 2026-07-28 bodies as `bench_flow.py`'s raw-HTTP mode (its `write` and `deploy`
shapes), sent to each server's ASGI app directly: no sockets, no HTTP parser, no client. What is left is each
server's own work per flow, which is what a busy deployment pays per core. askback's is split three ways, by timing
(not counting) inside it:

- **store**: every transaction and read of askback's database (the round's claim, the effect's outcome, the round's
  end with its audit rows and chain), against the ledger's one transaction in bare+ledger;
- **audit log**: the log record of each round's audit events (`askback.audit.emit.emit_all`), made and formatted
  into `/dev/null` as in `bench_flow.py`;
- **the rest**: everything else askback does around the SDK's own work (the round's plan and flow, sealing its
  state, the HTTP guards).

    python benchmarks/bench_round_cost.py            # about a minute on 2 cores
    python benchmarks/bench_round_cost.py --quick    # a few seconds; rough figures (the smoke test runs this)

Sides run flow by flow in turn (askback, askback-2, bare+ledger, rotating), so that noise lands on every side alike;
askback/askback-2 is the noise floor. Every round is checked (it asks what it must, or completes with the expected
text), and the replayed final round of one flow per side must complete with the first outcome and write nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the test suite's in-process requests

import bench_flow as bf
from tests._asgi import post_scope

import askback.server.round as round_module
from askback.server.http import build_app

ASKBACK, ASKBACK_2, LEDGER = "askback", "askback-2", "bare+ledger"
SIDES = (ASKBACK, ASKBACK_2, LEDGER)

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]


class Clocked:
    """Nanoseconds spent inside the wrapped calls, reset per flow."""

    def __init__(self) -> None:
        self.ns = 0

    def wrap_async(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return await fn(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - start

        return timed

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return fn(*args, **kwargs)
            finally:
                self.ns += time.perf_counter_ns() - start

        return timed


class Side:
    """One server's ASGI app, driven with one shape's raw bodies; each flow's time, and its store and log shares."""

    def __init__(self, name: str, app: App, shape: bf.Shape, store: Clocked, log: Clocked) -> None:
        self.name = name
        self.app = app
        self.shape = shape
        self.bodies = bf.raw_bodies(shape)
        self.store = store
        self.log = log
        self.flows: list[tuple[int, int, int]] = []  # (total, store, log) ns
        self.last: tuple[bytes, str] | None = None

    async def post(self, body: bytes) -> dict[str, Any]:
        sent: list[dict[str, Any]] = []
        scope = post_scope(self.shape.tool)  # the headers of bench_flow.raw_headers, and a Host

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await self.app(scope, receive, send)
        status = sent[0].get("status")
        raw = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
        reply = json.loads(raw) if status == 200 else {}
        if "result" not in reply:
            raise bf.BenchError(f"{self.name}: HTTP {status}: {raw[:300]!r}")
        result: dict[str, Any] = reply["result"]
        return result

    async def flow(self, n: int, *, keep: bool) -> None:
        value = f"{self.shape.argument}-{n}"
        state = b""
        self.store.ns = self.log.ns = 0
        total = 0
        for r, template in enumerate(self.bodies):
            body = template.replace(bf.ARG, value.encode()).replace(bf.STATE, state)
            start = time.perf_counter_ns()
            result = await self.post(body)
            total += time.perf_counter_ns() - start
            if r + 1 < len(self.bodies):
                if result.get("resultType") != "input_required" or not result.get("requestState"):
                    raise bf.BenchError(f"{self.name} {self.shape.name} round {r + 1} should ask, got {result!r}")
                state = result["requestState"].encode()
            else:
                said = " ".join(c.get("text", "") for c in result.get("content", []))
                if result.get("isError") or said != self.shape.completed(value):
                    raise bf.BenchError(f"{self.name} {self.shape.name} completed with {result!r}")
                self.last = (body, said)
        if keep:
            self.flows.append((total, self.store.ns, self.log.ns))

    async def replayed(self) -> bool:
        assert self.last is not None
        body, said = self.last
        result = await self.post(body)
        return " ".join(c.get("text", "") for c in result.get("content", [])) == said


@contextlib.contextmanager
def timed_log(log: Clocked) -> Iterator[None]:
    """Time the log record of every round's audit events (the round driver's `emit_all`)."""
    original = round_module.emit_all
    round_module.emit_all = log.wrap(original)  # type: ignore[assignment]
    try:
        yield
    finally:
        round_module.emit_all = original  # type: ignore[assignment]


async def run(args: argparse.Namespace, folder: Path) -> list[str]:
    key = secrets.token_urlsafe(40)
    log = Clocked()
    none = Clocked()
    lines: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        apps: dict[str, tuple[App, Clocked]] = {}
        ledger_db: bf.HandDb | None = None
        for name in SIDES:
            if name == LEDGER:
                ledger_db = bf.HandDb(str(folder / "ledger.db"))
                server = bf.build_bare(key, [], ledger_db, ledger=True)
                app: Any = server.streamable_http_app(stateless_http=True, json_response=True)
                store = Clocked()
                ledger_db.once = store.wrap(ledger_db.once)  # type: ignore[method-assign]
                ledger_db.record = store.wrap(ledger_db.record)  # type: ignore[method-assign]
            else:
                built = bf.build_askback(f"sqlite:///{folder / (name + '.db')}", key, [])
                app = build_app(built)
                store = Clocked()
            await stack.enter_async_context(app.router.lifespan_context(app))
            if name != LEDGER:
                database = (await built.store()).database
                database.transaction = store.wrap_async(database.transaction)  # type: ignore[method-assign]
                database.read = store.wrap_async(database.read)  # type: ignore[method-assign]
            apps[name] = (app, store)
        stack.enter_context(timed_log(log))
        gc.collect()
        gc.freeze()
        for shape in (bf.WRITE, bf.DEPLOY):
            sides = [
                Side(name, app, shape, store, log if name != LEDGER else none) for name, (app, store) in apps.items()
            ]
            for n in range(args.warmup):
                for side in sides:
                    await side.flow(n, keep=False)
            replays = {side.name: await side.replayed() for side in sides}
            for n in range(args.flows):
                for i in range(len(sides)):
                    side = sides[(n + i) % len(sides)]
                    await side.flow(args.warmup + n, keep=True)
            lines += report(shape, sides, replays)
        assert ledger_db is not None
        count = ledger_db.db.execute("SELECT count(*) FROM deployments").fetchone()[0]
        expected = args.warmup + args.flows
        lines.append(f"deployments recorded by bare+ledger: {count} for {expected} deploy flows (replays wrote none)")
        if count != expected:
            raise bf.BenchError(f"bare+ledger recorded {count} deployments for {expected} flows")
    return lines


def _p50_us(values: Sequence[int]) -> float:
    return statistics.median(values) / 1000


def report(shape: bf.Shape, sides: list[Side], replays: dict[str, bool]) -> list[str]:
    lines = [
        f"{shape.name}: {len(sides[0].flows)} flows per side, {len(shape.answers)} rounds each; p50 per flow, us",
        f"{'side':<14}{'flow':>10}{'store':>10}{'audit log':>11}{'the rest':>10}",
    ]
    figures: dict[str, tuple[float, float, float]] = {}
    for side in sides:
        total = _p50_us([t for t, _, _ in side.flows])
        store = _p50_us([s for _, s, _ in side.flows])
        log = _p50_us([g for _, _, g in side.flows])
        figures[side.name] = (total, store, log)
        lines.append(f"{side.name:<14}{total:>10.0f}{store:>10.0f}{log:>11.0f}{total - store - log:>10.0f}")
    a, a2, c = figures[ASKBACK], figures[ASKBACK_2], figures[LEDGER]
    beyond = a[0] - c[0]
    lines.append(
        f"ratio askback/bare+ledger {a[0] / c[0]:.2f} (noise floor askback/askback-2 {a[0] / a2[0]:.2f}); "
        f"askback beyond bare+ledger: {beyond:.0f} us per flow: store {a[1] - c[1]:.0f}, audit log {a[2]:.0f}, "
        f"the rest {beyond - (a[1] - c[1]) - a[2]:.0f}"
    )
    lines.append(
        "replayed final round completes with the first outcome: "
        + ", ".join(f"{name} {'yes' if ok else 'NO'}" for name, ok in replays.items())
    )
    if not all(replays.values()):
        raise bf.BenchError(f"a replayed final round answered differently: {replays!r}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--flows", type=int, default=2000, help="measured flows per side and shape (default 2000)")
    parser.add_argument("--warmup", type=int, default=200, help="unmeasured flows per side first (default 200)")
    parser.add_argument("--quick", action="store_true", help="few flows, a few seconds: rough figures")
    args = parser.parse_args(argv)
    if args.quick:
        args.flows, args.warmup = 60, 20
    bf._quiet_logging()
    print(f"askback round cost, in process (ASGI, no HTTP): python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="askback-round-cost-") as folder:
        for line in anyio.run(run, args, Path(folder)):
            print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
