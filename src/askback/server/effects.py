"""Effects after the input point, run at most once per flow.

The final round of a flow can arrive twice: a client retries after a network error, a user double-clicks, a load
balancer replays, two instances receive the same retry at the same moment. The write that follows the answers is
wrapped in `flow.once(name, fn)`; the first attempt claims `(flow_id, name)` in the ledger (a unique row), runs
`fn`, and records its outcome. Every other attempt, on any instance, gets that recorded outcome: immediately when
it is recorded, after waiting a bounded time when the first run is still going. If `fn` raises, the claim is
released so that a later retry may try again. A claim whose process died mid-effect (no outcome after the lease,
`ASKBACK_EFFECT_LEASE`) is taken over by the next retry: set the lease well above the longest effect.

Outcomes are stored as JSON, and the handler always receives the JSON form (also on the first run), so that a
replay and the original produce the same result.

Inside a round whose claim this attempt holds (`askback.server.round`), an effect the ledger has not seen runs
without this claim (the round's claim already excludes every other attempt of the flow) and is recorded with the
round's end; `run_once` is for an effect found still claimed, and for calls outside a claimed round. A task's run
(`askback.server.tasks`) claims each effect in one transaction with the task's row: only while the task is still
working under that run's lease, so that a cancel either comes before the claim (the effect never starts) or finds
it taken (the task runs on to its result).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio

from askback.audit.emit import instance_id
from askback.clock import Clock
from askback.core.flow import as_json
from askback.errors import DefinitionError, EffectInProgressError
from askback.store import EffectClaim, Flows

__all__ = ["ClaimEffect", "run_once", "wait_until_settled"]

_T = TypeVar("_T")

ClaimEffect = Callable[[str, str, float, "float | None"], Awaitable[EffectClaim]]
"""Take the claim of effect `name` of flow `flow_id` at `at` with `lease`, as `Flows.claim_effect` does, under a
condition of the caller's: a task's run claims its effects only while the task is still its own (one transaction
with the task's row), and raises when it is not."""


async def run_once(
    flows: Flows,
    flow_id: str,
    name: str,
    fn: Callable[[], Awaitable[Any]],
    *,
    clock: Clock,
    wait: float,
    lease: float | None = None,
    finished: list[tuple[str, Any]] | None = None,
    claim_with: ClaimEffect | None = None,
) -> Any:
    """Run `fn` unless this flow's effect `name` ran already. With `finished`, the outcome of a run this call wins is
    appended there instead of being written now, for the caller to write with the rest of its round. `claim_with`
    takes the claim instead of the store's plain one (a task's: only while the task is still the run's)."""
    at = clock.now()
    if claim_with is not None:
        claim = await claim_with(flow_id, name, at, lease)
    else:
        claim = await flows.claim_effect(flow_id, name, instance=instance_id(), at=at, lease=lease)
    if claim.status == "done":
        return claim.outcome
    if claim.status == "won":
        try:
            raw = await fn()
        except BaseException:
            with anyio.CancelScope(shield=True):
                await flows.release_effect(flow_id, name)
            raise
        try:
            outcome = as_json(raw)
        except DefinitionError:
            # The effect happened: record that, so that a retry does not run it again, then report the mistake.
            outcome = None
            raise
        finally:
            if finished is not None:
                finished.append((name, outcome))
            else:
                await flows.finish_effect(flow_id, name, outcome, at=clock.now())
        return outcome
    # Another attempt holds the claim: wait for its outcome, for a bounded time.
    try:
        seen = await wait_until_settled(
            flows,
            lambda: flows.effect(flow_id, name),
            lambda c: c is None or c.status == "done",
            wait=wait,
            clock=clock,
        )
    except TimeoutError:
        raise EffectInProgressError(
            f"The effect {name!r} of this request is still running on another instance (or that instance stopped "
            f"while running it). Nothing was done twice; retry the same request in a moment to get its outcome."
        ) from None
    if seen is None:
        # The first attempt failed and released its claim: this attempt may run it.
        return await run_once(
            flows, flow_id, name, fn, clock=clock, wait=wait, lease=lease, finished=finished, claim_with=claim_with
        )
    return seen.outcome


async def wait_until_settled(
    flows: Flows,
    read: Callable[[], Awaitable[_T]],
    settled: Callable[[_T], bool],
    *,
    wait: float,
    clock: Clock,
) -> _T:
    """Read until `settled(value)` and return that value; raise `TimeoutError` once `wait` seconds have passed on
    `clock`. The awaited attempt may run in this process (the store then wakes this wait as soon as it settles a
    claim) or in another one (nothing can wake it: the store is read again after a growing interval on `clock`)."""
    deadline = clock.now() + wait
    delay = 0.01
    while True:
        with flows.watching() as changed:
            value = await read()
            if settled(value):
                return value
            if clock.now() >= deadline:
                raise TimeoutError
            wake_at = min(clock.now() + delay, deadline)
            delay = min(delay * 2, 0.25)
            async with anyio.create_task_group() as tg:

                async def woken() -> None:
                    await changed.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(woken)
                await clock.sleep_until(wake_at)
                tg.cancel_scope.cancel()
