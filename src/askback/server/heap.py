"""The serving process's heap. Python's full garbage collection walks every object the process holds; an askback
server holds a few hundred thousand once started (SQLAlchemy, the SDK's and askback's pydantic models, their
validators), and one full collection then stops the event loop for tens of milliseconds, which every request under
way at that moment waits out. Frozen once the app has started (`gc.freeze`), those objects are left out of every
later collection: they live as long as the process anyway. Garbage made later is collected as before."""

from __future__ import annotations

import gc

__all__ = ["freeze_start_up_heap"]

_frozen = False


def freeze_start_up_heap(*, once: bool = True) -> bool:
    """Collect what is garbage now, then leave every object still alive out of later collections. With `once` (the
    app's start-up), only the first call in a process does it (a process that starts several apps, a test run, does
    not freeze what later apps leave behind). True when it froze."""
    global _frozen
    if once and _frozen:
        return False
    gc.collect()
    gc.freeze()
    _frozen = True
    return True
