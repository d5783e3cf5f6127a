"""Who may open an authorization link, decided from plain data before anything else happens."""

from __future__ import annotations

import pytest

from askback.accounts.links import Admitted, AuthorizationLink, Refused, admit_opener, digest, new_token

LINK = AuthorizationLink(
    token_digest=digest("t"),
    account_id="acc1",
    principal="alice",
    connection="gmail",
    flow_id="f1",
    created_at=1_000.0,
    expires_at=1_600.0,
)
USED = AuthorizationLink(**{**LINK.__dict__, "used_at": 1_100.0})


@pytest.mark.parametrize(
    ("link", "opener", "now", "reason"),
    [
        pytest.param(None, "alice", 1_100.0, "unknown", id="an unknown link"),
        pytest.param(LINK, None, 1_100.0, "not_signed_in", id="nobody signed in"),
        pytest.param(LINK, "mallory", 1_100.0, "other_user", id="another user"),
        pytest.param(USED, "mallory", 1_700.0, "other_user", id="another user learns nothing of the link's state"),
        pytest.param(USED, "alice", 1_100.0, "used", id="a used link"),
        pytest.param(LINK, "alice", 1_600.0, "expired", id="at its expiry"),
        pytest.param(LINK, "alice", 9_999.0, "expired", id="long after"),
    ],
)
def test_a_link_is_refused(link: AuthorizationLink | None, opener: str | None, now: float, reason: str) -> None:
    decision = admit_opener(link, opener=opener, now=now)
    assert isinstance(decision, Refused) and decision.reason == reason
    assert "Nothing was changed" in decision.message or reason in ("unknown", "not_signed_in")


def test_its_principal_opens_an_unused_link_in_time() -> None:
    assert admit_opener(LINK, opener="alice", now=1_599.9) == Admitted(LINK)


def test_a_token_is_random_and_only_its_digest_is_kept() -> None:
    first, second = new_token(), new_token()
    assert first != second and len(first) >= 43
    assert digest(first) != first and len(digest(first)) == 64 and digest(first) == digest(first)
