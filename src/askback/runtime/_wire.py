"""The runtime's wire: a round sent on a connection to an MCP server, with whatever the SDK raises turned into one
askback error here (`explained`, `refused`), and nowhere else.

Each error says what became of the call, which depends on the round that was being sent, as whoever sent it says
(the call's first round in `Runtime`, the resume plan's step in `resume_driver`): a first round that timed out or
could not be read kept nothing; a resume that timed out leaves the call parked with its answers; a resume whose
result cannot be read fails the call (its answers did reach the server); a server that refuses a round gives
`ServerRefusedError` with its JSON-RPC code and data; an HTTP error with no JSON-RPC error in its body (a 401, a
proxy's 502) is `ServerHTTPError`, and a parked call stays parked with its answers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT
from pydantic import ValidationError

from askback.errors import CallError, ServerProtocolError
from askback.runtime import _sdk
from askback.runtime.call_errors import http_error, refused, timed_out
from askback.runtime.questions import Mode
from askback.runtime.unreadable import UnreadableResult

__all__ = ["explained", "explaining", "send"]


def explained(
    exc: BaseException, server: str, sending: int | None, *, call_id: str, resuming: bool, timeout: float | None
) -> BaseException:
    """What the SDK raised (`exc`, as it ended a connection to `server`) as one askback error saying what became of
    call `call_id`: `sending` is the round that was being sent (None: none yet, or none at all), `resuming` whether
    the call was parked. Anything else (askback's own errors, a cancellation) is returned as it is. The error's
    `__cause__` is the SDK's exception when that says more than the error does."""
    if isinstance(exc, httpx2.TimeoutException | TimeoutError) or (
        isinstance(exc, MCPError) and exc.code == REQUEST_TIMEOUT
    ):
        return timed_out(server, sending, call_id=call_id, resuming=resuming, timeout=timeout)
    if isinstance(exc, _sdk.HTTPFailure):
        return http_error(server, exc.status, sending, call_id=call_id, resuming=resuming)
    if isinstance(exc, MCPError):
        # A round's own refusal is the sender's to word (it fails the call); this one came before any was sent.
        return _caused(
            CallError(
                f"the MCP server at {server} refused the connection: {exc.message} (JSON-RPC {exc.code}); nothing "
                "was lost: a parked call stays parked, resume it again later"
            ),
            exc,
        )
    if isinstance(exc, UnreadableResult | ValidationError):
        reason = exc.reason if isinstance(exc, UnreadableResult) else _sdk.validation_reason(exc)
        what = f"round {sending} of call {call_id}" if sending is not None else "the connection"
        # A resume that reads no result marks its call failed (`resume_plan.fails_call`): its answers did reach the
        # server.
        kept = "the call is marked failed" if sending is not None and sending > 1 else "nothing was kept"
        return ServerProtocolError(
            f"the MCP server at {server} answered {what} with something askback cannot read: {reason}; {kept}. "
            "The server must be fixed to send results the protocol allows"
        )
    if isinstance(exc, httpx2.HTTPError | OSError):
        return _caused(
            CallError(
                f"could not reach the MCP server at {server} ({type(exc).__name__}); nothing was lost: a parked call "
                "stays parked, resume it again later"
            ),
            exc,
        )
    return exc


def _caused(error: CallError, cause: BaseException) -> CallError:
    error.__cause__ = cause  # the error raised says what became of the call; `cause` says what went wrong
    return error


@asynccontextmanager
async def explaining(
    connection: AbstractAsyncContextManager[_sdk.Connection],
    server: str,
    *,
    call_id: str,
    sends: int | None,
    resuming: bool,
    read_timeout: float | None,
) -> AsyncIterator[_sdk.Connection]:
    """`connection`, with whatever the SDK raises as it ends turned into one askback error (`explained`): `sends` is
    the round of call `call_id` the block sends once connected (None: no round, e.g. a listing of tools)."""
    connected = False
    try:
        async with connection as conn:
            connected = True
            yield conn
    except BaseException as exc:
        sending = sends if connected else None
        error = explained(exc, server, sending, call_id=call_id, resuming=resuming, timeout=read_timeout)
        if error is exc:
            raise
        raise error from error.__cause__  # None for most: the SDK's exception says nothing more


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
    """Send round `round_` of call `call_id` on `conn`: the server's result as JSON; its refusal as
    `ServerRefusedError`."""
    try:
        return await conn.send(method, target, arguments, responses=responses, state=state, read_timeout=read_timeout)
    except MCPError as exc:
        if exc.code == REQUEST_TIMEOUT:
            raise  # `explained` says what became of the call
        raise refused(exc.code, exc.message, exc.data, call_id=call_id, round_=round_, modes=modes) from exc
