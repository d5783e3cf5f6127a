"""`askback check`: a black-box probe of any MCP server's elicitation behaviour under 2026-07-28.

It speaks raw JSON-RPC over Streamable HTTP (stateless POSTs), not through the SDK client, so that it sees what
is on the wire: HTTP statuses, exact field names, error codes. Three parts, in the manner of h11 and httpx's
`auth_flow`:

- `probe(tool, arguments)` is the plan: a generator that yields each `Request` to send, is sent back the
  `Response`, decides the next request from what came back, and finally returns everything as a `Recorded`. It
  does no I/O and never loops: every request it can make is written out below, at most once each.
- `evaluate(recorded)` is the verdict: pure functions from recorded exchanges to `Check`s, one per rule-backed
  question (the rule ids are those of the project's digest of the 2026-07-28 specification).
- `run_check(url, ...)` is the driver: it sends each request with httpx (bounded by a timeout), reads a JSON or
  SSE response, and feeds the plan.

The probe is careful with the tool it calls: a call that asks is never answered `accept` except with deliberately
invalid content (to see it asked again), and a tampered state is sent with declines only, so a server that
wrongly accepts it still has nothing to act on. Each branch of answers starts from a round one of its own: a
state is never echoed twice (R9), and a server that records a finished flow is not confused by a replay.
"""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Generator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import httpx
from mcp.shared.inbound import encode_header_value, find_invalid_x_mcp_header, mcp_param_headers, x_mcp_header_map

from askback.errors import ProbeError

__all__ = [
    "CHECKS",
    "Branch",
    "Check",
    "Evidence",
    "Exchange",
    "Recorded",
    "Report",
    "Request",
    "Response",
    "describe",
    "evaluate",
    "invalid_content",
    "probe",
    "run_check",
    "tamper",
]

PROTOCOL_VERSION = "2026-07-28"
# Header values for the R3 check: the previous revision (what a confused client or gateway would send) and one
# that no server supports. Both differ from the `_meta` version, so both must be refused with HTTP 400.
MISMATCHED_VERSIONS = ("2025-11-25", "2099-01-01")

BOTH_MODES: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}
FORM_ONLY: dict[str, Any] = {"elicitation": {"form": {}}}
URL_ONLY: dict[str, Any] = {"elicitation": {"url": {}}}
NOTHING: dict[str, Any] = {}

CHECKS = (
    "result-type",
    "declared-modes-only",
    "missing-capability",
    "tampered-state",
    "decline-completes",
    "cancel-completes",
    "no-legacy-fields",
    "invalid-answer-reasked",
    "protocol-version-header",
)

Status = Literal["pass", "fail", "skip"]

_CLIP = 240
_MAX_BODY = 1_000_000
_MAX_TOOL_PAGES = 10
_NOT_AN_OPTION = "askback-check: not one of the options"
_FORMAT_EXAMPLES = {
    "email": "probe@example.com",
    "uri": "https://example.com/",
    "date": "2026-07-28",
    "date-time": "2026-07-28T00:00:00Z",
}
_NOT_ASKED_AGAIN = "a fresh round one did not ask this time (see its answer)"
# Error codes 2026-07-28 defines in the reserved band -32020..-32099 (R4); anything else there is undefined.
_DEFINED_BAND_CODES = frozenset({-32020, -32021, -32022})
_LEGACY_CODES = frozenset({-32042, -32002})  # noqa: ABK104 - the probe looks for it


# Wire records


@dataclass(frozen=True)
class Request:
    """One POST the plan wants sent: the JSON-RPC body, the headers besides `Authorization`, and a summary for
    people (no token, no state bytes)."""

    body: Mapping[str, Any]
    headers: Mapping[str, str]
    summary: str

    @property
    def id(self) -> int:
        return int(self.body["id"])


