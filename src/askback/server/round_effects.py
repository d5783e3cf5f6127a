"""The effects of one run of a round's handler (`flow.once`): each run the way the round plan's `effect_route` says,
under the round's claim (written as soon as it ran, and again with the round's end), reused from an earlier attempt,
or, in a task, through a claim of its own."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio

from askback.core import round_plan as plan
from askback.core.flow import as_json
from askback.errors import AskbackError, DefinitionError
from askback.server.effects import run_once

if TYPE_CHECKING:
    from askback.clock import Clock
    from askback.server.effects import ClaimEffect
    from askback.store import Store

__all__ = ["RoundEffects"]

logger = logging.getLogger("askback")


class RoundEffects:
    """The effects of one run of the handler, run the way `effect_route` says; recorded with the round's end."""

    def __init__(
        self,
        step: plan.RunHandler,
        *,
        tool: str,
        store: Callable[[], Awaitable[Store]],
        clock: Clock,
        now: float,
        wait: float,
        lease: float,
        claim_effect: ClaimEffect | None,
    ) -> None:
        self.tool = tool
        self.store = store
        self.clock = clock
        self.now = now
        self.wait = wait
        self.lease = lease
        self.claim_effect = claim_effect
        self.known = step.known_effects
        self.ran = step.ran
        # Won through their own claim, and run under the round's claim (recorded done at the round's end).
        self.finished: list[tuple[str, Any]] = []
        self.new: list[tuple[str, Any]] = []

    async def run(self, flow_id: str, name: str, effect: Callable[[], Awaitable[Any]]) -> Any:
        route = plan.effect_route(name, known=self.known, ran=(*self.ran, *self.new))
        if isinstance(route, plan.Reuse):
            return route.outcome
        if route == "run_here":
            raw = await effect()
            try:
                outcome = as_json(raw)
            except DefinitionError:
                # It happened: record that (so that a retry does not run it again), then report the mistake.
                self.new.append((name, None))
                await self._record_now(flow_id, name, None)
                raise
            self.new.append((name, outcome))
            await self._record_now(flow_id, name, outcome)
            return outcome
        return await run_once(
            (await self.store()).flows,
            flow_id,
            name,
            effect,
            clock=self.clock,
            wait=self.wait,
            lease=self.lease,
            # A task's effect is recorded as soon as it ran: the task's row, not a round, says how far it got.
            finished=None if self.claim_effect is not None else self.finished,
            claim_with=self.claim_effect,
        )

    async def _record_now(self, flow_id: str, name: str, outcome: Any) -> None:
        """Write the outcome of an effect that just ran, before the handler goes on: the round's end writes it too,
        but a round whose end is never written (its process stopped past its grace, the database failed at that
        moment) would otherwise leave the next attempt to run the effect again. When this write fails the round's
        end is still tried, as before."""
        try:
            store = await self.store()
            with anyio.CancelScope(shield=True, deadline=anyio.current_time() + self.wait) as scope:
                await store.flows.record_effect(flow_id, name, outcome, at=self.now)
            if scope.cancelled_caught:
                raise TimeoutError
        except (AskbackError, TimeoutError):
            logger.warning("askback could not record effect %r of %s as it ran; the round's end will", name, self.tool)
