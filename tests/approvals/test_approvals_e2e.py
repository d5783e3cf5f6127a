"""Approvals end to end: `askback serve` with two workers on one SQLite file, a caller on the official SDK client over
HTTP, and approvers on the hosted pages with the development sign-in. The caller gets a link to the request's status
page while it waits; an approver outside the policy, or the requester, cannot decide; once someone in `sre` approves,
the caller's next round runs the effect once, on whichever worker serves it; a denial completes the call naming who
denied it and why; a call made again with other arguments is another request."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from mcp_types import ElicitResult, InputRequiredResult

from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.pages import CSRF_COOKIE
from askback.testing import call_round, free_port, serving, state_of, text
from infra import ROOT

pytestmark = [pytest.mark.http, pytest.mark.anyio]

KEY = "askback.approval.drop"
SECRET = secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Served:
    url: str  # the MCP endpoint
    base: str  # where people reach the pages
    effects: Path


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("approvals-e2e")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    env = {
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'askback.db'}",
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(32),
        "ASKBACK_DEMO_AUTH": "true",
        "APPROVALS_TEST_SIGNIN_SECRET": SECRET,
        "APPROVALS_TEST_BASE_URL": base,
        "APPROVALS_TEST_EFFECTS": str(tmp / "effects.txt"),
    }
    with serving("tests.fixtures.approvals_server:app", port=port, workers=2, env=env, cwd=str(ROOT)) as url:
        yield Served(url, base, tmp / "effects.txt")


def effects(served: Served) -> list[str]:
    return served.effects.read_text().split() if served.effects.exists() else []


async def page(served: Served, user: str, path: str, form: dict[str, str] | None = None) -> httpx.Response:
    """`path` opened (or `form` posted) by `user`, signed in with the development sign-in."""
    token = secrets.token_urlsafe(32)
    cookies = {DevelopmentSignIn.COOKIE: DevelopmentSignIn(SECRET.encode()).cookie_value(user), CSRF_COOKIE: token}
    async with httpx.AsyncClient(base_url=served.base, cookies=cookies, timeout=30) as http:
        if form is None:
            return await http.get(path)
        return await http.post(path, data={**form, "csrf": token}, headers={"Origin": served.base})


async def shown_digest(served: Served, user: str, status_url: str) -> str:
    """The digest the request's page shows `user` in its form (the page must offer them one)."""
    opened = await page(served, user, status_url.removeprefix(served.base).removesuffix("/status"))
    assert opened.status_code == 200, opened.text
    found = re.search(r'name="digest" value="([0-9a-f]{64})"', opened.text)
    assert found is not None, opened.text
    return found.group(1)


async def send_decision(
    served: Served, user: str, status_url: str, decision: str, reason: str, digest: str
) -> httpx.Response:
    request_path = status_url.removeprefix(served.base).removesuffix("/status")
    return await page(served, user, request_path, {"digest": digest, "decision": decision, "reason": reason})


async def decide(served: Served, user: str, status_url: str, decision: str, reason: str) -> httpx.Response:
    digest = await shown_digest(served, user, status_url)
    return await send_decision(served, user, status_url, decision, reason, digest)


async def waiting(served: Served, name: str) -> tuple[str, str]:
    """alice asks to drop `name`: the round's sealed state and the status link it asks her to open."""
    first = await call_round(served.url, "drop_database", {"name": name, "reason": "cleanup"}, token="demo-alice")
    assert isinstance(first.result, InputRequiredResult), first
    request = (first.result.input_requests or {})[KEY]
    params = request.params  # type: ignore[union-attr]
    assert params.mode == "url" and "Drop a database" in params.message  # type: ignore[union-attr]
    return state_of(first), str(params.url)  # type: ignore[union-attr]


async def again(served: Served, name: str, state: str, action: str = "accept") -> object:
    responses = {KEY: ElicitResult(action=action)}  # type: ignore[arg-type]
    return await call_round(
        served.url,
        "drop_database",
        {"name": name, "reason": "cleanup"},
        token="demo-alice",
        responses=responses,
        request_state=state,
    )