@dataclass(frozen=True)
class Response:
    """What came back for one request. `message` is the JSON-RPC response carrying the request's id; `others`
    are any other JSON-RPC messages on an SSE stream; `problem` says why there is no usable response at all."""

    status: int | None = None
    message: Mapping[str, Any] | None = None
    others: tuple[Mapping[str, Any], ...] = ()
    text: str = ""
    problem: str | None = None

    @property
    def result(self) -> Mapping[str, Any] | None:
        value = (self.message or {}).get("result")
        return value if isinstance(value, Mapping) else None

    @property
    def error(self) -> Mapping[str, Any] | None:
        value = (self.message or {}).get("error")
        return value if isinstance(value, Mapping) else None

    @property
    def error_code(self) -> int | None:
        code = (self.error or {}).get("code")
        return code if isinstance(code, int) else None

    @property
    def result_type(self) -> str | None:
        value = (self.result or {}).get("resultType")
        return value if isinstance(value, str) else None

    @property
    def input_requests(self) -> dict[str, Mapping[str, Any]]:
        if self.result_type != "input_required":
            return {}
        value = (self.result or {}).get("inputRequests")
        if not isinstance(value, Mapping):
            return {}
        return {str(k): v for k, v in value.items() if isinstance(v, Mapping)}

    @property
    def request_state(self) -> str | None:
        value = (self.result or {}).get("requestState") if self.result_type == "input_required" else None
        return value if isinstance(value, str) else None

    def elicitations(self) -> dict[str, tuple[str, Mapping[str, Any]]]:
        """`key -> (mode, params)` for every `elicitation/create` in `inputRequests` (no mode means form, R16)."""
        out: dict[str, tuple[str, Mapping[str, Any]]] = {}
        for key, request in self.input_requests.items():
            if request.get("method") != "elicitation/create":
                continue
            params = request.get("params")
            params = params if isinstance(params, Mapping) else {}
            mode = params.get("mode", "form")
            out[key] = (mode if isinstance(mode, str) else repr(mode), params)
        return out


@dataclass(frozen=True)
class Exchange:
    request: Request
    response: Response


@dataclass(frozen=True)
class Branch:
    """A fresh round one and the retry that answers it. Without a retry, `why_not` says why none was sent; with
    one, `key` and `sent` say which question was answered with what (for the invalid answer)."""

    round_one: Exchange
    retry: Exchange | None = None
    why_not: str = ""
    key: str = ""
    sent: str = ""


@dataclass(frozen=True)
class Recorded:
    """Everything the plan sent and received, by purpose. `None` means the plan had no reason to send it."""

    tool: str
    arguments: Mapping[str, Any]
    tool_schema: Mapping[str, Any] | None
    listing: tuple[Exchange, ...]
    round_one: Exchange
    form_only: Exchange | None = None
    url_only: Exchange | None = None
    no_capabilities: Exchange | None = None
    tampered: Exchange | None = None
    declined: Branch | None = None
    cancelled: Branch | None = None
    invalid: Branch | None = None
    mismatched_version: tuple[Exchange, ...] = ()

    def exchanges(self) -> Iterator[Exchange]:
        yield from self.listing
        yield self.round_one
        for single in (self.form_only, self.url_only, self.no_capabilities, self.tampered):
            if single is not None:
                yield single
        for branch in (self.declined, self.cancelled, self.invalid):
            if branch is not None:
                yield branch.round_one
                if branch.retry is not None:
                    yield branch.retry
        yield from self.mismatched_version


# Verdicts


@dataclass(frozen=True)
class Evidence:
    """One request as sent and the fields of its response that the verdict rests on, both clipped."""

    request: str
    response: str


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    rules: tuple[str, ...]
    detail: str
    evidence: tuple[Evidence, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "rules": list(self.rules),
            "detail": self.detail,
            "evidence": [{"request": e.request, "response": e.response} for e in self.evidence],
        }


