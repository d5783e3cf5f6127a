"""The agent runtime as the client under test of the official MCP conformance suite's client scenarios.

    python -m askback.runtime.conformance SERVER_URL

The suite (run by `interop/conformance-client.sh`) starts a scenario's mock server and runs this command with the
server's URL as the last argument, naming the scenario in `MCP_CONFORMANCE_SCENARIO`, the spec revision in
`MCP_CONFORMANCE_PROTOCOL_VERSION` and, for some scenarios, the calls to make in `MCP_CONFORMANCE_CONTEXT`
(`{"toolCalls": [{"name", "arguments"}]}`). It then judges what reached its server.

The client lists the server's tools, then calls the ones the context names or else every tool listed, each with
arguments made up from its input schema. Every call goes through `Runtime` (a SQLite store in a temporary folder)
and a `Callback` renderer that accepts every form question with each field's default or a plain value of its type,
so a call that asks goes on to completion on its connection. The plan and the answers are pure functions of what
the server listed and asked; only `main` does I/O. A call the server refuses is reported and the next one goes on
(the suite's checks are the verdict); anything else ends the process with a non-zero status.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from askback.errors import AskbackError, InvalidAnswerError
from askback.runtime.calls import Completed, Runtime
from askback.runtime.forms import validate
from askback.runtime.questions import Answer, ParkedQuestion
from askback.runtime.renderers import Callback

__all__ = ["ToolCall", "era_for", "form_answer", "main", "plan", "sample"]

log = logging.getLogger("askback.runtime.conformance")

PRINCIPAL = "conformance"
# Spec revisions spoken only through the `initialize` handshake.
_HANDSHAKE_REVISIONS = frozenset({"2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"})
_SAMPLE_STRINGS = {
    "email": "conformance@example.com",
    "date": "2026-07-28",
    "date-time": "2026-07-28T00:00:00Z",
    "uri": "https://example.com/",
}


@dataclass(frozen=True)
class ToolCall:
    """One call the client makes."""

    name: str
    arguments: Mapping[str, Any]


def era_for(revision: str | None) -> Literal["auto", "legacy"]:
    """The runtime's era for the suite's spec revision: handshake-era revisions only speak the handshake."""
    return "legacy" if revision in _HANDSHAKE_REVISIONS else "auto"


def sample(schema: Mapping[str, Any]) -> Any:
    """A plain value that fits `schema`: its default, its first choice, or a value of its type within its bounds.
    Objects get their required properties; a schema with no type (a `$ref`, say) gets a string: references are
    never followed."""
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    options = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(options, list) and options and isinstance(options[0], Mapping):
        return sample(options[0])
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "boolean":
        return True
    if kind in ("number", "integer"):
        low, high = schema.get("minimum"), schema.get("maximum")
        value = low if low is not None else (min(high, 1) if high is not None else 1)
        return int(value) if kind == "integer" else value
    if kind == "null":
        return None
    if kind == "array":
        items = schema.get("items")
        count = int(schema.get("minItems", 1 if isinstance(items, Mapping) else 0))
        return [sample(items) for _ in range(count)] if isinstance(items, Mapping) else []
    if kind == "object":
        properties: Mapping[str, Any] = schema.get("properties") or {}
        return {
            name: sample(spec if isinstance(spec, Mapping) else {})
            for name, spec in properties.items()
            if name in set(schema.get("required") or ())
        }
    text = _SAMPLE_STRINGS.get(str(schema.get("format")), "conformance")
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    if shortest is not None and len(text) < shortest:
        text = text.ljust(int(shortest), "x")
    if longest is not None:
        text = text[: int(longest)]
    return text


def form_answer(question: ParkedQuestion) -> Answer:
    """Accept a form with every field filled (its default, or a plain value of its type); a form that cannot be
    filled that way (or one whose schema cannot be rendered) is declined, and a question that is not a form is
    cancelled."""
    if question.mode != "form":
        return Answer("cancel")
    if question.problem is not None:
        return Answer("decline")
    properties: Mapping[str, Any] = (question.schema or {}).get("properties") or {}
    content = {name: sample(spec if isinstance(spec, Mapping) else {}) for name, spec in properties.items()}
    try:
        return Answer("accept", validate(question.schema, content))
    except InvalidAnswerError:
        return Answer("decline")


def plan(tools: Sequence[Mapping[str, Any]], context: Mapping[str, Any]) -> list[ToolCall]:
    """The calls to make: those the scenario's context names, else one call to every tool listed."""
    named = context.get("toolCalls")
    if isinstance(named, list):
        return [ToolCall(str(c["name"]), dict(c.get("arguments") or {})) for c in named if isinstance(c, Mapping)]
    return [ToolCall(str(t["name"]), sample({**(t.get("inputSchema") or {}), "type": "object"})) for t in tools]


async def _ask(question: ParkedQuestion) -> Answer:
    answer = form_answer(question)
    log.info("question %s answered %s", question.ref, answer.action)
    return answer


async def run(server: str, *, revision: str | None, context: Mapping[str, Any], folder: Path) -> None:
    """List the tools of the server at `server`, then make the planned calls through the runtime."""
    renderer = Callback(_ask, modes=frozenset({"form"}))
    async with await Runtime.open(
        f"sqlite:///{folder / 'runtime.db'}", renderers=[renderer], era=era_for(revision)
    ) as runtime:
        tools = await runtime.list_tools(server)
        print(f"tools/list: {', '.join(t['name'] for t in tools) or '(none)'}")
        for call in plan(tools, context):
            try:
                outcome = await runtime.call_tool(server, call.name, call.arguments, principal=PRINCIPAL)
            except AskbackError as exc:
                print(f"tools/call {call.name}: refused: {exc}")
                continue
            if isinstance(outcome, Completed):
                verdict = "error" if outcome.is_error else "complete"
                print(f"tools/call {call.name}: {verdict} after {outcome.rounds} round(s): {outcome.text}")
            else:
                print(
                    f"tools/call {call.name}: parked on round {outcome.round}, waiting on {', '.join(outcome.missing)}"
                )


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        print("usage: python -m askback.runtime.conformance SERVER_URL", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s")
    raw_context = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    context = json.loads(raw_context) if raw_context else {}
    revision = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION")
    log.info("scenario %s, revision %s", os.environ.get("MCP_CONFORMANCE_SCENARIO"), revision)
    with tempfile.TemporaryDirectory(prefix="askback-conformance-client-") as folder:
        anyio.run(lambda: run(args[-1], revision=revision, context=context, folder=Path(folder)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
