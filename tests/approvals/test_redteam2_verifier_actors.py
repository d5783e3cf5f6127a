"""A token checked by a verifier written to the SDK's `TokenVerifier` protocol (`--token-verifier`: introspection, an
app's own check) may carry an RFC 8693 `act` chain in its claims, as a JWT does. The approvals refuse the actors of
the requester's token as approvers only when the `Caller` names them; a caller whose actors are dropped lets an agent
acting for the requester approve the request its own call made."""

from __future__ import annotations

import pytest
from mcp.server.auth.provider import AccessToken

from askback.errors import InvalidTokenError
from askback.server.auth import SdkVerifierCheck

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"


class _Verifier:
    """Accepts one token, for alice, with an agent acting for her (a token-exchange token)."""

    def __init__(self, act: object) -> None:
        self.act = act

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != "exchanged":
            return None
        claims = {"iss": ISSUER, "sub": "alice", "act": self.act}
        return AccessToken(token=token, client_id="agent-client", subject="alice", scopes=[], claims=claims)


async def test_the_act_chain_a_token_verifier_returns_names_the_callers_actors() -> None:
    check = SdkVerifierCheck(_Verifier({"sub": "bob"}), "a test verifier", home_issuer=ISSUER)
    caller = await check.verify("exchanged")
    assert caller.principal == "alice"
    # bob acts for alice: he must be refused as an approver of the request her call makes.
    assert caller.actors == ("bob",)


async def test_an_act_claim_a_token_verifier_returns_that_is_not_an_object_is_refused() -> None:
    check = SdkVerifierCheck(_Verifier("bob"), "a test verifier", home_issuer=ISSUER)
    with pytest.raises(InvalidTokenError):
        await check.verify("exchanged")
