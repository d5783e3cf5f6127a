"""Over the MCP endpoint, the `Caller` a tool's round runs as is rebuilt from the SDK's access token
(`caller_of(get_access_token())`), and `access_token_of` keeps only the principal, scopes, client and issuer of the
bearer check's `Caller`: the actors of the token's `act` chain are dropped on the way. Every bearer check names them
(`SdkVerifierCheck`, the JWT check of `askback.identity`), and the approvals refuse them as approvers of the request
the call makes, but only when the port is given them: over HTTP, an agent acting for alice approves the request its
own call made."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path
from typing import Any

import pytest
from mcp.server.auth.provider import AccessToken
from mcp_types import InputRequiredResult
from tests.infra import serving_asgi

from askback import Approval, Askback, Flow, load_settings
from askback.approvals.records import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.server.http import build_app
from askback.testing import call_round

pytestmark = [pytest.mark.http, pytest.mark.anyio]

BASE = "http://127.0.0.1:8000"
TEAM = Approval(key="deploy", title="Deploy", principals=frozenset({"alice", "bob", "carol"}))


class _Verifier:
    """Accepts one token: alice's, with bob acting for her (a token-exchange token)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token != "bob-for-alice":
            return None
        claims = {"sub": "alice", "act": {"sub": "bob"}}
        return AccessToken(token=token, client_id="agent", subject="alice", scopes=[], claims=claims)


async def nobody(request: Any) -> None:
    return None


async def test_an_agent_acting_for_the_requester_over_http_may_not_approve_the_request_its_call_made(
    tmp_path: Path,
) -> None:
    settings = load_settings(database_url=f"sqlite:///{tmp_path}/askback.db", state_keys=secrets.token_urlsafe(32))
    setup = ApprovalsSetup(sign_in=nobody, base_url=BASE)
    app = Askback("actors-over-http", settings=settings, clock=FrozenClock(at=1_800_000_000.0), extensions=[setup])

    @app.tool()
    async def deploy(env: str, flow: Flow) -> str:
        await flow.approve(TEAM)
        return f"deployed {env}"

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        async with serving_asgi(build_app(app, token_verifier=_Verifier()), listener) as base:
            first = await call_round(f"{base}/mcp", "deploy", {"env": "production"}, token="bob-for-alice")
            assert isinstance(first.result, InputRequiredResult), first
            service = await setup.service()
            (made,) = await service.listing(expire=False)
            assert made.requester == "alice"
            # bob, signed in to the approvers' pages, acted on the token that made this request.
            by_actor = await service.decide(Approver("bob", method="oidc"), made.id, "approve", "", digest=made.digest)
    assert made.actors == ("bob",)
    assert (by_actor.counted, by_actor.refusal) == (False, "actor")
