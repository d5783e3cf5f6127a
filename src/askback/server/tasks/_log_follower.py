"""Reading the store's shared event log on from its current end, in the background, for the tasks that wait on what
other instances write there (an account connected: `_account_waits`; an approval decided: `_approval_waits`).

`LogFollower(name, seen, clock)` hands every event written after `start` to `seen`, in order, each once per instance;
it waits on the log (PostgreSQL's `NOTIFY`, polling on SQLite) when it has read everything, and a failed read is
logged and tried again a few seconds later. `aclose` stops it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Final

from askback.clock import Clock
from askback.errors import AskbackError
from askback.store import Store, StoredEvent

__all__ = ["LogFollower"]

logger = logging.getLogger("askback")

# Events read at once, how long to wait on the log when everything is read, and before reading again after a failure.
_BATCH: Final = 500
_IDLE: Final = 30.0
_RETRY: Final = 5.0


class LogFollower:
    """Hands each event of the shared log written after `start` to `seen` (`name` says what for, in the logs);
    `clock` gives the app's clock when the first read fails."""

    def __init__(self, name: str, seen: Callable[[StoredEvent], Awaitable[object]], clock: Callable[[], Clock]) -> None:
        self._name = name
        self._seen = seen
        self._clock = clock
        self._task: asyncio.Task[None] | None = None

    async def start(self, store: Store) -> None:
        """Read on from the log's current end (what was written before is not this follower's)."""
        if self._task is not None:
            return
        cursor = await store.events.latest_event_id()
        self._task = asyncio.get_running_loop().create_task(self._follow(store, cursor), name=f"askback {self._name}")

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def _follow(self, store: Store, cursor: int) -> None:
        while True:
            try:
                found = await store.events.events_after(cursor, limit=_BATCH)
                for stored in found:
                    await self._seen(stored)
                    # Past every event, wanted or not: the wait below would find the others again and again.
                    cursor = stored.id
                if len(found) < _BATCH:
                    await store.events.wait_for_events(cursor, timeout=_IDLE)
            except AskbackError:
                logger.warning("askback: reading the event log for %s failed; retrying", self._name, exc_info=True)
                clock = self._clock()
                await clock.sleep_until(clock.now() + _RETRY)
