"""Which due deliveries may start now: the dispatcher's slots, a pure decision on counts the dispatcher keeps.

Slots are counted per receiver, and a receiver is an origin, (scheme, host, port), however many endpoint URLs point
at it: four URLs on one host share that host's slots. A receiver is *known fast* when its last attempt from this
dispatcher got an answer below 500 within a quarter of the attempt's deadline (`answered_quickly`). Each due
delivery, oldest due first, may start when

- fewer than `concurrency` attempts are under way in all;
- for a known fast receiver, fewer than `per_origin` are under way to it;
- for any other receiver (one not tried since this dispatcher started, one that answers slowly, one that failed:
  no answer in time, or a 5xx), none is under way to it, and those receivers together hold fewer than half of
  `concurrency` (one at least). A receiver that hangs, or answers just before its deadline, costs one slot, not a
  burst of fresh deadlines for every new event, and however many such receivers there are, the fast ones always
  keep half of the slots.

The dispatcher (`dispatcher.Dispatcher`) keeps what is under way and which receivers are known fast, and asks
`Slots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Origin", "Slots", "answered_quickly"]

Origin = tuple[str, str, int]
"""A receiver: the scheme, host (as sent) and port of its URL."""

_T = TypeVar("_T")


def answered_quickly(status: int | None, took: float, within: float) -> bool:
    """Whether an attempt shows its receiver fast: it answered (any status below 500, a 4xx included: the receiver
    is up) within a quarter of `within`, the attempt's deadline. No answer at all (a timeout, a refused or failed
    connection, any other error), a 5xx or a slow answer holds the receiver back."""
    return status is not None and status < 500 and took <= within / 4


@dataclass(frozen=True)
class Slots:
    """The slots of one dispatcher at one moment: `under_way` attempts by origin, the `fast` origins."""

    concurrency: int
    per_origin: int
    under_way: Mapping[Origin, int] = field(default_factory=dict)
    fast: frozenset[Origin] = frozenset()

    @property
    def held_back_share(self) -> int:
        """How many attempts the receivers not known fast may hold together."""
        return max(1, self.concurrency // 2)

    def room(self, origin: Origin) -> int:
        """How many more attempts to `origin` may start now."""
        free = self.concurrency - sum(self.under_way.values())
        held = self.under_way.get(origin, 0)
        if origin in self.fast:
            own = self.per_origin - held
        else:
            held_back = sum(n for o, n in self.under_way.items() if o not in self.fast)
            own = 1 - held if held_back < self.held_back_share else 0
        return max(0, min(free, own))

    def admit(self, due: Sequence[tuple[_T, Origin]]) -> list[_T]:
        """The items of `due` (each with its origin, oldest due first) that may start now, in that order."""
        counts = dict(self.under_way)
        admitted: list[_T] = []
        for item, origin in due:
            now = Slots(self.concurrency, self.per_origin, counts, self.fast)
            if now.room(origin) > 0:
                admitted.append(item)
                counts[origin] = counts.get(origin, 0) + 1
        return admitted
