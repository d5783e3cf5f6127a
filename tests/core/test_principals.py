"""A principal is (issuer, subject), spelled by `principal_of` alone: bare for the home issuer's subjects (and names
no issuer vouches for), issuer-qualified otherwise, and never one spelling for two principals."""

from __future__ import annotations

import itertools

import pytest

from askback.core.caller import MAX_PRINCIPAL, Caller, principal_of, split_principal

HOME = "https://login.example.com"
OTHER = "https://other.example.com/realms/x"


def test_the_home_issuers_subjects_and_unvouched_names_stay_bare_and_another_issuers_are_qualified() -> None:
    assert principal_of("alice", HOME, home=HOME) == "alice"
    assert principal_of("alice", None, home=HOME) == "alice"
    assert principal_of("alice", None, home=None) == "alice"
    assert principal_of("alice", OTHER, home=HOME) == f"{OTHER}#alice"
    assert principal_of("alice", HOME, home=None) == f"{HOME}#alice"


def test_no_subject_of_one_issuer_is_spelled_as_a_principal_of_another() -> None:
    subjects = ["alice", f"{OTHER}#alice", "#alice", "a#b", f"{HOME}#alice"]
    issuers = [None, HOME, OTHER]
    spelled = {
        (issuer, subject): principal_of(subject, issuer, home=HOME)
        for issuer, subject in itertools.product(issuers, subjects)
    }
    for one, two in itertools.combinations(spelled, 2):
        # Only a bare name and the home issuer's same subject are one principal (the deployment's own namespace).
        same = {one[0], two[0]} == {None, HOME} and one[1] == two[1] and "#" not in one[1]
        assert (spelled[one] == spelled[two]) is same, (one, two)
    for (issuer, subject), name in spelled.items():
        assert split_principal(name)[1] == subject
        assert Caller(name, issuer=issuer).subject == subject


def test_an_issuer_with_a_fragment_an_empty_subject_or_a_name_wider_than_its_column_is_no_principal() -> None:
    with pytest.raises(ValueError):
        principal_of("alice", "https://x.example#frag", home=HOME)
    with pytest.raises(ValueError):
        principal_of("", HOME, home=HOME)
    assert principal_of("a" * MAX_PRINCIPAL, HOME, home=HOME) == "a" * MAX_PRINCIPAL
    with pytest.raises(ValueError):
        principal_of("a" * (MAX_PRINCIPAL - len(OTHER)), OTHER, home=HOME)
