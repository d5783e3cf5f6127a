"""The groups a person's sign-in gives them: read from one claim of the verified ID token (`groups` unless the
settings name another, `ASKBACK_SIGNIN_GROUPS_CLAIM`), kept with their session, and given to the pages that ask
(`PeopleSignIn.person`), such as the approvals' pages, whose policies name groups that may approve.

The claim is data from outside: a JSON list of strings, each a name `askback.core.text.name_problem` accepts (no
control, line-break or bidirectional character, at most `MAX_GROUP_NAME` characters), at most `MAX_GROUPS` of them.
A value that is not a list gives no group at all (one precise reading: a lone string is not taken for a list of
one); a name that is not acceptable, and every name past the cap, is dropped and counted, so that the sign-in can
say how many were dropped without writing a name it refused into a log.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from askback.core.text import name_problem

__all__ = ["MAX_GROUPS", "MAX_GROUP_NAME", "ClaimedGroups", "claimed_groups", "groups_column", "groups_of_column"]

MAX_GROUPS = 64
MAX_GROUP_NAME = 255


@dataclass(frozen=True)
class ClaimedGroups:
    """What a groups claim gave: the `groups` kept, and how many values were `dropped` (`malformed`: the claim was
    there but was not a list)."""

    groups: frozenset[str]
    dropped: int = 0
    malformed: bool = False


def claimed_groups(value: object) -> ClaimedGroups:
    """The groups of a claim's `value` (absent: `None`), as the module's docstring says."""
    if value is None:
        return ClaimedGroups(frozenset())
    if not isinstance(value, list):
        return ClaimedGroups(frozenset(), dropped=1, malformed=True)
    kept: set[str] = set()
    dropped = 0
    for name in value:
        if not isinstance(name, str) or name_problem(name, what="a group", limit=MAX_GROUP_NAME) is not None:
            dropped += 1
        elif name in kept:
            continue
        elif len(kept) >= MAX_GROUPS:
            dropped += 1
        else:
            kept.add(name)
    return ClaimedGroups(frozenset(kept), dropped=dropped)


def groups_column(groups: Iterable[str]) -> str:
    """`groups` as the session row keeps them: a JSON list, sorted."""
    return json.dumps(sorted(groups), ensure_ascii=False, separators=(",", ":"))


def groups_of_column(value: str | None) -> frozenset[str]:
    """The groups a session row keeps (no group for a value that is not a list of names, which no sign-in writes)."""
    try:
        found = json.loads(value or "[]")
    except ValueError:
        return frozenset()
    if not isinstance(found, list):
        return frozenset()
    return frozenset(name for name in found if isinstance(name, str))
