"""`build_app(token_verifier=...)` (and `--token-verifier`) checks tokens with `SdkVerifierCheck`, which knows no home
issuer: a verifier that returns the token's claims, `iss` among them, spells every subject and actor as a foreign
principal (`<iss>#<sub>`), while the approvers' sign-in spells the people of its home issuer bare. The approvals keep
requesters and actors in the sign-in's home spelling, so that an agent acting for alice, signed in to the pages as
`bob`, is still an actor of the request its call made, alice is still its requester, and her status page is hers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken

from _approvals import NOW, ask, people_sign_in
from askback import Askback
from askback.approvals.records import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.core.caller import home_spelled, principal_of
from askback.server.http import bearer_check

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"
BASE = "http://127.0.0.1:8000"
# Anyone of the team but the requester may approve; the people sign-in at ISSUER spells them bare.
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}))


class _Verifier:
    """Accepts one token, for alice, with bob acting for her (a token-exchange token), returning its claims."""

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = {"iss": ISSUER, "sub": "alice", "act": {"sub": "bob"}}
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims=claims)


async def test_a_verified_tokens_requester_and_actor_are_the_people_the_sign_in_names(
    make_settings: Callable[..., Any],
) -> None:
    clock = FrozenClock(at=NOW)
    sign_in = people_sign_in(ISSUER, BASE, clock)
    setup = ApprovalsSetup(sign_in=sign_in, base_url=BASE)
    app = Askback("verifier-spelling", settings=make_settings(), clock=clock, extensions=[sign_in, setup])
    check = bearer_check(app, token_verifier=_Verifier())
    assert check is not None
    caller = await check.verify("exchanged")
    # The check spells them as another issuer's people: what the approvals must not compare as they are.
    assert caller.principal == f"{ISSUER}#alice" and caller.actors == (f"{ISSUER}#bob",)

    def signed_in(subject: str) -> Approver:
        return Approver(principal_of(subject, ISSUER, home=sign_in.home_issuer), method="oidc")

    async with app.running():
        service = await setup.service()
        made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        assert made.requester == "alice" and made.actors == ("bob",)
        by_actor = await service.decide(signed_in("bob"), made.id, "approve", "", digest=made.digest)
        by_requester = await service.decide(signed_in("alice"), made.id, "approve", "", digest=made.digest)
        assert (by_actor.counted, by_actor.refusal) == (False, "actor")
        assert (by_requester.counted, by_requester.refusal) == (False, "requester")
        # Her status page is hers, and the request her call made is the one her retry finds again.
        assert await service.of_requester("alice", made.id) is not None
        again = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        assert again.id == made.id
        by_carol = await service.decide(signed_in("carol"), made.id, "approve", "", digest=made.digest)
        assert by_carol.counted
        # And her decline withdraws it (here already decided: returned as it is, still hers).
        assert await service.withdraw(caller.principal, made.id) is not None


def test_only_the_home_issuers_qualified_people_lose_their_issuer() -> None:
    assert home_spelled(f"{ISSUER}#alice", ISSUER) == "alice"
    assert home_spelled("https://other.example#alice", ISSUER) == "https://other.example#alice"
    # A subject holding `#` stays qualified (bare, it would read as an issuer and a subject).
    assert home_spelled(f"{ISSUER}#a#b", ISSUER) == f"{ISSUER}#a#b"
    assert home_spelled("#alice", ISSUER) == "#alice"
    assert home_spelled(f"{ISSUER}#alice", None) == f"{ISSUER}#alice"
    assert home_spelled("alice", ISSUER) == "alice"
