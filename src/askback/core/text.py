"""Text a database cannot store, found before it gets there.

JSON may carry a lone UTF-16 surrogate as an escape (`"\\udfff"`); UTF-8 cannot encode one, so SQLite's driver
raises on it. PostgreSQL's text type refuses a NUL character. Arguments and answers are checked at the edge
(`unstorable_text`: invalid params, or an answer asked again); whatever still reaches the audit trail is written
with such characters escaped (`storable`), so that the event about the bad request is never the one that is lost.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

__all__ = ["storable", "unstorable_text"]

_UNSTORABLE = re.compile("[\ud800-\udfff\x00]")


def unstorable_text(value: Any, where: str = "") -> str | None:
    """Where in `value` (a JSON value) there is text that cannot be stored, said in words (`project_name contains a
    NUL character`); `None` when there is none. The place is named, never the text itself."""
    if isinstance(value, str):
        found = _UNSTORABLE.search(value)
        if found is None:
            return None
        what = "a NUL character" if found.group() == "\x00" else "a lone UTF-16 surrogate (not valid Unicode)"
        return f"{where or 'the text'} contains {what}"
    if isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and _UNSTORABLE.search(key) is not None:
                return unstorable_text(key, f"a field name in {where or 'the object'}")
            problem = unstorable_text(item, f"{where}.{key}" if where else str(key))
            if problem is not None:
                return problem
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            problem = unstorable_text(item, f"{where or 'the list'}[{i}]")
            if problem is not None:
                return problem
    return None


def storable(text: str | None) -> str | None:
    """`text` with each character a database cannot store written as its escape (`\\udfff`, `\\x00`)."""
    if text is None or _UNSTORABLE.search(text) is None:
        return text
    return _UNSTORABLE.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)
