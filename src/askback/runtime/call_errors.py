"""What each way a call can fail means for it, in words: whether anything was kept, whether it stays parked with
its answers, and what to do next. Plain functions of plain data (no I/O): the wire (`_wire.explained`) words what
the SDK raised with them, the resume plan (`resume_plan`) what the server answered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from askback.errors import MISSING_REQUIRED_CLIENT_CAPABILITY, ServerHTTPError, ServerRefusedError, ServerTimeoutError
from askback.runtime.questions import Mode

__all__ = ["http_error", "later", "refusal", "refused", "task_failed", "task_refused", "timed_out"]

_WHY = {
    401: "it wants a valid bearer token: give the call's token with --token or Runtime(headers=...)",
    403: "the token does not allow this",
    429: "too many requests",
}


def http_error(server: str, status: int, sending: int | None, *, call_id: str, resuming: bool) -> ServerHTTPError:
    """The error for an HTTP error status with no JSON-RPC error in its body, saying what became of the call."""
    why = _WHY.get(status, "the server or a proxy in front of it is unavailable" if status >= 500 else "")
    said = f"the MCP server at {server} answered HTTP {status}" + (f" ({why})" if why else "")
    if sending == 1:
        return ServerHTTPError(f"{said}; nothing was kept (the call was never parked): call it again", status=status)
    if sending is not None or resuming:
        return ServerHTTPError(f"{said} when call {call_id} was resumed; {later(call_id)}", status=status)
    return ServerHTTPError(f"{said}; nothing was kept: try again", status=status)


def timed_out(
    server: str, sending: int | None, *, call_id: str, resuming: bool, timeout: float | None
) -> ServerTimeoutError:
    """The error for a server that did not answer in time, saying what became of the call."""
    waited = f"within {timeout:g} s" if timeout is not None else "before its connection ended"
    more = "or allow it more time (Runtime(timeout=...), --timeout SECONDS)"
    if sending == 1:
        return ServerTimeoutError(
            f"the MCP server at {server} did not answer call {call_id} {waited}; nothing was kept (the call "
            f"was never parked): call it again later, {more}"
        )
    if sending is not None or resuming:
        parked = f"round {sending - 1}" if sending is not None else "its round"
        return ServerTimeoutError(
            f"the MCP server at {server} did not answer {waited} when call {call_id} was resumed; the call stays "
            f"parked on {parked} with its answers: resume it again later (askback inbox resume {call_id}), {more}"
        )
    return ServerTimeoutError(
        f"the MCP server at {server} did not answer {waited}; nothing was kept: try again later, {more}"
    )


def refused(
    code: int, message: str, data: Any, *, call_id: str, round_: int, modes: frozenset[Mode]
) -> ServerRefusedError:
    """The error for a server that answered round `round_` with a JSON-RPC error (`code`, `message`, `data`), for a
    runtime whose renderers show `modes`."""
    if code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        needed = (data or {}).get("requiredCapabilities") if isinstance(data, Mapping) else None
        shows = ", ".join(sorted(modes)) or "nothing"
        said = (
            f"the server needs a client capability this runtime does not declare ({json.dumps(needed)}): its "
            f"renderers show {shows}. Add a renderer that shows it, or use the tool's fallback (-32021, round {round_} "
            f"of call {call_id})"
        )
    else:
        said = f"the server refused round {round_} of call {call_id}: {message} (JSON-RPC {code})"
    kept = "nothing was kept: call it again later" if round_ == 1 else later(call_id)
    return refusal(said, code=code, data=data, kept=kept)


def task_refused(code: int, message: str, data: Any, *, call_id: str, task_id: str, method: str) -> ServerRefusedError:
    """The error for a server that answered `method` (`tasks/get`, `tasks/update`, `tasks/cancel`) for the task of
    a parked call with a JSON-RPC error."""
    said = f"the server refused {method} for task {task_id} of call {call_id}: {message} (JSON-RPC {code})"
    return refusal(said, code=code, data=data, kept=later(call_id))


def task_failed(call_id: str, task_id: str, error: Mapping[str, Any]) -> ServerRefusedError:
    """The error of a call whose task failed on the server with `error` (its JSON-RPC error object)."""
    code, message = error.get("code"), error.get("message")
    return ServerRefusedError(
        f"task {task_id} of call {call_id} failed on the server: {message if isinstance(message, str) else 'no reason given'}"
        f" (JSON-RPC {code})",
        code=code if isinstance(code, int) else None,
        data=error.get("data"),
    )


def refusal(message: str, *, code: int | None, data: Any, kept: str) -> ServerRefusedError:
    """A `ServerRefusedError`; when the server says to retry (`.retryable`), its message says what became of the
    call (`kept`)."""
    refused = ServerRefusedError(message, code=code, data=data)
    if not refused.retryable:
        return refused
    return ServerRefusedError(f"{message}; the server says to retry, so {kept}", code=code, data=data)


def later(call_id: str) -> str:
    """What became of a parked call whose round the server did not take."""
    return (
        f"nothing was lost: the call stays parked on its round with its answers, resume it again later (askback inbox "
        f"resume {call_id})"
    )
