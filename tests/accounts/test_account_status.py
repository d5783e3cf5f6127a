"""Every change of a connected account's status, allowed or refused, from one table."""

from __future__ import annotations

import itertools

import pytest

from askback.accounts.status import TRANSITIONS, Event, Status, transition
from askback.errors import AccountStateError

P, A, E, R, X = Status.PENDING, Status.ACTIVE, Status.EXPIRED, Status.REVOKED, Status.ERROR

ALLOWED = [
    (None, "start", P),
    (P, "connected", A),
    (P, "failed", X),
    (P, "revoked", R),
    (A, "connected", A),
    (A, "refreshed", A),
    (A, "rejected", E),
    (A, "unreachable", X),
    (A, "revoked", R),
    (E, "connected", A),
    (E, "revoked", R),
    (R, "connected", A),
    (X, "connected", A),
    (X, "refreshed", A),
    (X, "rejected", E),
    (X, "unreachable", X),
    (X, "revoked", R),
]


@pytest.mark.parametrize(("before", "event", "after"), ALLOWED, ids=lambda v: str(v))
def test_an_allowed_change_lands_on_its_status(before: Status | None, event: str, after: Status) -> None:
    assert transition(before, Event(event)) is after


EVERY_PAIR = list(itertools.product([None, *Status], Event))
REFUSED = [(s, e) for s, e in EVERY_PAIR if (s, e.value) not in {(b, ev) for b, ev, _ in ALLOWED}]


@pytest.mark.parametrize(("before", "event"), REFUSED, ids=lambda v: str(v))
def test_a_change_not_in_the_table_is_refused_naming_what_is_allowed(before: Status | None, event: Event) -> None:
    with pytest.raises(AccountStateError, match=f"cannot take the event '{event.value}'"):
        transition(before, event)


def test_the_table_is_exactly_the_allowed_list() -> None:
    assert {(s, e.value, t) for (s, e), t in TRANSITIONS.items()} == set(ALLOWED)
    assert len(ALLOWED) + len(REFUSED) == len(EVERY_PAIR) == 6 * 7


def test_no_account_turns_active_without_a_credential_being_stored() -> None:
    into_active = {e for (s, e), t in TRANSITIONS.items() if t is A}
    assert into_active == {Event.CONNECTED, Event.REFRESHED}


def test_a_revoked_or_expired_account_comes_back_only_by_connecting_again() -> None:
    for status in (R, E):
        assert {e for (s, e) in TRANSITIONS if s is status} <= {Event.CONNECTED, Event.REVOKED}
    with pytest.raises(AccountStateError, match="in EXPIRED"):
        transition(E, Event.REFRESHED)
