"""Approvals as an extension: the app's store gets their schema, its settings their cap, and `flow.approve` its port
(one per caller, the requester being the caller's principal and its token's actors kept from approving); the
development sign-in is refused off loopback; the pages are mounted only where they are installed."""

from __future__ import annotations

import importlib.util
import secrets
from collections.abc import Callable
from typing import Any

import pytest

from _approvals import NOW, ONE_OF_THREE, ask
from askback import Askback
from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.service import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.core.caller import Caller
from askback.errors import ConfigurationError, InvalidParamsError, LimitReachedError
from askback.extension import Open

pytestmark = pytest.mark.anyio


async def nobody(request: Any) -> None:
    return None


def test_the_development_sign_in_is_refused_off_loopback_and_served_on_it() -> None:
    sign_in = DevelopmentSignIn(secrets.token_bytes(32))
    with pytest.raises(ConfigurationError, match="anyone sign in as anyone"):
        ApprovalsSetup(sign_in=sign_in, base_url="https://tools.example.com")
    assert ApprovalsSetup(sign_in=sign_in, base_url="http://127.0.0.1:8000").base_url == "http://127.0.0.1:8000"
    assert ApprovalsSetup(sign_in=nobody, base_url="https://tools.example.com/").base_url == "https://tools.example.com"


def test_the_pages_are_mounted_open_under_the_prefix_only_where_they_are_installed() -> None:
    setup = ApprovalsSetup(sign_in=nobody, base_url="https://tools.example.com", prefix="review/")
    if importlib.util.find_spec("askback.approvals.pages") is None:
        assert setup.mounts == ()
    else:
        (mount,) = setup.mounts
        assert (mount.path, mount.auth, mount.public_url) == ("/review", Open(), "https://tools.example.com")
    assert setup.status_url("apr_x") == "https://tools.example.com/review/requests/apr_x/status"


def test_a_directory_that_gives_a_group_one_string_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="collection of principals"):
        ApprovalsSetup(sign_in=nobody, base_url="https://t.example.com", directory={"ops": "bob"})
    setup = ApprovalsSetup(sign_in=nobody, base_url="https://t.example.com", directory={"ops": ["bob", "carol"]})
    assert setup.directory == {"ops": frozenset({"bob", "carol"})}


async def test_the_port_asks_as_the_caller_and_reports_the_state_with_its_status_page(
    make_settings: Callable[..., Any],
) -> None:
    setup = ApprovalsSetup(sign_in=nobody, base_url="https://tools.example.com")
    app = Askback("deploys", settings=make_settings(pending_approvals_per_principal=1), extensions=[setup])
    assert setup.ports.approvals is not None
    with pytest.raises(ConfigurationError, match="before their app started"):
        await setup.ports.approvals(Caller("alice")).request(ask(ONE_OF_THREE))
    async with app.running():
        port = setup.ports.approvals(Caller("alice", actors=("bob",)))
        state = await port.request(ask(ONE_OF_THREE, flow="f1"))
        assert state.status == "pending" and state.required == 1
        assert state.status_url == f"https://tools.example.com/approvals/requests/{state.id}/status"

        service = await setup.service()
        record = await service.get(state.id)
        assert record is not None and record.requester == "alice" and record.actors == ("bob",)
        refused = await service.decide(Approver("bob"), state.id, "approve", "", digest=record.digest)
        assert refused.refusal == "actor"
        # The setting's cap holds for the port.
        with pytest.raises(LimitReachedError):
            await port.request(ask(ONE_OF_THREE, arguments={"other": True}))

        withdrawn = await port.withdraw(state.id)
        assert withdrawn.status == "withdrawn"
        with pytest.raises(InvalidParamsError):
            await setup.ports.approvals(Caller("erin")).withdraw(state.id)


async def test_the_extension_subscribes_to_approval_events_once_started(
    make_settings: Callable[..., Any],
) -> None:
    setup = ApprovalsSetup(sign_in=nobody, base_url="https://tools.example.com")
    app = Askback("deploys", settings=make_settings(), extensions=[setup], clock=FrozenClock(at=NOW))
    with pytest.raises(ConfigurationError, match="before their app started"):
        setup.events()
    async with app.running():
        assert setup.ports.approvals is not None
        state = await setup.ports.approvals(Caller("alice")).request(ask(ONE_OF_THREE))
        events = setup.events(since=0)
        first = await anext(events)
        await events.aclose()  # type: ignore[attr-defined]
        assert (first.type, first.approval_id, first.requester, first.status) == (
            "approval.requested",
            state.id,
            "alice",
            "pending",
        )
