"""With `ASKBACK_AUTH_PRINCIPAL_CLAIM` set to another claim than `sub` (docs/auth.md suggests `preferred_username` for
Keycloak, `oid` for Entra), a token's principal and the people the approvers' sign-in names are spelled by that claim,
while `actors_of` spells every actor of the `act` chain by its `sub` alone, even when the actor's object carries the
principal claim too (RFC 8693 section 4.1: its members are claims that identify the actor). The actor then never
compares equal to the person who signs in to the pages, and an agent acting for the requester approves the request
its call made."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from _approvals import NOW, ask, service_on
from askback.approvals.records import Approver
from askback.approvals.service import ApprovalService
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.core.caller import principal_of
from askback.db.migrate import all_components
from askback.errors import InvalidTokenError
from askback.identity._jwt import caller_from_claims
from askback.store import Store

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"
CLAIM = "preferred_username"
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}))


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[ApprovalService]:
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        yield service_on(store, FrozenClock(at=NOW))
    finally:
        await store.close()


async def test_an_actor_is_spelled_by_the_principal_claim_the_sign_in_names_people_by(
    service: ApprovalService,
) -> None:
    # alice's token, exchanged for bob's agent: the act object names bob by his sub and by the principal claim.
    claims = {
        "iss": ISSUER,
        "sub": "5f1c0e1a-alice",
        CLAIM: "alice",
        "act": {"sub": "9b2c7d44-bob", CLAIM: "bob"},
    }
    caller = caller_from_claims(claims, principal_claim=CLAIM, issuer=ISSUER)
    assert caller.principal == "alice"
    made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
    # bob signs in to the pages: the sign-in names him by the same claim of his ID token (PeopleSignIn._finish).
    bob = Approver(principal_of("bob", ISSUER, home=ISSUER), method=f"oidc {ISSUER}")
    decided = await service.decide(bob, made.id, "approve", "", digest=made.digest)
    assert (decided.counted, decided.refusal) == (False, "actor")


def test_an_actor_not_named_by_the_principal_claim_makes_the_token_invalid() -> None:
    # An actor askback cannot name as the sign-in names people is one it could not refuse as an approver.
    claims = {"iss": ISSUER, "sub": "5f1c0e1a-alice", CLAIM: "alice", "act": {"sub": "9b2c7d44-bob"}}
    with pytest.raises(InvalidTokenError, match="preferred_username"):
        caller_from_claims(claims, principal_claim=CLAIM, issuer=ISSUER)
    # With sub as the principal claim, the same actor is named by its sub, as before.
    plain = caller_from_claims(claims, principal_claim="sub", issuer=ISSUER)
    assert plain.actors == ("9b2c7d44-bob",)
