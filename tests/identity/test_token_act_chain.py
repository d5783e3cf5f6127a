"""Who acts for the caller: the RFC 8693 `act` chain of an access token read into `Caller.actors`, each actor a
principal spelled as the caller's is (`principal_of`), so that an approval is never approved by the agent that asked
for it. The claims are read by `caller_from_claims` (JWT and introspection alike); one token goes through a real
resource server against a loopback issuer."""

from __future__ import annotations

from typing import Any

import pytest
from _loopback_issuer import AUDIENCE, LoopbackIssuer

from askback.clock import FrozenClock
from askback.errors import InvalidTokenError
from askback.identity import ResourceServer
from askback.identity._jwt import MAX_ACTORS, caller_from_claims

pytestmark = pytest.mark.anyio

HOME = "https://login.example.com"


def actors(claims: dict[str, Any]) -> tuple[str, ...]:
    return caller_from_claims({"sub": "alice", **claims}, principal_claim="sub", issuer=HOME).actors


def chain(*subjects: str) -> dict[str, Any]:
    act: dict[str, Any] | None = None
    for subject in reversed(subjects):
        act = {"sub": subject, **({"act": act} if act is not None else {})}
    assert act is not None
    return act


def test_a_token_without_an_act_claim_names_no_actor() -> None:
    assert actors({}) == ()


def test_a_nested_act_chain_names_every_actor_the_current_one_first() -> None:
    assert actors({"act": chain("agent-7", "scheduler", "ops-bot")}) == ("agent-7", "scheduler", "ops-bot")


def test_an_actor_of_another_issuer_is_qualified_by_its_issuer() -> None:
    act = {"sub": "agent-7", "iss": "https://agents.example.com", "act": {"sub": "bob", "iss": HOME}}
    assert actors({"act": act}) == ("https://agents.example.com#agent-7", "bob")


def test_a_chain_as_deep_as_allowed_is_read_and_one_deeper_is_refused() -> None:
    assert len(actors({"act": chain(*(f"a{i}" for i in range(MAX_ACTORS)))})) == MAX_ACTORS
    with pytest.raises(InvalidTokenError, match=f"more than {MAX_ACTORS} actors"):
        actors({"act": chain(*(f"a{i}" for i in range(MAX_ACTORS + 1)))})


@pytest.mark.parametrize(
    "act",
    [
        "agent-7",
        ["agent-7"],
        {},
        {"sub": 7},
        {"sub": ""},
        {"sub": "agent\u202e7"},
        {"sub": "agent\n7"},
        {"sub": "x" * 300},
        {"sub": "agent-7", "iss": 5},
        {"sub": "agent-7", "iss": None},
        {"sub": "agent-7", "iss": ""},
        {"sub": "agent-7", "iss": "https://agents.example.com#frag"},
        {"sub": "agent-7", "act": "bob"},
        {"sub": "agent-7", "act": {"name": "bob"}},
    ],
)
def test_a_malformed_act_claim_makes_the_token_invalid(act: Any) -> None:
    with pytest.raises(InvalidTokenError, match="act claim"):
        actors({"act": act})


@pytest.mark.http
async def test_a_signed_token_with_an_act_chain_names_its_actors_on_the_caller(
    issuer: LoopbackIssuer, clock: FrozenClock
) -> None:
    resource = ResourceServer(issuer=issuer.issuer, audience=AUDIENCE, clock=clock)
    try:
        act = {"sub": "agent-7", "act": {"sub": "ops", "iss": "https://agents.example.com"}}
        caller = await resource.verify(issuer.access_token(clock.now(), act=act))
        refused = issuer.access_token(clock.now(), act={"sub": "agent\u202e7"})
        with pytest.raises(InvalidTokenError):
            await resource.verify(refused)
    finally:
        await resource.close()
    assert caller.principal == "alice"
    assert caller.actors == ("agent-7", "https://agents.example.com#ops")
