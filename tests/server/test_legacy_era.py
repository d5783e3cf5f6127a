"""2025-11-25 clients from the same handlers: questions pushed as `elicitation/create` on the session (URL mode with
an `elicitationId`), while 2026-07-28 requests on the same endpoint stay stateless."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult

from askback import Askback, Confirm, Flow, Link
from askback.audit import AuditFilter
from askback.clock import FrozenClock
from askback.server.legacy import PendingPushes
from askback.testing import accept, answering, cancel, decline, free_port, serving, text
from infra import BOTH_ANSWER_MODES, BOTH_ANSWER_MODES_OVER_HTTP

pytestmark = [pytest.mark.anyio, BOTH_ANSWER_MODES]

connect = Link(key="connect", message="Connect your calendar.")
sure = Confirm(key="sure", message="Book it?")
CONNECTED: set[str] = set()
BOOKED: list[str] = []


def build(settings: Any, clock: FrozenClock) -> Askback:
    app = Askback("legacy-test", settings=settings, clock=clock)

    @app.tool(asks=[connect, sure])
    async def book(slot: str, flow: Flow) -> str:
        flow.link(connect, url="https://calendar.example.com/connect", done="ada" in CONNECTED)
        if not flow.ask(sure):
            return "Not booked."

        async def write() -> str:
            BOOKED.append(slot)
            return slot

        return f"Booked {await flow.once('book', write)}."

    return app


@pytest.fixture
async def app(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Askback]:
    CONNECTED.clear()
    BOOKED.clear()
    server = build(make_settings(), clock)
    async with server.running():
        yield server


def recording(answers: dict[str, Callable[[], ElicitResult]]) -> Any:
    seen: list[dict[str, Any]] = []

    async def callback(context: Any, params: Any) -> ElicitResult:
        data = params.model_dump(by_alias=True, exclude_none=True)
        seen.append(data)
        return answers[data["mode"]]()

    callback.seen = seen  # type: ignore[attr-defined]
    return callback


def connect_then_accept() -> ElicitResult:
    CONNECTED.add("ada")  # the hosted page did its work while the client waited
    return accept()


async def test_a_legacy_session_gets_the_questions_pushed_url_mode_with_an_elicitation_id(app: Askback) -> None:
    cb = recording({"url": connect_then_accept, "form": lambda: accept(confirm=True)})
    async with Client(app.mcp, mode="legacy", elicitation_callback=cb) as client:
        assert client.protocol_version == "2025-11-25"
        result = await client.call_tool("book", {"slot": "mon-9"})
    assert text(result) == "Booked mon-9."
    assert [q["mode"] for q in cb.seen] == ["url", "form"]
    assert cb.seen[0]["url"] == "https://calendar.example.com/connect"
    assert cb.seen[0]["elicitationId"]  # required by 2025-11-25 URL mode
    assert BOOKED == ["mon-9"]
    events = await (await app.store()).audit_log.query(AuditFilter(tool="book"))
    assert [e.event for e in events] == ["asked", "answered", "asked", "answered", "completed"]


async def test_a_legacy_accept_of_a_link_alone_is_not_proof(app: Askback) -> None:
    cb = recording({"url": accept, "form": decline})
    async with Client(app.mcp, mode="legacy", elicitation_callback=cb) as client:
        result = await client.call_tool("book", {"slot": "tue-10"}, read_timeout_seconds=30)
    # Never connected: the link is pushed again each round until the round cap ends the flow politely.
    assert text(result).startswith("Stopped:")
    assert {q["mode"] for q in cb.seen} == {"url"} and len(cb.seen) == app.settings.max_rounds
    assert BOOKED == []


async def test_a_legacy_decline_completes_with_the_message(app: Askback) -> None:
    CONNECTED.add("ada")
    cb = recording({"form": decline})
    async with Client(app.mcp, mode="legacy", elicitation_callback=cb) as client:
        result = await client.call_tool("book", {"slot": "wed-11"})
    assert text(result).startswith("Cancelled")
    assert BOOKED == []


async def test_a_legacy_client_without_elicitation_gets_32021(app: Askback) -> None:
    async with Client(app.mcp, mode="legacy") as client:
        with pytest.raises(MCPError) as err:
            await client.call_tool("book", {"slot": "thu-12"})
    assert err.value.error.code == -32021


@BOTH_ANSWER_MODES_OVER_HTTP
@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_demo_serves_both_eras_over_http_with_unchanged_tools(demo_url: str, mode: str) -> None:
    answers = answering(
        project_name=accept(project_name="billing-legacy"),
        environment=accept(environment="production"),
        confirm=accept(confirm=True),
    )
    async with (
        httpx2.AsyncClient(headers={"Authorization": "Bearer demo-lena"}) as http,
        Client(streamable_http_client(demo_url, http_client=http), mode=mode, elicitation_callback=answers) as c,
    ):
        deployed = await c.call_tool("deploy", {"service": f"svc-{mode}"})
        listing = await c.call_tool("list_deployments", {})
    assert text(deployed) == f"Deployed svc-{mode} to production."
    assert [list(a["requestedSchema"]["properties"]) for a in answers.asked] == [["environment"], ["confirm"]]
    assert {"service": f"svc-{mode}", "environment": "production", "by": "lena"} in listing.structured_content[  # type: ignore[index]
        "deployments"
    ]


async def test_a_legacy_answer_after_the_deadline_is_told_it_took_too_long(app: Askback, clock: FrozenClock) -> None:
    CONNECTED.add("ada")

    def slow_yes() -> ElicitResult:
        clock.advance(app.settings.flow_deadline + 1)  # the person answers after the deadline
        return accept(confirm=True)

    async with Client(app.mcp, mode="legacy", elicitation_callback=recording({"form": slow_yes})) as client:
        result = await client.call_tool("book", {"slot": "fri-13"})
    assert text(result).startswith("Expired")
    assert BOOKED == []
    events = await (await app.store()).audit_log.query(AuditFilter(tool="book"))
    assert events[0].at < events[-1].at  # each event carries the time it happened


async def test_a_pushed_question_never_answered_completes_too_late_at_the_flow_deadline(
    app: Askback, clock: FrozenClock
) -> None:
    CONNECTED.add("ada")
    pushed = anyio.Event()
    release = anyio.Event()

    async def never_answers(context: Any, params: Any) -> ElicitResult:
        pushed.set()
        await release.wait()  # the person never answers (released only so the test can close the client)
        return cancel()

    results: list[Any] = []
    async with Client(app.mcp, mode="legacy", elicitation_callback=never_answers) as client:

        async def call() -> None:
            results.append(await client.call_tool("book", {"slot": "sat-14"}))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await pushed.wait()
                assert app.pushes.total == 1
                clock.advance(app.settings.flow_deadline + 1)
        release.set()
    assert text(results[0]).startswith("Expired")
    assert BOOKED == []
    assert app.pushes.total == 0 and app.pushes.by_session == {}
    trail = await (await app.store()).audit_log.query(AuditFilter(tool="book"))
    assert [(e.event, e.outcome) for e in trail] == [("asked", None), ("completed", "expired")]


@pytest.mark.parametrize(
    ("cap", "one_session"),
    [("max_pending_pushes", False), ("max_pending_pushes_per_session", True)],
    ids=["process-cap-across-sessions", "session-cap-in-one-session"],
)
async def test_a_pushed_question_beyond_a_cap_completes_without_asking(
    make_settings: Callable[..., Any], clock: FrozenClock, cap: str, one_session: bool
) -> None:
    CONNECTED.add("ada")
    BOOKED.clear()
    app = build(make_settings(**{cap: 1}), clock)
    pushed = anyio.Event()
    release = anyio.Event()

    async def holds(context: Any, params: Any) -> ElicitResult:
        pushed.set()
        await release.wait()
        return decline()

    texts: list[str] = []
    async with app.running(), Client(app.mcp, mode="legacy", elicitation_callback=holds) as shared:

        async def call(slot: str) -> None:
            if one_session:
                texts.append(text(await shared.call_tool("book", {"slot": slot})))
                return
            async with Client(app.mcp, mode="legacy", elicitation_callback=holds) as client:
                texts.append(text(await client.call_tool("book", {"slot": slot})))

        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(call, "a")
                await pushed.wait()
                await call("b")  # the one pending question allowed is already held
                assert texts == [texts[0]] and texts[0].startswith("Not asked: too many questions")
                assert app.pushes.total == 1
                release.set()
        trail = await (await app.store()).audit_log.query(AuditFilter(tool="book", event="completed"))
    assert sorted(t.split(":")[0] for t in texts) == ["Cancelled", "Not asked"]
    assert sorted(e.outcome or "" for e in trail) == ["declined", "too_many_pending"]
    assert BOOKED == [] and app.pushes.total == 0


def test_the_pending_push_caps_count_per_session_and_per_process() -> None:
    pushes = PendingPushes(total=3, per_session=2)
    one, two = object(), object()
    with pushes.slot(one) as a, pushes.slot(one) as b, pushes.slot(one) as c:
        assert (a, b, c) == (True, True, False)
        with pushes.slot(two) as d, pushes.slot(two) as e:
            assert (d, e) == (True, False)  # the process holds 3: the cap, whatever the session
    assert pushes.total == 0 and pushes.by_session == {}


@pytest.mark.http
def test_over_http_a_second_pending_question_in_one_session_is_not_pushed(tmp_path: Path) -> None:
    env = {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "ASKBACK_MAX_PENDING_PUSHES_PER_SESSION": "1",
    }
    base = {"Accept": "application/json, text/event-stream", "Authorization": "Bearer demo-lena"}

    def rpc(id_: int | None, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if id_ is not None:
            body["id"] = id_
        return body

    def data_lines(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
        for line in lines:
            if line.startswith("data:") and line[5:].strip():
                yield json.loads(line[5:])

    with serving("askback.demo:server", port=free_port(), workers=1, env=env) as url, httpx.Client(timeout=30) as http:
        init = http.post(
            url,
            headers=base,
            json=rpc(
                1,
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"elicitation": {"form": {}}},
                    "clientInfo": {"name": "t", "version": "1"},
                },
            ),
        )
        session = {**base, "Mcp-Session-Id": init.headers["mcp-session-id"], "MCP-Protocol-Version": "2025-11-25"}
        http.post(url, headers=session, json=rpc(None, "notifications/initialized", {}))
        call = rpc(2, "tools/call", {"name": "deploy", "arguments": {"service": "held"}})
        with http.stream("POST", url, headers=session, json=call) as first:
            pushed = next(data_lines(first.iter_lines()))
            assert pushed["method"] == "elicitation/create"  # the first question waits for an answer never sent
            second = http.post(url, headers=session, json={**call, "id": 3}, timeout=10)
            (reply,) = [m for m in data_lines(iter(second.text.splitlines())) if m.get("id") == 3]
        assert reply["result"]["content"][0]["text"].startswith("Not asked: too many questions")
