"""Property tests: whatever a client sends to the demo's tools, the server stays well.

Raw JSON-RPC over real HTTP to a real `askback serve` (two workers, a real SQLite file). Arguments, `inputResponses`
and `requestState` are drawn by hypothesis: lone surrogates, NULs, very long strings, odd Unicode, wrong types,
missing and extra keys, wrong actions, real states of other rounds, tampered states. For every call: never a 5xx,
always a JSON-RPC answer, always an audit row for an asking tool, and never an effect the answers do not allow.

A few examples run with the suite; the deep run is `pytest -m fuzz --hypothesis-profile=deep` (10,000 examples).
"""

from __future__ import annotations

import json
import re
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from _http import Served, served
from askback.testing import call_round, state_of

pytestmark = [pytest.mark.http, pytest.mark.fuzz]

ASKING = ("delete_project", "deploy")
KEYS = ("confirm_project", "pick_env", "confirm_prod")

odd = st.sampled_from(
    ["\ud800", "\udfff", "a\udfffb", "\x00", "nul\x00", "\u202e", "🙂", "é", "\ufeff", "x" * 20_000, "", " "]
)
text = st.one_of(st.text(max_size=40), odd, st.builds(lambda a, b: a + b, st.text(max_size=10), odd))
scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), text)
value = st.recursive(
    scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3), max_leaves=4
)

project_id = st.one_of(st.sampled_from(["prj_99", "prj_42", "prj_0"]), text)
environment = st.one_of(st.sampled_from(["dev", "staging", "production"]), text)
arguments = st.one_of(
    st.fixed_dictionaries({"project_id": project_id}),
    st.fixed_dictionaries({"service": text}, optional={"environment": environment}),
    st.dictionaries(text, value, max_size=3),
    value,
)
content = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "project_name": st.one_of(st.sampled_from(["billing-legacy", "web-frontend"]), text),
            "environment": environment,
            "confirm": st.one_of(st.booleans(), value),
        },
    ),
    st.dictionaries(text, value, max_size=3),
    value,
)
answer = st.one_of(
    st.fixed_dictionaries({"action": st.sampled_from(["accept", "decline", "cancel"])}, optional={"content": content}),
    st.fixed_dictionaries({"action": text}, optional={"content": content}),
    value,
)
responses = st.one_of(st.none(), st.dictionaries(st.one_of(st.sampled_from(KEYS), text), answer, max_size=3), value)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("fuzz") / "db.sqlite"
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=2) as s:
        yield s


@pytest.fixture(scope="module")
def states(server: Served) -> list[str]:
    """Real sealed states of first rounds (the same user's and another's), for replays with drawn answers."""
    import anyio

    async def collect() -> list[str]:
        found = []
        for tool, args in [("delete_project", {"project_id": "prj_42"}), ("deploy", {"service": "fuzz"})]:
            for token in ("demo-fuzz", "demo-other"):
                found.append(state_of(await call_round(server.url, tool, args, token=token)))
        return found

    return anyio.run(collect)


def post(server: Served, tool: Any, args: Any, answers: Any, state: Any) -> httpx.Response:
    params: dict[str, Any] = {
        "name": tool,
        "arguments": args,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        },
    }
    if answers is not None:
        params["inputResponses"] = answers
    if state is not None:
        params["requestState"] = state
    # ensure_ascii: a lone surrogate goes on the wire as the JSON escape, as an attacker would send it.
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}, ensure_ascii=True)
    headers = {
        "Authorization": "Bearer demo-fuzz",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
    }
    if isinstance(tool, str) and re.fullmatch(r"[A-Za-z0-9_.\-]+", tool):
        headers["Mcp-Name"] = tool
    return httpx.post(server.url, content=body.encode(), headers=headers, timeout=60)


def message_of(reply: httpx.Response) -> dict[str, Any]:
    raw = reply.text
    if not raw.lstrip().startswith("{"):
        raw = "".join(line[5:].strip() for line in raw.splitlines() if line.startswith("data:"))
    parsed: dict[str, Any] = json.loads(raw)
    return parsed


def read(server: Served, sql: str) -> list[tuple[Any, ...]]:
    """Read the server's SQLite file directly (WAL: readers never block the server's writers)."""
    with sqlite3.connect(server.database_url.removeprefix("sqlite:///")) as db:
        return db.execute(sql).fetchall()


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tool=st.one_of(st.sampled_from([*ASKING, "list_projects"]), text),
    args=arguments,
    answers=responses,
    state_choice=st.one_of(st.none(), st.integers(0, 3), text),
    tamper=st.booleans(),
)
def test_no_input_makes_a_5xx_an_unaudited_call_or_an_unearned_effect(
    server: Served, states: list[str], tool: Any, args: Any, answers: Any, state_choice: Any, tamper: bool
) -> None:
    state = states[state_choice] if isinstance(state_choice, int) else state_choice
    if isinstance(state_choice, int) and tamper:
        state = state[:-4] + ("AAAA" if not state.endswith("AAAA") else "BBBB")
    before = read(server, "SELECT max(id) FROM askback_audit")[0][0]
    reply = post(server, tool, args, answers, state)
    assert reply.status_code < 500, reply.text[:500]
    if reply.status_code == 200 or reply.headers.get("content-type", "").startswith(("application/json", "text/")):
        message = message_of(reply)
        assert ("result" in message) != ("error" in message), message
        if "error" in message:
            assert message["error"]["code"] not in (-32042, -32002), message
    # A request whose params do not fit the tools/call schema at all (inputResponses a list, say) is refused by the
    # SDK's JSON-RPC layer before any tool or middleware sees it; every call that reaches the tool is audited.
    malformed = reply.status_code == 400 and "Invalid request parameters" in reply.text
    # A call that asked nothing and carried no state completes as a plain tool call, with no event (docs/audit.md):
    # `deploy` with its `environment` argument given and not production.
    result = message_of(reply).get("result") if reply.status_code == 200 else None
    plain = (
        state is None
        and isinstance(result, dict)
        and result.get("resultType") == "complete"
        and not result.get("isError")
    )
    if tool in ASKING and reply.status_code in (200, 400) and not malformed and not plain:
        after = read(server, "SELECT max(id) FROM askback_audit")[0][0]
        assert after is not None and (before is None or after > before), f"no audit row: {reply.text[:300]}"
    # An effect only with answers that allow it. The only real states here are first rounds: prj_42's deletion
    # (answered with its exact name, it may happen, as the fuzz user) and a deploy that asks for the environment
    # (no drawn answer reaches the production confirmation). prj_99 has no state, and answers without one are
    # asked again before any effect.
    assert read(server, "SELECT name, by FROM demo_deletions WHERE project_id = 'prj_99'") == []
    assert read(server, "SELECT service FROM demo_deployments WHERE environment = 'production'") == []
    deleted = read(server, "SELECT name, by FROM demo_deletions WHERE project_id = 'prj_42'")
    assert deleted in ([], [("web-frontend", "fuzz")])