async def test_the_call_waits_on_a_link_goes_on_once_approved_and_drops_once(served: Served) -> None:
    state, status_url = await waiting(served, "billing")
    assert status_url.startswith(f"{served.base}/approvals/requests/") and status_url.endswith("/status")

    status = await page(served, "alice", status_url.removeprefix(served.base))
    assert status.status_code == 200 and "Drop a database" in status.text
    assert (await page(served, "bob", status_url.removeprefix(served.base))).status_code == 404

    still = await again(served, "billing", state)
    assert isinstance(still.result, InputRequiredResult)  # type: ignore[attr-defined]
    state = state_of(still)  # type: ignore[arg-type]
    assert effects(served) == []

    refused = await page(served, "zed", status_url.removeprefix(served.base).removesuffix("/status"))  # not in sre
    assert refused.status_code == 404
    own = await page(served, "alice", status_url.removeprefix(served.base).removesuffix("/status"))
    assert 'name="digest"' not in own.text  # the requester gets no form
    approved = await decide(served, "bob", status_url, "approve", "planned cleanup")
    assert approved.status_code == 200, approved.text
    assert "goes on" in approved.text, " ".join(re.sub(r"<[^>]+>", " ", approved.text.split("<main>")[-1]).split())

    done = await again(served, "billing", state)
    replay = await again(served, "billing", state)
    assert text(done.result) == text(replay.result) == "Dropped billing, approved by bob."  # type: ignore[attr-defined]
    assert effects(served) == ["billing"]


async def test_a_denial_completes_the_call_naming_who_denied_it_and_why(served: Served) -> None:
    state, status_url = await waiting(served, "orders")
    denied = await decide(served, "carol", status_url, "deny", "not during the freeze")
    assert denied.status_code == 200, denied.text
    ended = await again(served, "orders", state)
    said = text(ended.result)  # type: ignore[attr-defined]
    assert said.startswith("Denied:") and "carol" in said and "not during the freeze" in said
    assert "orders" not in effects(served)


async def test_declining_the_link_withdraws_the_request_and_the_approvers_page_says_so(served: Served) -> None:
    state, status_url = await waiting(served, "scratch")
    ended = await again(served, "scratch", state, action="decline")
    assert "withdrawn" in text(ended.result).lower() or "stopped" in text(ended.result).lower()  # type: ignore[attr-defined]
    late = await decide_late(served, "bob", status_url)
    assert "withdrawn" in late.lower()
    assert "scratch" not in effects(served)


async def decide_late(served: Served, user: str, status_url: str) -> str:
    opened = await page(served, user, status_url.removeprefix(served.base).removesuffix("/status"))
    return " ".join(re.sub(r"<[^>]+>", " ", opened.text).split())


async def test_a_tool_annotated_destructive_waits_for_the_gates_approval_without_code_in_its_handler(
    served: Served,
) -> None:
    warmed = await call_round(served.url, "warm_cache", {"region": "eu"}, token="demo-alice")
    assert text(warmed.result) == "Warmed eu." and "warmed-eu" in effects(served)

    first = await call_round(served.url, "purge_cache", {"region": "eu"}, token="demo-alice")
    assert isinstance(first.result, InputRequiredResult), first
    params = (first.result.input_requests or {})["askback.approval.destructive"].params  # type: ignore[union-attr]
    assert "A destructive tool" in params.message  # type: ignore[union-attr]
    assert "purged-eu" not in effects(served)
    status_url = str(params.url)  # type: ignore[union-attr]
    carol = await page(served, "carol", status_url.removeprefix(served.base).removesuffix("/status"))
    assert carol.status_code == 404  # the gate names bob only
    assert (await decide(served, "bob", status_url, "approve", "ok")).status_code == 200
    responses = {"askback.approval.destructive": ElicitResult(action="accept")}
    done = await call_round(
        served.url,
        "purge_cache",
        {"region": "eu"},
        token="demo-alice",
        responses=responses,
        request_state=state_of(first),
    )
    assert text(done.result) == "Purged eu."
    assert effects(served).count("purged-eu") == 1
