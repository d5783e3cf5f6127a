"""The runtime's wire: a connection to an MCP server and a round sent on it, with whatever the SDK raises turned
into one askback error here, and nowhere else.

Each error says what became of the call, which depends on the round that was being sent (`Connection.sending`): a
first round that timed out or could not be read kept nothing; a resume that timed out leaves the call parked with
its answers; a resume whose result cannot be read fails the call (its answers did reach the server); a server that
refuses a round gives `ServerRefusedError` with its JSON-RPC code and data; an HTTP error with no JSON-RPC error in
its body (a 401, a proxy's 502) is `ServerHTTPError`, and a parked call stays parked with its answers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT
from pydantic import ValidationError

from askback.errors import (
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallError,
    ServerHTTPError,
    ServerProtocolError,
    ServerRefusedError,
    ServerTimeoutError,
)
from askback.runtime import _sdk
from askback.runtime.questions import Mode, Ready

__all__ = ["connect", "http_error", "later", "refusal", "refused", "responses", "send", "timed_out"]


@asynccontextmanager
async def connect(
    server: str,
    *,
    call_id: str,
    modes: frozenset[Mode],
    protocol: str | None,
    resuming: bool,
    headers: Mapping[str, str] | None,
    on_push: _sdk.PushHandler,
    read_timeout: float | None,
    tasks: bool = True,
) -> AsyncIterator[_sdk.Connection]:
    """A connection to the server at `server` for call `call_id` (`resuming` it when the call is parked); `tasks`:
    whether it declares the tasks extension."""
    connected: list[_sdk.Connection] = []
    try:
        async with _sdk.connect(
            server,
            modes=modes,
            protocol=protocol,
            headers=headers,
            on_push=on_push,
            read_timeout=read_timeout,
            tasks=tasks,
        ) as conn:
            connected.append(conn)
            yield conn
    # What the SDK raises becomes one askback error here, whichever round it ended (`Connection.sending`).
    except (httpx2.TimeoutException, TimeoutError):
        sending = connected[0].sending if connected else None
        raise timed_out(server, sending, call_id=call_id, resuming=resuming, timeout=read_timeout) from None
    except _sdk.HTTPFailure as exc:
        sending = connected[0].sending if connected else None
        raise http_error(server, exc.status, sending, call_id=call_id, resuming=resuming) from None
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            sending = connected[0].sending if connected else None
            raise timed_out(server, sending, call_id=call_id, resuming=resuming, timeout=read_timeout) from None
        # A round's own refusal is `send`'s (it fails the call); this one came before any round was sent.
        raise CallError(
            f"the MCP server at {server} refused the connection: {exc.message} (JSON-RPC {exc.code}); nothing "
            "was lost: a parked call stays parked, resume it again later"
        ) from exc
    except (_sdk.UnreadableResult, ValidationError) as exc:
        reason = exc.reason if isinstance(exc, _sdk.UnreadableResult) else _sdk.validation_reason(exc)
        sending = connected[0].sending if connected else None
        what = f"round {sending[1]} of call {sending[0]}" if sending is not None else "the connection"
        # A resume that reads no result marks its call failed (`Runtime._resume`): its answers did reach the server.
        kept = "the call is marked failed" if sending is not None and sending[1] > 1 else "nothing was kept"
        raise ServerProtocolError(
            f"the MCP server at {server} answered {what} with something askback cannot read: {reason}; {kept}. "
            "The server must be fixed to send results the protocol allows"
        ) from None
    except (httpx2.HTTPError, OSError) as exc:
        raise CallError(
            f"could not reach the MCP server at {server} ({type(exc).__name__}); nothing was lost: a parked call "
            "stays parked, resume it again later"
        ) from exc


async def send(
    conn: _sdk.Connection,
    method: _sdk.Method,
    target: str,
    arguments: Mapping[str, Any] | None,
    *,
    call_id: str,
    round_: int,
    modes: frozenset[Mode],
    read_timeout: float | None,
    responses: Mapping[str, Any] | None = None,
    state: str | None = None,
) -> dict[str, Any]:
    """Send round `round_` of call `call_id` on `conn`: the server's result as JSON."""
    conn.sending = (call_id, round_)
    try:
        return await conn.send(method, target, arguments, responses=responses, state=state, read_timeout=read_timeout)
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            raise  # `connect` says what became of the call
        raise refused(exc, call_id=call_id, round_=round_, modes=modes) from exc


def responses(decision: Ready) -> dict[str, Any]:
    """A round's answers as the wire has them, under the server's keys."""
    return {key: answer.wire() for key, answer in decision.responses.items()}


_WHY = {
    401: "it wants a valid bearer token: give the call's token with --token or Runtime(headers=...)",
    403: "the token does not allow this",
    429: "too many requests",
}


def http_error(
    server: str, status: int, sending: tuple[str, int] | None, *, call_id: str, resuming: bool
) -> ServerHTTPError:
    """The error for an HTTP error status with no JSON-RPC error in its body, saying what became of the call."""
    why = _WHY.get(status, "the server or a proxy in front of it is unavailable" if status >= 500 else "")
    said = f"the MCP server at {server} answered HTTP {status}" + (f" ({why})" if why else "")
    if sending is not None and sending[1] == 1:
        return ServerHTTPError(f"{said}; nothing was kept (the call was never parked): call it again", status=status)
    if sending is not None or resuming:
        return ServerHTTPError(f"{said} when call {call_id} was resumed; {later(call_id)}", status=status)
    return ServerHTTPError(f"{said}; nothing was kept: try again", status=status)


def timed_out(
    server: str, sending: tuple[str, int] | None, *, call_id: str, resuming: bool, timeout: float | None
) -> ServerTimeoutError:
    """The error for a server that did not answer in time, saying what became of the call."""
    waited = f"within {timeout:g} s" if timeout is not None else "before its connection ended"
    more = "or allow it more time (Runtime(timeout=...), --timeout SECONDS)"
    if sending is not None and sending[1] == 1:
        return ServerTimeoutError(
            f"the MCP server at {server} did not answer call {sending[0]} {waited}; nothing was kept (the call "
            f"was never parked): call it again later, {more}"
        )
    if sending is not None or resuming:
        parked = f"round {sending[1] - 1}" if sending is not None else "its round"
        return ServerTimeoutError(
            f"the MCP server at {server} did not answer {waited} when call {call_id} was resumed; the call stays "
            f"parked on {parked} with its answers: resume it again later (askback inbox resume {call_id}), {more}"
        )
    return ServerTimeoutError(
        f"the MCP server at {server} did not answer {waited}; nothing was kept: try again later, {more}"
    )


def refused(exc: MCPError, *, call_id: str, round_: int, modes: frozenset[Mode]) -> ServerRefusedError:
    """The error for a server that answered round `round_` with a JSON-RPC error."""
    data, code = exc.data, exc.code
    if code == MISSING_REQUIRED_CLIENT_CAPABILITY:
        needed = (data or {}).get("requiredCapabilities") if isinstance(data, Mapping) else None
        shows = ", ".join(sorted(modes)) or "nothing"
        message = (
            f"the server needs a client capability this runtime does not declare ({json.dumps(needed)}): its "
            f"renderers show {shows}. Add a renderer that shows it, or use the tool's fallback (-32021, round {round_} "
            f"of call {call_id})"
        )
    else:
        message = f"the server refused round {round_} of call {call_id}: {exc.message} (JSON-RPC {code})"
    kept = "nothing was kept: call it again later" if round_ == 1 else later(call_id)
    return refusal(message, code=code, data=data, kept=kept)


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
