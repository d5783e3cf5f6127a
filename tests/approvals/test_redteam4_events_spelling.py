"""`ApprovalsSetup.events(requester=...)` keeps the events of one requester by comparing the name given with the
requester the event carries, which the approvals store in the home spelling of the approvers' sign-in. A caller whose
token a verifier checked with the home issuer's `iss` is `<issuer>#alice` (`flow.caller.principal`, what a handler
has to subscribe with), her request is stored, and its events carried, as `alice`: subscribed by her principal, she
never hears of her own request."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest
from mcp.server.auth.provider import AccessToken

from _approvals import NOW, ask, people_sign_in
from askback import Askback
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.server.http import bearer_check

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example.test"
BASE = "http://127.0.0.1:8000"
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"bob", "carol"}))


class _Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims={"iss": ISSUER})


async def test_a_verified_caller_subscribed_by_her_principal_hears_of_her_own_request(
    make_settings: Callable[..., Any],
) -> None:
    clock = FrozenClock(at=NOW)
    sign_in = people_sign_in(ISSUER, BASE, clock)
    setup = ApprovalsSetup(sign_in=sign_in, base_url=BASE)
    app = Askback("events-spelling", settings=make_settings(), clock=clock, extensions=[sign_in, setup])
    check = bearer_check(app, token_verifier=_Verifier())
    assert check is not None
    caller = await check.verify("alice")
    assert caller.principal == f"{ISSUER}#alice"

    async with app.running():
        service = await setup.service()
        made = await service.request(caller.principal, caller.actors, ask(TEAM, requester=caller.principal))
        heard = None
        # Her request's event is already in the log: a subscription from the first event finds it at once.
        with anyio.move_on_after(3):
            async for event in setup.events(requester=caller.principal, since=0):
                heard = event
                break
    assert heard is not None and heard.approval_id == made.id
