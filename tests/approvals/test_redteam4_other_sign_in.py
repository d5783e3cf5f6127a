"""The approvals learn the home issuer from the sign-in (`getattr(sign_in, "home_issuer", None)`): only
`askback.identity.PeopleSignIn` has one. With any other sign-in docs/approval-pages.md allows (a callable naming the
principal, an `askback.web.pages.SignIn`, as behind a proxy that names the person), there is none, and
`ApprovalsSetup` takes none either: a token verifier that returns `iss` names the requester and her agent
`<iss>#alice` and `<iss>#bob`, the sign-in names the people `alice` and `bob`, and the approvals compare the two as
different people. The agent that acted for alice approves the request its call made, and alice approves her own."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken
from starlette.requests import Request

from _approvals import NOW, ask
from askback import Askback
from askback.approvals.policy import same_person
from askback.approvals.records import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.server.http import bearer_check

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"
BASE = "https://tools.example.com"
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}))


async def proxy_user(request: Request) -> str | None:
    """A sign-in of the deployment's own: the person a proxy in front of the pages signed in (its header)."""
    return request.headers.get("x-forwarded-user")


class _Verifier:
    """Accepts one token, for alice, with bob acting for her, returning its claims (`iss` among them)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        claims = {"iss": ISSUER, "sub": "alice", "act": {"sub": "bob"}}
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims=claims)


async def test_with_a_sign_in_of_ones_own_the_requester_and_her_agent_may_not_approve_her_request(
    make_settings: Callable[..., Any],
) -> None:
    clock = FrozenClock(at=NOW)
    setup = ApprovalsSetup(sign_in=proxy_user, base_url=BASE)
    app = Askback("own-sign-in", settings=make_settings(), clock=clock, extensions=[setup])
    check = bearer_check(app, token_verifier=_Verifier())
    assert check is not None
    caller = await check.verify("exchanged")

    async with app.running():
        service = await setup.service()
        made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        # The proxy's sign-in names the people of the deployment's one issuer as they are: `bob`, `alice`.
        by_actor = await service.decide(Approver("bob", method="sign-in"), made.id, "approve", "", digest=made.digest)
        by_self = await service.decide(Approver("alice", method="sign-in"), made.id, "approve", "", digest=made.digest)
    assert (by_actor.counted, by_actor.refusal) == (False, "actor")
    assert (by_self.counted, by_self.refusal) == (False, "requester")


async def test_a_sign_in_of_ones_own_given_the_home_issuer_keeps_the_requester_as_it_names_her(
    make_settings: Callable[..., Any],
) -> None:
    clock = FrozenClock(at=NOW)
    setup = ApprovalsSetup(sign_in=proxy_user, base_url=BASE, home_issuer=ISSUER)
    app = Askback("own-sign-in-home", settings=make_settings(), clock=clock, extensions=[setup])
    check = bearer_check(app, token_verifier=_Verifier())
    assert check is not None
    caller = await check.verify("exchanged")
    assert caller.principal == f"{ISSUER}#alice"

    async with app.running():
        service = await setup.service()
        made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        # Kept as the sign-in names her: her status page is hers there, and her agent is bob there.
        assert (made.requester, made.actors) == ("alice", ("bob",))
        assert await service.of_requester("alice", made.id) is not None
        by_actor = await service.decide(Approver("bob", method="sign-in"), made.id, "approve", "", digest=made.digest)
        by_carol = await service.decide(Approver("carol", method="sign-in"), made.id, "approve", "", digest=made.digest)
    assert (by_actor.counted, by_actor.refusal) == (False, "actor")
    assert by_carol.counted


def test_a_bare_name_is_refused_for_any_issuers_requester_of_that_name() -> None:
    # Without a home issuer, the pages cannot tell <iss>#alice from the alice who signs in: refusing her is safe.
    assert same_person("alice", f"{ISSUER}#alice")
    assert same_person(f"{ISSUER}#alice", "alice")
    assert not same_person("alice", f"{ISSUER}#bob")
    assert not same_person("https://a.example#alice", "https://b.example#alice")
