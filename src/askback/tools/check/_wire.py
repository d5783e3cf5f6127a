"""What the probe sends and receives: the wire records (`Request`, `Response`, `Exchange`, `Branch`,
`Recorded`), and `describe`, the one-line account of a response for people (never the state itself)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_CLIP = 240


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
            parts.append(f"data {compact(error.get('data'))}")
    elif (result := response.result) is not None:
        parts.append(f"resultType {response.result_type}" if "resultType" in result else "a result without resultType")
        if response.input_requests:
            parts.append(f"inputRequests {asked_keys_of(response)}")
        if response.request_state is not None:
            parts.append(f"requestState ({len(response.request_state)} chars)")
        if "isError" in result:
            parts.append(f"isError {json.dumps(result.get('isError'))}")
        if text := text_of(result):
            parts.append(f"text {json.dumps(clip(text, 100))}")
    else:
        parts.append(f"message {compact(response.message)}")
    return ", ".join(parts)


def asked_keys_of(response: Response) -> str:
    """`key (mode)` for each elicitation of an input_required result, `key (method)` for other input requests."""
    modes = response.elicitations()
    return ", ".join(
        f"{k} ({modes[k][0] if k in modes else r.get('method')})" for k, r in response.input_requests.items()
    )


def text_of(result: Mapping[str, Any]) -> str:
    content = result.get("content")
    if not isinstance(content, list):
        return ""
    return " ".join(str(c.get("text", "")) for c in content if isinstance(c, Mapping) and c.get("type") == "text")


def compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=False, default=str)


def clip(text: str, limit: int = _CLIP) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
