"""The demo server's approval, in memory: `drop_database` waits for someone in sre other than the caller, the drop runs
once it is approved, and the demo server has none of it without where people reach it and the sign-in's secret."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from mcp import Client
from mcp_types import ElicitResult

from askback import Askback
from askback.approvals.records import Approver
from askback.approvals.setup import ApprovalsSetup
from askback.clock import FrozenClock
from askback.demo import build
from askback.demo.approving import approvals_from_env, demo_approvals
from askback.demo.mail import PUBLIC_URL_ENV, SIGN_IN_SECRET_ENV
from askback.errors import ConfigurationError
from askback.testing import text

pytestmark = pytest.mark.anyio

ERIN = Approver("erin", frozenset({"sre"}), "development")


@pytest.fixture
async def approvals() -> ApprovalsSetup:
    return demo_approvals("http://127.0.0.1:8000", secrets.token_urlsafe(32))


@pytest.fixture
async def demo_with_approvals(
    make_settings: Callable[..., Any], clock: FrozenClock, approvals: ApprovalsSetup
) -> AsyncIterator[Askback]:
    app = build(make_settings(), clock=clock, approvals=approvals)
    async with app.running():
        yield app


async def listed(app: Askback) -> dict[str, Any]:
    async with Client(app.mcp) as client:
        found = await client.call_tool("list_databases", {})
    assert isinstance(found.structured_content, dict)
    return found.structured_content


async def test_a_drop_waits_for_someone_in_sre_then_drops_once(
    demo_with_approvals: Askback, approvals: ApprovalsSetup
) -> None:
    asked: list[dict[str, Any]] = []

    async def erin_approves(context: Any, params: Any) -> ElicitResult:
        asked.append(params.model_dump(by_alias=True, exclude_none=True))
        service = await approvals.service()
        [waiting] = await service.decidable_by(ERIN)
        assert (await listed(demo_with_approvals))["drops"] == []  # nothing dropped while it waits
        decided = await service.decide(ERIN, waiting.id, "approve", "archived", digest=waiting.digest)
        assert decided.counted
        return ElicitResult(action="accept")

    async with Client(demo_with_approvals.mcp, elicitation_callback=erin_approves) as client:
        done = await client.call_tool("drop_database", {"name": "billing-legacy"})
        assert text(done) == "Dropped the database billing-legacy, approved by erin."
        [link] = asked
        assert link["mode"] == "url" and "/approvals/requests/" in link["url"] and "Drop a database" in link["message"]
        again = await client.call_tool("drop_database", {"name": "billing-legacy"})
    assert again.is_error and "there is no database 'billing-legacy'" in text(again)
    assert await listed(demo_with_approvals) == {
        "databases": ["web-frontend"],
        "drops": [{"name": "billing-legacy", "by": None, "approved_by": "erin"}],
    }


async def test_the_demo_server_has_no_drop_database_without_a_public_url_and_a_sign_in_secret(
    make_settings: Callable[..., Any],
) -> None:
    assert approvals_from_env({}) is None
    assert approvals_from_env({PUBLIC_URL_ENV: "http://127.0.0.1:8000"}) is None
    async with Client(build(make_settings()).mcp) as client:
        names = {tool.name for tool in (await client.list_tools()).tools}
    assert "drop_database" not in names and "delete_project" in names


def test_the_demo_approvals_refuse_a_short_secret_and_a_site_off_loopback() -> None:
    with pytest.raises(ConfigurationError, match=SIGN_IN_SECRET_ENV):
        approvals_from_env({PUBLIC_URL_ENV: "http://127.0.0.1:8000", SIGN_IN_SECRET_ENV: "short"})
    with pytest.raises(ConfigurationError, match="loopback"):
        demo_approvals("https://tools.example.com", secrets.token_urlsafe(32))
