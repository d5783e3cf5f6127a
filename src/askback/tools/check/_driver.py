"""The driver: `run_check` sends each request of the plan with httpx (bounded by a timeout and a size cap), reads
a JSON or SSE response, feeds the plan, and judges what it recorded."""

from __future__ import annotations

import itertools
import json
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from askback.errors import ProbeError
from askback.tools.check._plan import probe
from askback.tools.check._verdicts import Report, evaluate
from askback.tools.check._wire import Recorded, Request, Response, clip

_MAX_BODY = 1_000_000


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
        return Response(status=status, text=clip(text, 200))
    if isinstance(value, Mapping) and "jsonrpc" in value and ("result" in value or "error" in value):
        return Response(status=status, message=value)
    return Response(status=status, text=clip(text, 200))


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
