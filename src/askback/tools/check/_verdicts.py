"""The verdicts: pure functions from what the plan recorded to one `Check` per rule-backed question (the rule
ids are those of the project's digest of the 2026-07-28 specification), gathered in a `Report`."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from askback.errors import HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY
from askback.tools.check._wire import (
    Branch,
    Exchange,
    Recorded,
    Response,
    asked_keys_of,
    clip,
    compact,
    describe,
    text_of,
)

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


# Error codes 2026-07-28 defines in the reserved band -32020..-32099 (R4); anything else there is undefined.
_DEFINED_BAND_CODES = frozenset({HEADER_MISMATCH, MISSING_REQUIRED_CLIENT_CAPABILITY, -32022})
_LEGACY_CODES = frozenset({-32042, -32002})  # noqa: ABK104 - the probe looks for it


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
    return tuple(Evidence(clip(x.request.summary), clip(describe(x.response))) for x in exchanges if x is not None)


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
        elif response.error_code == MISSING_REQUIRED_CLIENT_CAPABILITY:
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
    if response.error_code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        data = (response.error or {}).get("data")
        required = data.get("requiredCapabilities") if isinstance(data, Mapping) else None
        wrong = []
        if response.status != 400:
            wrong.append(f"HTTP {response.status}, not 400")
        if not isinstance(required, Mapping) or "elicitation" not in required:
            wrong.append("data.requiredCapabilities is not an object naming elicitation")
        if wrong:
            return Check(name, "fail", rules, "-32021, but " + " and ".join(wrong), evidence)
        return Check(name, "pass", rules, f"-32021, HTTP 400, requiredCapabilities {compact(required)}", evidence)
    if response.error is not None:
        return Check(name, "fail", rules, f"error {response.error_code}, where R15 wants -32021", evidence)
    if response.input_requests:
        asked = asked_keys_of(response)
        return Check(name, "fail", rules, f"asked {asked} of a request that declared no capabilities", evidence)
    result = response.result or {}
    if result.get("isError") is True:
        text = text_of(result)
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
    text = clip(text_of(result), 100)
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
