"""`build_app(token_verifier=...)` (and `--token-verifier`) checks tokens with `SdkVerifierCheck` and no home issuer:
a verifier that returns the token's claims, `iss` among them, makes every subject and every actor a foreign principal
(`<iss>#<sub>`). The approvers' sign-in spells the people of its home issuer bare, so an agent acting for alice signs
in to the pages as `bob`, which is not the `<iss>#bob` the request keeps among its actors, and decides the request its
own call made; alice herself is not `<iss>#alice`, its requester."""

from __future__ import annotations

import pytest
from mcp.server.auth.provider import AccessToken

from _approvals import NOW, ask, service_on
from askback import Askback
from askback.approvals.records import Approver
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.core.caller import principal_of
from askback.db.migrate import all_components
from askback.server.http import bearer_check
from askback.store import Store

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"
# Anyone of the team but the requester may approve; the people sign-in at ISSUER spells them bare.
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}))


class _Verifier:
    """Accepts one token, for alice, with bob acting for her (a token-exchange token), returning its claims."""

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = {"iss": ISSUER, "sub": "alice", "act": {"sub": "bob"}}
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims=claims)


@pytest.mark.xfail(
    strict=True,
    reason="SdkVerifierCheck from build_app has no home issuer: actors are <iss>#bob, the pages' sign-in says bob",
)
async def test_an_actor_of_a_verified_token_cannot_approve_the_request_its_call_made(tmp_path: object) -> None:
    check = bearer_check(Askback("verifier-spelling"), token_verifier=_Verifier())
    assert check is not None
    caller = await check.verify("exchanged")
    # How the people sign-in of the same issuer spells bob (`PeopleSignIn`: home issuer = the tokens' issuer).
    bob = Approver(principal_of("bob", ISSUER, home=ISSUER), method="oidc")
    clock = FrozenClock(at=NOW)
    store = await Store.open(f"sqlite:///{tmp_path}/askback.db", migrate=True, components=all_components())
    try:
        service = service_on(store, clock)
        made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        decided = await service.decide(bob, made.id, "approve", "", digest=made.digest)
    finally:
        await store.close()
    assert not decided.counted
