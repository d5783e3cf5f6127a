"""The probe's plan: `probe(tool, arguments)` is a generator that yields each `Request` to send, is sent back
the `Response`, decides the next request from what came back, and returns everything as a `Recorded`. It does
no I/O and never loops: every request it can make is written out here, at most once each."""

from __future__ import annotations

import itertools
import json
from collections.abc import Generator, Mapping
from dataclasses import replace
from typing import Any, Literal

from mcp.shared.inbound import encode_header_value, find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map

from askback.core.capabilities import MRTR_REVISION
from askback.errors import ProbeError
from askback.tools.check._wire import Branch, Exchange, Recorded, Request, Response, clip, compact

PROTOCOL_VERSION = MRTR_REVISION
# Header values for the R3 check: the previous revision (what a confused client or gateway would send) and one
# that no server supports. Both differ from the `_meta` version, so both must be refused with HTTP 400.
MISMATCHED_VERSIONS = ("2025-11-25", "2099-01-01")

BOTH_MODES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
FORM_ONLY: dict[str, Any] = {"elicitation": {"form": {}}}
URL_ONLY: dict[str, Any] = {"elicitation": {"url": {}}}
NOTHING: dict[str, Any] = {}


_MAX_TOOL_PAGES = 10
_NOT_AN_OPTION = "askback-check: not one of the options"
_FORMAT_EXAMPLES = {
    "email": "probe@example.com",
    "uri": "https://example.com/",
    "date": "2026-07-28",
    "date-time": "2026-07-28T00:00:00Z",
}
_NOT_ASKED_AGAIN = "a fresh round one did not ask this time (see its answer)"


class _Requests:
    """Builds the plan's requests: the envelope every request carries (R1, R3), headers mirrored from the body,
    and a new JSON-RPC id each time."""

    def __init__(self, tool: str, arguments: Mapping[str, Any]) -> None:
        self.tool = tool
        self.arguments = dict(arguments)
        self.param_headers: dict[str, str] = {}
        self._ids = itertools.count(1)

    def learn_schema(self, schema: Mapping[str, Any] | None) -> None:
        # Conforming clients mirror `x-mcp-header` arguments into `Mcp-Param-*` headers; a server may insist.
        if schema is not None and find_invalid_x_mcp_header(schema) is None:
            self.param_headers = mcp_param_headers(x_mcp_header_map(schema), self.arguments)

    def _envelope(
        self, method: str, params: dict[str, Any], capabilities: Mapping[str, Any], version: str
    ) -> tuple[dict[str, Any], dict[str, str]]:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": PROTOCOL_VERSION,
            "io.modelcontextprotocol/clientCapabilities": dict(capabilities),
            "io.modelcontextprotocol/clientInfo": {"name": "askback-check", "version": "1"},
        }
        body = {"jsonrpc": "2.0", "id": next(self._ids), "method": method, "params": params}
        headers = {
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": version,
            "Mcp-Method": method,
        }
        return body, headers

    def list_tools(self, cursor: str | None = None, *, header_version: str = PROTOCOL_VERSION) -> Request:
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        body, headers = self._envelope("tools/list", params, NOTHING, header_version)
        summary = f"#{body['id']} tools/list"
        if header_version != PROTOCOL_VERSION:
            summary += f" with header MCP-Protocol-Version: {header_version}, _meta {PROTOCOL_VERSION}"
        return Request(body, headers, summary)

    def call(
        self,
        capabilities: Mapping[str, Any],
        *,
        responses: Mapping[str, Any] | None = None,
        state: str | None = None,
        state_note: str = "echoed",
    ) -> Request:
        params: dict[str, Any] = {"name": self.tool, "arguments": self.arguments}
        if responses is not None:
            params["inputResponses"] = dict(responses)
        if state is not None:
            params["requestState"] = state
        body, headers = self._envelope("tools/call", params, capabilities, PROTOCOL_VERSION)
        headers["Mcp-Name"] = encode_header_value(self.tool)
        headers.update(self.param_headers)
        summary = f"#{body['id']} tools/call {self.tool} declaring {compact(capabilities)}"
        if responses is not None:
            summary += f", inputResponses {compact(responses)}"
        if state is not None:
            summary += f", requestState {state_note} ({len(state)} chars)"
        return Request(body, headers, summary)


