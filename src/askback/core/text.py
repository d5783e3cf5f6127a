"""Text a database cannot store, found before it gets there.

JSON may carry a lone UTF-16 surrogate as an escape (`"\\udfff"`); UTF-8 cannot encode one, so SQLite's driver
raises on it. PostgreSQL's text type refuses a NUL character. Arguments and answers are checked at the edge
(`unstorable_text`: invalid params, or an answer asked again); whatever still reaches the audit trail is written
with such characters escaped (`storable`), so that the event about the bad request is never the one that is lost.

Names from outside (a token's principal, an account's label, a token's scopes) are data shown to people in tables,
pages and logs: `name_problem` refuses one that is too long or holds a character that acts instead of showing
(controls, line breaks, bidirectional and zero-width format characters, every default-ignorable code point such as
the combining grapheme joiner and the variation selectors, surrogates, private-use or unassigned code points), and
one that can pass for another name or for nobody: white space at either end, a space other than the plain space
(U+0020, so `alice` and `alice` with a no-break space are not two people), a blank filler that shows as nothing
(Hangul fillers, the blank Braille pattern), no visible character at all, or a pile of more than `MAX_COMBINING_RUN`
combining marks on one character. Such a name never reaches the store at all.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from typing import Any

__all__ = ["name_problem", "storable", "unstorable_text"]

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


# Character categories a name may not hold: controls (Cc: ESC, CR, LF, NUL, C1), format (Cf: bidirectional overrides
# and isolates, zero-width characters, tags), line and paragraph separators, surrogates, private use, unassigned.
_NOT_IN_A_NAME = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"})
# Letters and symbols that show as blank space: the Hangul fillers and the blank Braille pattern.
_BLANK_FILLERS = frozenset("\u115f\u1160\u3164\uffa0\u2800")
# Unicode's Default_Ignorable_Code_Point (DerivedCoreProperties.txt): characters a renderer shows as nothing, some
# of them marks or letters (U+034F, U+17B4, variation selectors) that the categories above let through.
_DEFAULT_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e\u2060-\u206f"
    "\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0000-\U000e0fff]"
)
_COMBINING = frozenset({"Mn", "Mc", "Me"})
# No script needs more marks on one character than this; a pile of them draws over the lines around the name.
MAX_COMBINING_RUN = 3


def name_problem(name: str, *, what: str, limit: int) -> str | None:
    """Why `name` (called `what` in the answer) cannot be used as a name shown to people: empty, longer than
    `limit` characters, holding a control, line break, bidirectional or other invisible character, a space other
    than U+0020 or one at either end, a blank filler, no visible character, or more than `MAX_COMBINING_RUN`
    combining marks in a row; `None` when it can. The answer names the character's code point, never the name
    itself."""
    if not name:
        return f"{what} is empty"
    if len(name) > limit:
        return f"{what} is longer than {limit} characters"
    if name.strip() != name:
        return f"{what} begins or ends with white space"
    visible = False
    run = 0
    for char in name:
        category = unicodedata.category(char)
        if (
            category in _NOT_IN_A_NAME
            or char in _BLANK_FILLERS
            or (category == "Zs" and char != " ")
            or _DEFAULT_IGNORABLE.match(char)
        ):
            return f"{what} contains the character U+{ord(char):04X}, which names may not hold"
        if category in _COMBINING:
            run += 1
            if run > MAX_COMBINING_RUN:
                return f"{what} has more than {MAX_COMBINING_RUN} combining marks in a row"
        else:
            run = 0
            visible = visible or category != "Zs"
    if not visible:
        return f"{what} has no visible character"
    return None
