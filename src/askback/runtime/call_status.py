"""The statuses of a call the runtime keeps, and every move between them, in one table. No I/O.

```
               ask                         claim
   (none) ──────────▶ PARKED ──────────────────────────▶ RESUMING ──┐ take over (its lease ran out)
     │               │  ▲  ▲                               │  │  ▲ ──┘
     │ complete      └──┘  └─────── release, ask ──────────┘  │
     ▼              answer                                    ├── complete ──▶ COMPLETED
  COMPLETED                                                   └── fail ──────▶ FAILED
```

- `PARKED`: the call waits on people (a round of questions) or, for a task, on the server; answers are recorded.
- `RESUMING`: one process holds the call's claim and is sending its round (or reading its task); until the claim's
  lease runs out, no other process can.
- `COMPLETED`: the call has its result. `FAILED`: the server refused it, or answered what cannot be read, for good.

The store (`parked_calls`) makes every move with one conditional UPDATE whose allowed "from" statuses are read from
this table (`sources`), and sets the status the table names (`target`); whoever decides what a call allows (answer
it, resume it) asks `allows`. A move that is not in the table is refused with `CallStateError` (`move`).
"""

from __future__ import annotations

from enum import StrEnum
from types import MappingProxyType

from askback.errors import CallStateError

__all__ = ["TRANSITIONS", "CallStatus", "Move", "allows", "move", "sources", "target"]


class CallStatus(StrEnum):
    PARKED = "parked"
    RESUMING = "resuming"
    COMPLETED = "completed"
    FAILED = "failed"


class Move(StrEnum):
    ASK = "ask"  # the server asked (the first round, or the next one): the call waits on that round
    ANSWER = "answer"  # a person answered a question of the round the call is parked on
    CLAIM = "claim"  # a process claimed the resume of the parked round
    TAKE_OVER = "take over"  # a process claimed a resume whose claim's lease ran out
    RELEASE = "release"  # the claimed round could not be sent: the call is parked as it was, with its answers
    COMPLETE = "complete"  # the server returned the call's result
    FAIL = "fail"  # the server refused the call for good, or answered what cannot be read


P, R, C, F = CallStatus.PARKED, CallStatus.RESUMING, CallStatus.COMPLETED, CallStatus.FAILED

TRANSITIONS: MappingProxyType[tuple[CallStatus | None, Move], CallStatus] = MappingProxyType(
    {
        (None, Move.ASK): P,
        (None, Move.COMPLETE): C,
        (P, Move.ANSWER): P,
        (P, Move.CLAIM): R,
        (R, Move.TAKE_OVER): R,
        (R, Move.RELEASE): P,
        (R, Move.ASK): P,
        (R, Move.COMPLETE): C,
        (R, Move.FAIL): F,
    }
)


def move(current: CallStatus | None, event: Move) -> CallStatus:
    """The status a call in `current` (`None`: not recorded yet) goes to on `event`; `CallStateError` when the table
    has no such move."""
    after = TRANSITIONS.get((current, event))
    if after is None:
        allowed = sorted(m.value for (s, m) in TRANSITIONS if s == current)
        where = "a call not recorded yet" if current is None else f"a {current.value} call"
        raise CallStateError(f"{where} cannot {event.value}; it can: {', '.join(allowed) or 'nothing'}")
    return after


def allows(current: CallStatus | None, event: Move) -> bool:
    """Whether a call in `current` can take `event`."""
    return (current, event) in TRANSITIONS


def sources(event: Move) -> tuple[CallStatus, ...]:
    """The statuses of a recorded call that can take `event` (the allowed "from" statuses of its UPDATE)."""
    return tuple(s for (s, m) in TRANSITIONS if m == event and s is not None)


def target(event: Move) -> CallStatus:
    """The one status `event` leads to, from whichever status it is allowed."""
    (after,) = {after for (_, m), after in TRANSITIONS.items() if m == event}
    return after
