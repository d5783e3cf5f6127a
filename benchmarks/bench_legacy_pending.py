"""Memory held by 2025-11-25 sessions whose pushed question is never answered, and given back at the deadline.

N legacy sessions (the official SDK client, in memory) each call a tool that pushes an `elicitation/create` which
the client never answers. The process's resident set size is printed before the sessions open (baseline), while all
N questions wait, after the flow deadline (injected clock, moved past it) ended every wait with the "Expired"
result, and after the sessions closed; then again for further waves. Python's allocator keeps freed memory for
reuse, so RSS does not drop back after a wave: what shows that nothing is kept is that later waves do not grow it.
Nothing is asserted: the figures are printed (see benchmarks/README.md).

    python benchmarks/bench_legacy_pending.py              # 3 waves of 1,000 sessions
    python benchmarks/bench_legacy_pending.py --sessions 200 --waves 2
"""

from __future__ import annotations

import argparse
import gc
import secrets
import tempfile
from pathlib import Path
from typing import Any

import anyio
from mcp import Client
from mcp_types import ElicitResult

from askback import Askback, Confirm, Flow, load_settings
from askback.clock import FrozenClock

sure = Confirm(key="sure", message="Go ahead?")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def build(db: Path, clock: FrozenClock, sessions: int) -> Askback:
    settings = load_settings(
        database_url=f"sqlite:///{db}",
        state_keys=secrets.token_urlsafe(32),
        max_pending_pushes=sessions,
        flow_deadline=60,
    )
    app = Askback("bench-legacy", settings=settings, clock=clock)

    @app.tool(asks=[sure])
    async def act(flow: Flow) -> str:
        return "done" if flow.ask(sure) else "not done"

    return app


async def wave(app: Askback, clock: FrozenClock, sessions: int) -> tuple[int, int, int]:
    """Open `sessions` sessions whose question is never answered, move the clock past the deadline, close them.
    Returns (RSS while all wait, RSS after the deadline, how many ended 'Expired')."""
    pushed = 0
    all_pushed = anyio.Event()
    release = anyio.Event()
    close = anyio.Event()
    all_ended = anyio.Event()
    texts: list[str] = []

    async def never_answers(context: Any, params: Any) -> ElicitResult:
        nonlocal pushed
        pushed += 1
        if pushed == sessions:
            all_pushed.set()
        await release.wait()
        return ElicitResult(action="cancel")

    async def session(started: anyio.Event) -> None:
        async with Client(app.mcp, mode="legacy", elicitation_callback=never_answers) as client:
            started.set()
            result = await client.call_tool("act", {})
            texts.append(result.content[0].text)  # type: ignore[union-attr]
            if len(texts) == sessions:
                all_ended.set()
            await close.wait()

    async with anyio.create_task_group() as tg:
        for _ in range(sessions):
            started = anyio.Event()
            tg.start_soon(session, started)
            await started.wait()
        await all_pushed.wait()
        gc.collect()
        waiting = rss_kib()
        assert app.pushes.total == sessions
        clock.advance(app.settings.flow_deadline + 1)  # every pushed question's wait ends now
        with anyio.fail_after(120):
            await all_ended.wait()
        release.set()
        gc.collect()
        expired = rss_kib()
        close.set()
    return waiting, expired, sum(t.startswith("Expired") for t in texts)


async def run(sessions: int, waves: int) -> None:
    clock = FrozenClock(at=1_800_000_000.0)
    with tempfile.TemporaryDirectory() as tmp:
        app = build(Path(tmp) / "bench.db", clock, sessions)
        async with app.running():
            gc.collect()
            before = rss_kib()
            print(f"{sessions} legacy sessions per wave, each with one pushed question nobody answers")
            print(
                "| wave | RSS while all wait (KiB) | after the deadline | after the sessions closed | ended Expired |"
            )
            print("|---|---|---|---|---|")
            print(f"| before | {before} | | | |")
            closed = []
            for n in range(1, waves + 1):
                waiting, expired, ended = await wave(app, clock, sessions)
                gc.collect()
                closed.append(rss_kib())
                print(f"| {n} | {waiting} | {expired} | {closed[-1]} | {ended}/{sessions} |")
                assert app.pushes.total == 0
    growth = (closed[-1] - closed[0]) / max(1, sessions * (len(closed) - 1))
    print(
        f"held per waiting session in wave 1: {(waiting - before) / sessions:.1f} KiB (RSS, approximate); "
        f"growth per session from wave 1 to wave {waves} once closed: {growth:.2f} KiB "
        "(0 means the memory of ended sessions is reused: nothing is kept)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=1000)
    parser.add_argument("--waves", type=int, default=3)
    args = parser.parse_args()
    anyio.run(run, args.sessions, args.waves)


if __name__ == "__main__":
    main()