@dataclass(frozen=True)
class Report:
    url: str
    tool: str
    checks: tuple[Check, ...]
    arguments: Mapping[str, Any] = field(default_factory=dict)

    def counts(self) -> dict[Status, int]:
        counts: dict[Status, int] = {"pass": 0, "fail": 0, "skip": 0}
        for check in self.checks:
            counts[check.status] += 1
        return counts

    @property
    def failed(self) -> bool:
        return any(check.status == "fail" for check in self.checks)

    def by_name(self) -> dict[str, Check]:
        return {check.name: check for check in self.checks}

    def to_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "checks": [check.to_json() for check in self.checks],
            "summary": self.counts(),
        }


# The plan


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
        summary = f"#{body['id']} tools/call {self.tool} declaring {_compact(capabilities)}"
        if responses is not None:
            summary += f", inputResponses {_compact(responses)}"
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
        seen = f": {_clip(response.text, 120)}" if response.text else ""
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


# The verdicts


def evaluate(recorded: Recorded) -> tuple[Check, ...]:
    """The checks, in `CHECKS` order, from what the probe recorded. Pure."""
    return (
        _result_type(recorded),
        _declared_modes_only(recorded),
        _missing_capability(recorded),
        _tampered_state(recorded),
        _completes(recorded, recorded.declined, "decline-completes", "decline"),
        _completes(recorded, recorded.cancelled, "cancel-completes", "cancel"),
        _no_legacy_fields(recorded),
        _invalid_answer_reasked(recorded),
        _protocol_version_header(recorded),
    )


def _evidence(*exchanges: Exchange | None) -> tuple[Evidence, ...]:
    return tuple(Evidence(_clip(x.request.summary), _clip(describe(x.response))) for x in exchanges if x is not None)


def _no_questions(recorded: Recorded) -> str | None:
    """Why the question checks cannot run, or `None` when round one asked something."""
    response = recorded.round_one.response
    if response.elicitations():
        return None
    if response.result_type == "complete":
        return "the tool completed at once, without asking anything: there is no question to probe"
    if response.result_type == "input_required":
        return "round one asked no elicitation (only other input requests, or a state alone)"
    return "round one did not answer a result with questions (see result-type)"


def _skip(name: str, rules: tuple[str, ...], reason: str, *exchanges: Exchange | None) -> Check:
    return Check(name, "skip", rules, reason, _evidence(*exchanges))


def _result_type(recorded: Recorded) -> Check:
    name, rules = "result-type", ("R5", "R7")
    x = recorded.round_one
    response = x.response
    if response.problem is not None:
        return Check(name, "fail", rules, f"no usable response: {response.problem}", _evidence(x))
    if response.result is None:
        return Check(name, "fail", rules, "round one answered an error, not a result", _evidence(x))
    kind = response.result_type
    if kind == "complete":
        detail = "complete: the tool finished without asking, so the question checks are skipped"
        return Check(name, "pass", rules, detail, _evidence(x))
    if kind == "input_required":
        result = response.result
        if not result.get("inputRequests") and not result.get("requestState"):
            return Check(
                name, "fail", rules, "input_required with neither inputRequests nor requestState (R7)", _evidence(x)
            )
        asked = ", ".join(f"{k} ({mode})" for k, (mode, _) in response.elicitations().items()) or "no elicitation"
        return Check(name, "pass", rules, f"input_required, asking {asked}", _evidence(x))
    if kind is None:
        return Check(name, "fail", rules, "the result has no resultType (R5)", _evidence(x))
    return Check(name, "fail", rules, f"resultType {kind!r} is neither complete nor input_required", _evidence(x))