def probe(tool: str, arguments: Mapping[str, Any]) -> Generator[Request, Response, Recorded]:
    """The probe's plan: yields requests, is sent their responses, returns what it saw. No I/O of its own.

    Raises `ProbeError` when the server cannot be probed at all (unreachable, refused, not an MCP endpoint, or
    no tool of that name); anything else it answers, however wrong, is recorded for `evaluate` to judge.
    """
    build = _Requests(tool, arguments)
    listing: list[Exchange] = []
    schema: Mapping[str, Any] | None = None
    names: list[str] = []
    listed = True
    cursor: str | None = None
    for _ in range(_MAX_TOOL_PAGES):
        request = build.list_tools(cursor)
        response = yield request
        if not listing:
            _refuse_unusable(response, "tools/list", first_contact=True)
        listing.append(Exchange(request, response))
        if response.result is None:
            listed = False
            break
        for entry in response.result.get("tools") or []:
            if isinstance(entry, Mapping) and isinstance(entry.get("name"), str):
                names.append(entry["name"])
                if entry["name"] == tool and isinstance(entry.get("inputSchema"), Mapping):
                    schema = entry["inputSchema"]
        next_cursor = response.result.get("nextCursor")
        if tool in names or not isinstance(next_cursor, str) or not next_cursor:
            break
        cursor = next_cursor
    if listed and tool not in names:
        shown = ", ".join(names[:20]) + (", ..." if len(names) > 20 else "")
        raise ProbeError(
            f"the server lists no tool named {tool!r} (it lists: {shown or 'none'}); pass one of them with --tool"
        )
    build.learn_schema(schema)

    request = build.call(BOTH_MODES)
    round_one = Exchange(request, (yield request))
    _refuse_unusable(round_one.response, "tools/call", first_contact=False)
    recorded = Recorded(tool, dict(arguments), schema, tuple(listing), round_one)

    if round_one.response.elicitations():
        request = build.call(FORM_ONLY)
        form_only = Exchange(request, (yield request))
        request = build.call(URL_ONLY)
        url_only = Exchange(request, (yield request))
        request = build.call(NOTHING)
        no_capabilities = Exchange(request, (yield request))

        tampered: Exchange | None = None
        state = round_one.response.request_state
        if state is not None:
            # Declines only: a server that wrongly takes this state must still have nothing to act on.
            declines = {key: {"action": "decline"} for key in round_one.response.elicitations()}
            changed, where = tamper(state)
            request = build.call(BOTH_MODES, responses=declines, state=changed, state_note=f"with char {where} changed")
            tampered = Exchange(request, (yield request))

        declined = yield from _answer_all(build, "decline")
        cancelled = yield from _answer_all(build, "cancel")
        invalid = yield from _answer_invalid(build)
        recorded = replace(
            recorded,
            form_only=form_only,
            url_only=url_only,
            no_capabilities=no_capabilities,
            tampered=tampered,
            declined=declined,
            cancelled=cancelled,
            invalid=invalid,
        )

    mismatched: list[Exchange] = []
    for version in MISMATCHED_VERSIONS:
        request = build.list_tools(header_version=version)
        mismatched.append(Exchange(request, (yield request)))
    return replace(recorded, mismatched_version=tuple(mismatched))


def _answer_all(build: _Requests, action: Literal["decline", "cancel"]) -> Generator[Request, Response, Branch]:
    request = build.call(BOTH_MODES)
    first = Exchange(request, (yield request))
    asked = first.response.elicitations()
    if not asked:
        return Branch(first, why_not=_NOT_ASKED_AGAIN)
    answers = {key: {"action": action} for key in asked}
    request = build.call(BOTH_MODES, responses=answers, state=first.response.request_state)
    return Branch(first, Exchange(request, (yield request)))


def _answer_invalid(build: _Requests) -> Generator[Request, Response, Branch]:
    request = build.call(BOTH_MODES)
    first = Exchange(request, (yield request))
    for key, (mode, params) in first.response.elicitations().items():
        if mode != "form":
            continue
        made = invalid_content(params.get("requestedSchema"))
        if made is None:
            return Branch(first, why_not=f"the form question {key} has no property of a type to get wrong")
        content, what = made
        # Only this key is answered: the others, left out, must be asked again too, never taken as answered.
        answers = {key: {"action": "accept", "content": content}}
        request = build.call(BOTH_MODES, responses=answers, state=first.response.request_state)
        return Branch(first, Exchange(request, (yield request)), key=key, sent=what)
    if first.response.elicitations():
        return Branch(first, why_not="round one asks in URL mode only: there is no form answer to get wrong")
    return Branch(first, why_not=_NOT_ASKED_AGAIN)


