"""Injected time and randomness, so that deadlines and ids can be controlled in tests without sleeping."""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["Clock", "FrozenClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch."""
        ...


class SystemClock:
    def now(self) -> float:
        return time.time()


@dataclass
class FrozenClock:
    """A clock that moves only when told to (`advance`)."""

    at: float = field(default_factory=time.time)

    def now(self) -> float:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += seconds


def new_flow_id() -> str:
    return secrets.token_urlsafe(16)
