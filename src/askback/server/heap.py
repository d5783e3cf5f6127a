"""The serving process's heap. Python's full garbage collection walks every object the process holds; an askback
server holds a few hundred thousand once started (SQLAlchemy, the SDK's and askback's pydantic models, their
validators), and one full collection then stops the event loop for tens of milliseconds, which every request under
way at that moment waits out. Frozen while the app runs (`gc.freeze`), those objects are left out of every
collection; garbage made later is collected as before. When the last app of the process stops, they are handed back
to the collector (`gc.unfreeze`), so that a process that goes on (an embedding program, a test run) frees them."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["freeze_start_up_heap", "frozen_while_running"]

_running = 0


def freeze_start_up_heap() -> None:
    """Collect what is garbage now, then leave every object still alive out of later collections."""
    gc.collect()
    gc.freeze()


@contextmanager
def frozen_while_running(enabled: bool = True) -> Iterator[None]:
    """Around a started app: the first app of the process to start freezes the heap (others started meanwhile freeze
    nothing more: what they add stays collectable), and the last one to stop unfreezes it."""
    global _running
    if not enabled:
        yield
        return
    if _running == 0:
        freeze_start_up_heap()
    _running += 1
    try:
        yield
    finally:
        _running -= 1
        if _running == 0:
            gc.unfreeze()
