"""Driving the agent runtime against a server that runs its calls as tasks, with the runtime on a `FrozenClock`:
whenever the runtime waits to poll again the clock moves on, while the server's own worker runs in real time."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from askback.clock import FrozenClock
from askback.runtime import Parked, Runtime

T = TypeVar("T")


async def driven(clock: FrozenClock, work: Callable[[], Awaitable[T]], *, step: float = 1.0, within: float = 20) -> T:
    """Run `work`, moving `clock` on by `step` whenever the runtime sleeps, within `within` seconds."""
    done: list[T] = []
    failed: list[BaseException] = []
    with anyio.fail_after(within):
        async with anyio.create_task_group() as tasks:

            async def go() -> None:
                try:
                    done.append(await work())
                except Exception as exc:
                    failed.append(exc)
                tasks.cancel_scope.cancel()

            tasks.start_soon(go)
            while True:
                await clock.until_sleeping()
                clock.advance(step)
    if failed:
        raise failed[0]
    return done[0]


async def parked(
    clock: FrozenClock,
    runtime: Runtime,
    url: str,
    tool: str,
    arguments: dict[str, Any],
    *,
    principal: str,
    within: float = 20,
) -> Parked:
    """Call `tool` as `principal`; the call must come back parked."""
    outcome = await driven(clock, lambda: runtime.call_tool(url, tool, arguments, principal=principal), within=within)
    assert isinstance(outcome, Parked), outcome
    return outcome
