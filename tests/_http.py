"""Real `askback serve` processes on loopback, and helpers to drive flows against them and read back what happened.

A test starts the demo server with `served(...)` (real worker processes, a real SQLite file), drives rounds with
the official SDK client through `askback.testing.call_round` (one fresh connection per round, so consecutive rounds
can land on different workers), and checks the outcome through the read-only demo tools and the audit trail.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from mcp.server.request_state import AESGCMRequestStateCodec
from mcp_types import CallToolResult, ElicitResult

from askback.audit import AuditEvent, AuditFilter
from askback.core.plan import Next, Round
from askback.core.state import FlowState
from askback.store import Store
from askback.testing import call_round, drive_flow, free_port, serving

DEMO = "askback.demo:server"
# A flow of the demo takes at most three rounds; anything beyond this is a server asking in circles.
MAX_ROUNDS = 6


@dataclass(frozen=True)
class Served:
    """A running server: where it listens, the database it shares, and the state key ring it was given."""

    url: str
    database_url: str
    keys: tuple[str, ...] = field(repr=False)  # secrets: kept out of failure reports

    def codec(self) -> AESGCMRequestStateCodec:
        """The SDK's codec over this server's ring: unseals what the server sealed, seals as the server would."""
        return AESGCMRequestStateCodec(list(self.keys))


@contextmanager
def served(database_url: str, keys: Sequence[str], *, workers: int = 3, answers: str = "state") -> Iterator[Served]:
    """`askback serve askback.demo:server --workers N` on a free loopback port, until the block ends; `answers` is
    where a flow's answers wait between rounds (ASKBACK_ANSWERS)."""
    env = {"ASKBACK_STATE_KEYS": ",".join(keys), "ASKBACK_DATABASE_URL": database_url, "ASKBACK_ANSWERS": answers}
    with serving(DEMO, port=free_port(), workers=workers, env=env) as url:
        yield Served(url=url, database_url=database_url, keys=tuple(keys))


@dataclass(frozen=True)
class Step:
    """One request of a flow: what was sent with it (besides the arguments) and what came back."""

    responses: dict[str, ElicitResult] | None
    request_state: str | None
    round: Round


async def run_flow(
    url: str,
    tool: str,
    arguments: Mapping[str, Any],
    answers: Mapping[str, ElicitResult],
    *,
    token: str | None = None,
    request_state: str | None = None,
    responses: dict[str, ElicitResult] | None = None,
) -> list[Step]:
    """Drive a flow round by round until it completes or fails, answering each question key from `answers`.

    Start from the beginning, or from a round already received (`request_state` and the `responses` to it).
    """

    def answer(key: str, params: dict[str, Any]) -> ElicitResult:
        assert key in answers, f"{tool} asked {key!r}, which the test has no answer for"
        return answers[key]

    start = Next(responses, request_state)
    sent = await drive_flow(url, tool, arguments, answer, token=token, start=start, max_rounds=MAX_ROUNDS)
    return [Step(request.responses, request.request_state, rnd) for request, rnd in sent]


def flow_id(server: Served, request_state: str) -> str:
    """The askback flow id inside a sealed state (to find the flow's events in the audit trail)."""
    envelope = json.loads(server.codec().unseal(request_state))
    state = FlowState.decode(envelope["s"])
    assert state is not None, "the sealed state does not hold an askback flow"
    return state.flow_id


def request_number(event: AuditEvent) -> int:
    """Which request of its flow (1-based) wrote `event`: the questions of round r go out in the reply to request
    r, and their answers, and the completion that follows them, come with request r + 1."""
    assert event.round is not None, f"an event of a flow without a round: {event!r}"
    return event.round if event.event == "asked" else event.round + 1


async def audit(database_url: str, **filters: Any) -> list[AuditEvent]:
    """The audit events matching `filters` (the fields of `AuditFilter`), oldest first, read from the database."""
    store = await Store.open(database_url, migrate=False)
    try:
        return await store.audit_log.query(AuditFilter(**filters))
    finally:
        await store.close()


async def listing(url: str) -> dict[str, Any]:
    """What the demo has recorded: `deployments`, `deletions` and the `projects` that still exist."""
    data: dict[str, Any] = {}
    for tool in ("list_deployments", "list_projects"):
        rnd = await call_round(url, tool, {})
        assert isinstance(rnd.result, CallToolResult) and isinstance(rnd.result.structured_content, dict), rnd
        data.update(rnd.result.structured_content)
    return data


@dataclass(frozen=True)
class RawReply:
    """One `tools/call` sent as raw JSON-RPC over HTTP: the status, the serving instance and the body's bytes."""

    status: int
    instance: str | None
    body: bytes

    def message(self) -> dict[str, Any]:
        """The JSON-RPC message in the body (plain JSON, or the `data:` of a one-event SSE stream)."""
        text_ = self.body.decode()
        if not text_.lstrip().startswith("{"):
            text_ = "".join(line[5:].strip() for line in text_.splitlines() if line.startswith("data:"))
        message: dict[str, Any] = json.loads(text_)
        return message


async def post_call(
    http: httpx.AsyncClient,
    url: str,
    tool: str,
    arguments: Mapping[str, Any],
    *,
    token: str,
    responses: Mapping[str, ElicitResult] | None = None,
    request_state: str | None = None,
) -> RawReply:
    """A 2026-07-28 `tools/call` built by hand, always with the same JSON-RPC id, so that two copies of one round
    must get the same bytes back."""
    params: dict[str, Any] = {
        "name": tool,
        "arguments": dict(arguments),
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}, "url": {}}},
        },
    }
    if responses is not None:
        params["inputResponses"] = {k: v.model_dump(mode="json", exclude_none=True) for k, v in responses.items()}
    if request_state is not None:
        params["requestState"] = request_state
    reply = await http.post(
        url,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params},
        headers={
            "Authorization": f"Bearer {token}",
            "MCP-Protocol-Version": "2026-07-28",
            "Accept": "application/json, text/event-stream",
            "Mcp-Method": "tools/call",
            "Mcp-Name": tool,
        },
    )
    return RawReply(reply.status_code, reply.headers.get("x-askback-instance"), reply.content)
