"""Effects after the input point, run at most once per flow.

The final round of a flow can arrive twice: a client retries after a network error, a user double-clicks, a load
balancer replays, two instances receive the same retry at the same moment. The write that follows the answers is
wrapped in `flow.once(name, fn)`; the first attempt claims `(flow_id, name)` in the ledger (a unique row), runs
`fn`, and records its outcome. Every other attempt, on any instance, gets that recorded outcome: immediately when
it is recorded, after waiting a bounded time when the first run is still going. If `fn` raises, the claim is
released so that a later retry may try again.

Outcomes are stored as JSON, and the handler always receives the JSON form (also on the first run), so that a
replay and the original produce the same result.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from askback.audit import instance_id
from askback.clock import Clock
from askback.errors import DefinitionError, EffectInProgressError
from askback.store import Store

__all__ = ["run_once"]


def _as_json(value: Any) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise DefinitionError(
            f"an effect's outcome must be JSON-serialisable (str, number, bool, None, list, dict); got "
            f"{type(value).__name__}"
        ) from exc


async def run_once(
    store: Store,
    flow_id: str,
    name: str,
    fn: Callable[[], Awaitable[Any]],
    *,
    clock: Clock,
    wait: float,
) -> Any:
    claim = await store.claim_effect(flow_id, name, instance=instance_id(), at=clock.now())
    if claim.status == "done":
        return claim.outcome
    if claim.status == "won":
        try:
            outcome = _as_json(await fn())
        except BaseException:
            with anyio.CancelScope(shield=True):
                await store.release_effect(flow_id, name)
            raise
        await store.finish_effect(flow_id, name, outcome, at=clock.now())
        return outcome
    # Another attempt holds the claim: wait for its outcome, polling with a growing interval, for a bounded time.
    delay = 0.01
    with anyio.move_on_after(wait):
        while True:
            await anyio.sleep(delay)
            delay = min(delay * 2, 0.25)
            seen = await store.effect(flow_id, name)
            if seen is None:
                # The first attempt failed and released its claim: this attempt may run it.
                return await run_once(store, flow_id, name, fn, clock=clock, wait=wait)
            if seen.status == "done":
                return seen.outcome
    raise EffectInProgressError(
        f"The effect {name!r} of this request is still running on another instance (or that instance stopped "
        f"while running it). Nothing was done twice; retry the same request in a moment to get its outcome."
    )
