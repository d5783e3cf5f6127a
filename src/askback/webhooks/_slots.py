"""Which due deliveries may start now: the dispatcher's slots, a pure decision on counts the dispatcher keeps.

Slots are counted per receiver, and a receiver is an origin, (scheme, host, port), however many endpoint URLs point
at it: four URLs on one host share that host's slots. Each due delivery, oldest due first, may start when

- fewer than `concurrency` attempts are under way in all;
- fewer than `per_origin` are under way to its origin, or none at all while the origin is failing (its last attempt
  got no answer, or a 5xx), until an attempt to it succeeds again: a dead receiver costs one slot, not a burst of
  fresh deadlines for every new event;
- and, for a failing origin, the failing origins together hold fewer than half of `concurrency` (one at least), so
  that the healthy receivers always have slots, however many receivers fail at once.

The dispatcher (`dispatcher.Dispatcher`) keeps what is under way and which origins are failing, and asks `Slots`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

__all__ = ["Origin", "Slots", "marks_failing"]

Origin = tuple[str, str, int]
"""A receiver: the scheme, host (as sent) and port of its URL."""

_T = TypeVar("_T")


def marks_failing(status: int | None) -> bool:
    """Whether an attempt's outcome makes its origin failing: no answer at all (a timeout, a refused or failed
    connection, any other error) or a 5xx. Any other answer, a 4xx included, shows the receiver is up."""
    return status is None or status >= 500


@dataclass(frozen=True)
class Slots:
    """The slots of one dispatcher at one moment: `under_way` attempts by origin, the `failing` origins."""

    concurrency: int
    per_origin: int
    under_way: Mapping[Origin, int] = field(default_factory=dict)
    failing: frozenset[Origin] = frozenset()

    @property
    def failing_share(self) -> int:
        """How many attempts the failing origins may hold together."""
        return max(1, self.concurrency // 2)

    def room(self, origin: Origin) -> int:
        """How many more attempts to `origin` may start now."""
        free = self.concurrency - sum(self.under_way.values())
        held = self.under_way.get(origin, 0)
        if origin in self.failing:
            held_by_failing = sum(n for o, n in self.under_way.items() if o in self.failing)
            own = 1 - held if held_by_failing < self.failing_share else 0
        else:
            own = self.per_origin - held
        return max(0, min(free, own))

    def admit(self, due: Sequence[tuple[_T, Origin]]) -> list[_T]:
        """The items of `due` (each with its origin, oldest due first) that may start now, in that order."""
        counts = dict(self.under_way)
        admitted: list[_T] = []
        for item, origin in due:
            now = Slots(self.concurrency, self.per_origin, counts, self.failing)
            if now.room(origin) > 0:
                admitted.append(item)
                counts[origin] = counts.get(origin, 0) + 1
        return admitted
