"""Injected time and randomness, so that deadlines and ids can be controlled in tests without sleeping."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Protocol

import anyio

__all__ = ["Clock", "FrozenClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...

    async def sleep_until(self, at: float) -> None:
        """Return once `now()` has reached `at` (at once if it has)."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    async def sleep_until(self, at: float) -> None:
        left = at - time.time()
        if left > 0:
            await anyio.sleep(left)


@dataclass
class FrozenClock:
    """A clock that moves only when told to (`advance`); whoever sleeps until a time wakes when it is reached."""

    at: float = field(default_factory=time.time)
    _sleepers: list[tuple[float, anyio.Event]] = field(default_factory=list, repr=False, compare=False)
    _new_sleeper: anyio.Event | None = field(default=None, repr=False, compare=False)

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds
        due = [s for s in self._sleepers if s[0] <= self.at]
        self._sleepers = [s for s in self._sleepers if s[0] > self.at]
        for _, woken in due:
            woken.set()

    async def sleep_until(self, at: float) -> None:
        if self.at >= at:
            return
        sleeper = (at, anyio.Event())
        self._sleepers.append(sleeper)
        if self._new_sleeper is not None:
            self._new_sleeper.set()
        try:
            await sleeper[1].wait()
        finally:
            if sleeper in self._sleepers:
                self._sleepers.remove(sleeper)

    async def until_sleeping(self, count: int = 1) -> None:
        """Return once at least `count` tasks wait on this clock: a test then knows that a wait has begun, and can
        advance the clock past it."""
        while len(self._sleepers) < count:
            self._new_sleeper = anyio.Event()
            await self._new_sleeper.wait()


def new_flow_id() -> str:
    return secrets.token_urlsafe(16)
