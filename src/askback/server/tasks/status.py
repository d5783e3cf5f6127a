"""Where a task stands, and the moves it may make.

```
            +--------- input_required <--+
            |   (all answered)            | (the handler asks)
            v                             |
  create -> working -----------------------+
            |  \\
            |   +--> completed   (a tool result, `isError` included; also from input_required when its
            |                     flow deadline passes before the answers)
            +------> failed      (a JSON-RPC error)
            +------> cancelled   (tasks/cancel, from working or input_required)
```

A terminal status never changes again: a late answer, a second cancel or a run that finishes after a cancel leave it
as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

__all__ = ["TERMINAL", "TRANSITIONS", "TaskStatus", "can_move"]


class TaskStatus(StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

TRANSITIONS: Mapping[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.WORKING: frozenset(
        {TaskStatus.INPUT_REQUIRED, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.INPUT_REQUIRED: frozenset({TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.CANCELLED}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


def can_move(current: TaskStatus, to: TaskStatus) -> bool:
    """Whether a task in `current` may go to `to` (staying where it is always may)."""
    return to == current or to in TRANSITIONS[current]
