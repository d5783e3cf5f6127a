"""When a failed delivery is tried again: a bounded schedule of delays, each stretched or shrunk by jitter, after
which the delivery is given up. A pure decision: the randomness is given."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

from askback.errors import ConfigurationError

__all__ = ["GiveUp", "RetryAt", "RetrySchedule"]


@dataclass(frozen=True)
class RetryAt:
    """Try again at `at` (epoch seconds)."""

    at: float
    kind: Literal["retry"] = "retry"


@dataclass(frozen=True)
class GiveUp:
    """The schedule ran out: the delivery is failed."""

    kind: Literal["give_up"] = "give_up"


@dataclass(frozen=True)
class RetrySchedule:
    """The delays (seconds) after the 1st, 2nd, ... failed attempt; a delivery is tried `len(delays) + 1` times in
    all. Each delay is multiplied by a factor drawn from [1 - jitter, 1 + jitter], so that receivers that came back
    are not all retried in the same second."""

    delays: tuple[float, ...] = (5.0, 30.0, 120.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0)
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if not self.delays or any(d <= 0 for d in self.delays):
            raise ConfigurationError("a webhook retry schedule needs at least one delay, each above 0 seconds")
        if not 0 <= self.jitter < 1:
            raise ConfigurationError(f"a webhook retry schedule's jitter is in [0, 1), not {self.jitter}")

    @property
    def attempts(self) -> int:
        """How many times a delivery is tried before it is failed."""
        return len(self.delays) + 1

    def after_failure(self, attempts: int, now: float, rng: random.Random) -> RetryAt | GiveUp:
        """What follows the failure of attempt number `attempts` (1 for the first), at `now`."""
        if attempts > len(self.delays):
            return GiveUp()
        factor = 1 + self.jitter * (2 * rng.random() - 1)
        return RetryAt(now + self.delays[attempts - 1] * factor)