def _declared_modes_only(recorded: Recorded) -> Check:
    name, rules = "declared-modes-only", ("R15", "R14")
    if (reason := _no_questions(recorded)) is not None or recorded.form_only is None or recorded.url_only is None:
        return _skip(name, rules, reason or "not probed")
    notes: list[str] = []
    failures: list[str] = []
    for declared, x, forbidden in (("form only", recorded.form_only, "url"), ("url only", recorded.url_only, "form")):
        response = x.response
        if response.problem is not None:
            failures.append(f"{declared}: no usable response ({response.problem})")
        elif response.error_code == -32021:
            notes.append(f"{declared}: -32021 (HTTP {response.status})")
        elif response.error is not None:
            failures.append(f"{declared}: error {response.error_code}, where R15 wants -32021 or a question it may ask")
        else:
            asked = response.elicitations()
            wrong = [k for k, (mode, _) in asked.items() if (mode == "url") == (forbidden == "url")]
            if wrong:
                failures.append(f"{declared}: asked {', '.join(wrong)} in {forbidden} mode, which was not declared")
            else:
                shown = ", ".join(f"{k} ({mode})" for k, (mode, _) in asked.items())
                notes.append(f"{declared}: " + (f"asked {shown}" if shown else f"{_outcome(response)}, nothing asked"))
    evidence = _evidence(recorded.form_only, recorded.url_only)
    if failures:
        return Check(name, "fail", rules, "; ".join(failures + notes), evidence)
    return Check(name, "pass", rules, "; ".join(notes), evidence)


def _outcome(response: Response) -> str:
    if response.result_type == "complete" and (response.result or {}).get("isError") is True:
        return "complete with a tool error"
    return str(response.result_type)


def _argument_names(recorded: Recorded) -> list[str]:
    properties = (recorded.tool_schema or {}).get("properties")
    return [str(k) for k in properties] if isinstance(properties, Mapping) else []


def _missing_capability(recorded: Recorded) -> Check:
    name, rules = "missing-capability", ("R15",)
    if (reason := _no_questions(recorded)) is not None or recorded.no_capabilities is None:
        return _skip(name, rules, reason or "not probed")
    x = recorded.no_capabilities
    response = x.response
    evidence = _evidence(x)
    if response.problem is not None:
        return Check(name, "fail", rules, f"no usable response: {response.problem}", evidence)
    if response.error_code == -32021:
        data = (response.error or {}).get("data")
        required = data.get("requiredCapabilities") if isinstance(data, Mapping) else None
        wrong = []
        if response.status != 400:
            wrong.append(f"HTTP {response.status}, not 400")
        if not isinstance(required, Mapping) or "elicitation" not in required:
            wrong.append("data.requiredCapabilities is not an object naming elicitation")
        if wrong:
            return Check(name, "fail", rules, "-32021, but " + " and ".join(wrong), evidence)
        return Check(name, "pass", rules, f"-32021, HTTP 400, requiredCapabilities {_compact(required)}", evidence)
    if response.error is not None:
        return Check(name, "fail", rules, f"error {response.error_code}, where R15 wants -32021", evidence)
    if response.input_requests:
        asked = _asked(response)
        return Check(name, "fail", rules, f"asked {asked} of a request that declared no capabilities", evidence)
    result = response.result or {}
    if result.get("isError") is True:
        text = _text_of(result)
        arguments = _argument_names(recorded)
        named = [a for a in arguments if re.search(rf"\b{re.escape(a)}\b", text)]
        if named or (not arguments and re.search(r"\bargument\b", text, re.IGNORECASE)):
            what = f"the argument {named[0]}" if named else "an argument"
            return Check(name, "pass", rules, f"fallback: a tool error naming {what}", evidence)
        detail = "a tool error that names no argument of the tool: the model cannot supply what is missing"
        return Check(name, "fail", rules, detail + "; R15 wants -32021, or a tool error naming the argument", evidence)
    return Check(
        name, "pass", rules, f"{response.result_type or 'a result'} without asking (a default was used?)", evidence
    )


def _tampered_state(recorded: Recorded) -> Check:
    name, rules = "tampered-state", ("R10",)
    if (reason := _no_questions(recorded)) is not None:
        return _skip(name, rules, reason)
    if recorded.tampered is None:
        return _skip(name, rules, "round one returned no requestState to tamper with", recorded.round_one)
    response = recorded.tampered.response
    evidence = _evidence(recorded.tampered)
    if response.problem is not None:
        return Check(name, "fail", rules, f"no usable response: {response.problem}", evidence)
    if response.error is not None:
        return Check(name, "pass", rules, f"refused: error {response.error_code} (HTTP {response.status})", evidence)
    if response.result_type == "input_required":
        return Check(name, "fail", rules, "a tampered state was answered with new questions, not an error", evidence)
    return Check(name, "fail", rules, "a tampered state was accepted: the call completed", evidence)


