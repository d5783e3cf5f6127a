"""How often askback may ask an issuer again while it fails: one hold-back, shared by every caller of one peer.

An issuer that is down, or that keeps refusing made-up tokens, must not be asked once per request: a flood of
requests would become a flood of requests to the issuer. A `HoldBack` allows at most `limit` tries in any `interval`
seconds, whoever tries; `wait()` says how long until the next try is allowed (0 when it is now), `tried()`
counts one and `forgive(at)` gives back the one counted at `at` (a try reserved before asking, whose answer turned
out not to count). It is a pure function of the clock and the tries counted, with no I/O and no lock: callers that need
one try at a time hold their own lock around the try. The issuer's keys (`_keys`), its discovery (`_resource`,
`_signin`) and introspection's refusals (`_introspection`) each keep one.
"""

from __future__ import annotations

import math
from collections import deque

from askback.clock import Clock

__all__ = ["HoldBack"]


class HoldBack:
    """At most `limit` tries per `interval` seconds, measured on `clock` (see the module's docstring)."""

    def __init__(self, clock: Clock, interval: float, *, limit: int = 1) -> None:
        if limit < 1:
            raise ValueError("a hold-back allows at least one try per interval")
        self._clock = clock
        self.interval = interval
        self._limit = limit
        self._tries: deque[float] = deque()

    def wait(self) -> float:
        """Seconds until a try is allowed; 0 when one is allowed now."""
        now = self._clock.now()
        while self._tries and now - self._tries[0] >= self.interval:
            self._tries.popleft()
        if len(self._tries) < self._limit:
            return 0.0
        return self._tries[0] + self.interval - now

    def allows(self) -> bool:
        return self.wait() <= 0

    def retry_after(self) -> int:
        """Whole seconds a client should wait before trying again (at least 1), for a `Retry-After`."""
        return max(1, math.ceil(self.wait() or self.interval))

    def tried(self) -> float:
        """Count a try made now; the time it was counted at, for `forgive`."""
        now = self._clock.now()
        self._tries.append(now)
        while len(self._tries) > self._limit:
            self._tries.popleft()
        return now

    def forgive(self, at: float) -> None:
        """Give back the try counted at `at` (by `tried`), if it is still counted."""
        if at in self._tries:
            self._tries.remove(at)