def _refuse_unusable(response: Response, method: str, *, first_contact: bool) -> None:
    """Stop before judging anything when the server cannot be probed at all (exit status 2, not a failed check).

    After a first contact that worked, only a refused token stops the probe: a timeout or a broken answer to the
    call itself is the server's to answer for, in the checks."""
    if response.status in (401, 403):
        hint = "pass a bearer token with --token" if response.status == 401 else "this token may not call it"
        raise ProbeError(f"the server refused {method} with HTTP {response.status}: {hint}")
    if not first_contact:
        return
    if response.problem is not None:
        raise ProbeError(f"no usable answer to {method}: {response.problem}. Is the server running, and the URL right?")
    if response.error_code == -32022:
        data = (response.error or {}).get("data")
        supported = data.get("supported") if isinstance(data, Mapping) else None
        raise ProbeError(
            f"the server does not speak MCP {PROTOCOL_VERSION} (it supports {supported!r}); "
            "askback check probes 2026-07-28 servers only"
        )
    if response.message is None:
        seen = f": {clip(response.text, 120)}" if response.text else ""
        raise ProbeError(
            f"{method} got HTTP {response.status} without a JSON-RPC response{seen}. Is this the MCP endpoint (it "
            "usually ends in /mcp), and does the server speak 2026-07-28?"
        )


def tamper(state: str) -> tuple[str, int]:
    """`state` with the character in its middle changed (to another of the same kind, so it still looks valid),
    and the index changed."""
    where = len(state) // 2
    old = state[where]
    new = ("B" if old == "A" else "A") if old.isalpha() else ("1" if old == "0" else "0")
    return state[:where] + new + state[where + 1 :], where


def invalid_content(schema: Any) -> tuple[dict[str, Any], str] | None:
    """Content for a form accept that breaks `schema` in its first property (a number where a string is asked, a
    string where a number, integer or boolean is, a value outside an enum), the others filled plausibly; and
    what was done wrong, for the report. `None` when there is nothing to get wrong."""
    properties = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(properties, Mapping) or not properties:
        return None
    items = [(str(name), prop) for name, prop in properties.items() if isinstance(prop, Mapping)]
    if not items:
        return None
    (name, prop), rest = items[0], items[1:]
    kind = prop.get("type")
    wrong: Any
    if "enum" in prop or "oneOf" in prop or "anyOf" in prop:
        wrong, what = _NOT_AN_OPTION, "a value outside the enum"
    elif kind == "array":
        wrong, what = [_NOT_AN_OPTION], "a value outside the options"
    elif kind == "string":
        wrong, what = 12345, "a number where a string is asked"
    elif kind in ("number", "integer"):
        wrong, what = "not a number", f"a string where {kind} is asked"
    elif kind == "boolean":
        wrong, what = "not a boolean", "a string where boolean is asked"
    else:
        return None
    content = {name: wrong, **{other: _plausible(other_prop) for other, other_prop in rest}}
    return content, f"{what} ({name}={json.dumps(wrong)})"


def _plausible(prop: Mapping[str, Any]) -> Any:
    if "default" in prop:
        return prop["default"]
    if isinstance(prop.get("enum"), list) and prop["enum"]:
        return prop["enum"][0]
    for choices in (prop.get("oneOf"), prop.get("anyOf")):
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping) and "const" in choices[0]:
            return choices[0]["const"]
    kind = prop.get("type")
    if kind == "boolean":
        return False
    if kind in ("number", "integer"):
        low = prop.get("minimum")
        return low if isinstance(low, int | float) else 0
    if kind == "array":
        return []
    fmt = prop.get("format")
    if isinstance(fmt, str) and fmt in _FORMAT_EXAMPLES:
        return _FORMAT_EXAMPLES[fmt]
    low_length = prop.get("minLength")
    return "x" * max(1, low_length if isinstance(low_length, int) else 1)