def _completes(recorded: Recorded, branch: Branch | None, name: str, action: str) -> Check:
    rules = ("R20",)
    if (reason := _no_questions(recorded)) is not None or branch is None:
        return _skip(name, rules, reason or "not probed")
    if branch.retry is None:
        return _skip(name, rules, branch.why_not, branch.round_one)
    response = branch.retry.response
    evidence = _evidence(branch.round_one, branch.retry)
    if response.problem is not None:
        return Check(name, "fail", rules, f"no usable response: {response.problem}", evidence)
    if response.error is not None:
        return Check(
            name, "fail", rules, f"a {action} answered error {response.error_code}, not a completion", evidence
        )
    if response.result_type == "input_required":
        return Check(name, "fail", rules, f"a {action} was answered with another round of questions", evidence)
    result = response.result or {}
    is_error = result.get("isError") is True
    text = _clip(_text_of(result), 100)
    return Check(name, "pass", rules, f"complete (isError: {str(is_error).lower()}): {text!r}", evidence)


def _legacy_findings(value: Any, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            if key == "elicitationId":  # noqa: ABK103 - the probe looks for it
                yield f"{path}.elicitationId"
            yield from _legacy_findings(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _legacy_findings(inner, f"{path}[{index}]")


def _message_findings(message: Mapping[str, Any]) -> Iterator[str]:
    yield from _legacy_findings(message, "")
    error = message.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    if isinstance(code, int):
        if code in _LEGACY_CODES:
            yield f"error code {code}, removed in 2026-07-28"
        elif -32099 <= code <= -32020 and code not in _DEFINED_BAND_CODES:
            yield f"error code {code}, undefined in the reserved band"
    method = message.get("method")
    if method == "elicitation/create":
        yield "an elicitation/create request pushed on the stream"
    elif method == "notifications/elicitation/complete":  # noqa: ABK102 - the probe looks for it
        yield "a notifications/elicitation/complete notification"  # noqa: ABK102 - the probe looks for it


def _no_legacy_fields(recorded: Recorded) -> Check:
    name, rules = "no-legacy-fields", ("R22", "R4", "R8")
    findings: list[str] = []
    evidence: list[Exchange] = []
    count = 0
    for x in recorded.exchanges():
        messages = [m for m in (x.response.message, *x.response.others) if m is not None]
        count += len(messages)
        seen = [f.lstrip(".") for m in messages for f in _message_findings(m)]
        if seen:
            findings.append(f"#{x.request.id}: {', '.join(sorted(set(seen)))}")
            evidence.append(x)
    if findings:
        return Check(name, "fail", rules, "; ".join(findings), _evidence(*evidence[:3]))
    return Check(
        name,
        "pass",
        rules,
        f"{count} JSON-RPC messages in {sum(1 for _ in recorded.exchanges())} responses, none legacy",
    )


def _invalid_answer_reasked(recorded: Recorded) -> Check:
    name, rules = "invalid-answer-reasked", ("R11",)
    if (reason := _no_questions(recorded)) is not None:
        return _skip(name, rules, reason)
    branch = recorded.invalid
    if branch is None:
        return _skip(name, rules, "not probed")
    if branch.retry is None:
        return _skip(name, rules, branch.why_not, branch.round_one)
    key = branch.key
    response = branch.retry.response
    evidence = _evidence(branch.round_one, branch.retry)
    sent = f"sent {branch.sent} for {key}"
    if response.problem is not None:
        return Check(name, "fail", rules, f"{sent}; no usable response: {response.problem}", evidence)
    if response.error is not None:
        return Check(name, "fail", rules, f"{sent}; answered error {response.error_code}, not a re-ask", evidence)
    if response.result_type != "input_required":
        return Check(name, "fail", rules, f"{sent}; the call completed on an invalid answer", evidence)
    asked = response.elicitations()
    if key in asked:
        return Check(name, "pass", rules, f"{sent}; {key} was asked again", evidence)
    original = branch.round_one.response.elicitations()[key][1].get("requestedSchema")
    fields = set((original or {}).get("properties") or {}) if isinstance(original, Mapping) else set()
    for other, (mode, params) in asked.items():
        schema = params.get("requestedSchema")
        if mode == "form" and isinstance(schema, Mapping) and set(schema.get("properties") or {}) == fields:
            return Check(name, "pass", rules, f"{sent}; asked again under the key {other}", evidence)
    return Check(name, "fail", rules, f"{sent}; input_required, but {key} was not asked again", evidence)


def _protocol_version_header(recorded: Recorded) -> Check:
    name, rules = "protocol-version-header", ("R3",)
    if not recorded.mismatched_version:
        return _skip(name, rules, "not probed")
    notes: list[str] = []
    failures: list[str] = []
    for x in recorded.mismatched_version:
        version = x.request.headers["MCP-Protocol-Version"]
        response = x.response
        if response.problem is not None:
            failures.append(f"header {version}: no usable response ({response.problem})")
            continue
        code = f"error {response.error_code}" if response.error is not None else "a result"
        if response.status != 400:
            failures.append(f"header {version}: HTTP {response.status} with {code}, not 400")
        elif response.error_code != -32020:
            notes.append(f"header {version}: HTTP 400 with {code} (R3 names -32020)")
        else:
            notes.append(f"header {version}: HTTP 400, -32020")
    evidence = _evidence(*recorded.mismatched_version)
    if failures:
        return Check(name, "fail", rules, "; ".join(failures + notes), evidence)
    return Check(name, "pass", rules, "; ".join(notes), evidence)


# Describing responses for people


def describe(response: Response) -> str:
    """The fields of a response a verdict rests on, in one line: status, error code and data, or result type,
    questions (key and mode), state length, isError and text. Never the state itself."""
    if response.problem is not None:
        return f"no usable response: {response.problem}"
    parts = [f"HTTP {response.status}"]
    if response.message is None:
        parts.append("no JSON-RPC response" + (f": {response.text}" if response.text else ""))
    elif (error := response.error) is not None:
        parts.append(f"error {error.get('code')} {json.dumps(error.get('message'))}")
        if error.get("data") is not None:
            parts.append(f"data {_compact(error.get('data'))}")
    elif (result := response.result) is not None:
        parts.append(f"resultType {response.result_type}" if "resultType" in result else "a result without resultType")
        if response.input_requests:
            parts.append(f"inputRequests {_asked(response)}")
        if response.request_state is not None:
            parts.append(f"requestState ({len(response.request_state)} chars)")
        if "isError" in result:
            parts.append(f"isError {json.dumps(result.get('isError'))}")
        if text := _text_of(result):
            parts.append(f"text {json.dumps(_clip(text, 100))}")
    else:
        parts.append(f"message {_compact(response.message)}")
    return ", ".join(parts)


def _asked(response: Response) -> str:
    """`key (mode)` for each elicitation of an input_required result, `key (method)` for other input requests."""
    modes = response.elicitations()
    return ", ".join(
        f"{k} ({modes[k][0] if k in modes else r.get('method')})" for k, r in response.input_requests.items()
    )


def _text_of(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return " ".join(str(c.get("text", "")) for c in content if isinstance(c, Mapping) and c.get("type") == "text")


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False, default=str)


def _clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The driver


def run_check(
    url: str,
    tool: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    token: str | None = None,
    timeout: float = 10.0,
) -> Report:
    """Probe the MCP endpoint at `url` (Streamable HTTP, 2026-07-28) through `tool`, and judge what it answers.

    Raises `ProbeError` when the server cannot be probed at all. Every request is bounded by `timeout` seconds.
    """
    if not re.match(r"^https?://", url):
        raise ProbeError(f"{url!r} is not an http:// or https:// URL (for example http://127.0.0.1:8000/mcp)")
    args = dict(arguments or {})
    plan = probe(tool, args)
    auth = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(timeout=httpx.Timeout(timeout), follow_redirects=False) as client:
        try:
            request = next(plan)
            while True:
                request = plan.send(_send(client, url, request, auth, timeout))
        except StopIteration as done:
            recorded: Recorded = done.value
    return Report(url, tool, evaluate(recorded), args)


def _send(client: httpx.Client, url: str, request: Request, auth: Mapping[str, str], timeout: float) -> Response:
    deadline = time.monotonic() + timeout
    try:
        with client.stream("POST", url, json=dict(request.body), headers={**request.headers, **auth}) as http:
            kind = http.headers.get("content-type", "").split(";")[0].strip().lower()
            try:
                if kind == "text/event-stream":
                    return _read_sse(http, request.id, deadline, timeout)
                return _parse_json(http.status_code, _read_capped(http.iter_bytes(), deadline, timeout))
            except _Unbounded as exc:
                return Response(status=http.status_code, problem=str(exc))
    except httpx.InvalidURL as exc:
        raise ProbeError(f"{url!r} is not a usable URL: {exc}") from None
    except httpx.TimeoutException:
        return Response(problem=f"no answer within {timeout:g} s")
    except httpx.HTTPError as exc:
        return Response(problem=f"{type(exc).__name__}: {exc}")


class _Unbounded(Exception):
    """A response that went on past the deadline or the size cap."""


def _read_capped(chunks: Iterable[bytes], deadline: float, timeout: float) -> bytes:
    body = bytearray()
    for chunk in chunks:
        body += chunk
        if len(body) > _MAX_BODY:
            raise _Unbounded(f"the response went past {_MAX_BODY} bytes")
        if time.monotonic() > deadline:
            raise _Unbounded(f"the response was still arriving after {timeout:g} s")
    return bytes(body)


def _parse_json(status: int, body: bytes) -> Response:
    text = body.decode("utf-8", errors="replace")
    try:
        value = json.loads(text) if text.strip() else None
    except ValueError:
        return Response(status=status, text=_clip(text, 200))
    if isinstance(value, Mapping) and "jsonrpc" in value and ("result" in value or "error" in value):
        return Response(status=status, message=value)
    return Response(status=status, text=_clip(text, 200))


def _read_sse(http: httpx.Response, request_id: int, deadline: float, timeout: float) -> Response:
    """Read SSE events until the JSON-RPC response to `request_id` arrives; other messages are kept in `others`."""
    others: list[Mapping[str, Any]] = []
    for message in _sse_messages(http.iter_lines(), deadline, timeout):
        if message.get("id") == request_id and ("result" in message or "error" in message):
            return Response(status=http.status_code, message=message, others=tuple(others))
        others.append(message)
    return Response(status=http.status_code, others=tuple(others), text="the stream ended without a response")


def _sse_messages(lines: Iterable[str], deadline: float, timeout: float) -> Iterator[Mapping[str, Any]]:
    """The JSON objects carried by the `data:` fields of an SSE stream, event by event; comments and other
    fields are skipped."""
    data: list[str] = []
    size = 0
    for line in itertools.chain(lines, [""]):
        size += len(line)
        if size > _MAX_BODY:
            raise _Unbounded(f"the stream went past {_MAX_BODY} bytes")
        if time.monotonic() > deadline:
            raise _Unbounded(f"no response on the stream within {timeout:g} s")
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
            continue
        if line or not data:
            continue
        event, data = "\n".join(data), []
        try:
            message = json.loads(event)
        except ValueError:
            continue
        if isinstance(message, Mapping):
            yield message
