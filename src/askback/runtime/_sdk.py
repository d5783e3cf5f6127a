"""The one place the agent runtime touches the official SDK client, including the one private part it needs.

One round of a call is sent with `client.session.call_tool(..., allow_input_required=True)` (and the same for
prompts and resources), so every round comes back to the runtime to be parked instead of being answered by a
callback in this process. What comes back is turned into plain JSON: the complete result, or the
`InputRequiredResult` as the server sent it (`requestState` untouched).

Private SDK surface used here, and only here (mcp 2.3; `tests/runtime/test_runtime_sdk.py` fails loudly when an upgrade
changes it, and `pyproject.toml` pins `mcp` to 2.3.*):

- `Client._build_session`, overridden to narrow the capabilities the session declares: the SDK declares
  elicitation `{form, url}` whenever an elicitation callback is set, whatever the client can show, and ignores a
  per-request `_meta` override. The runtime declares exactly the modes its renderers can show, and on a 2026-07-28
  session the tasks extension (`askback.runtime._tasks` drives the tasks a server makes).
- `ClientSession._build_capabilities`, replaced on the session instance for that.
- `ClientSession._dispatcher.send_raw_request`, wrapped on the session's dispatcher: a round's result that carries
  no `resultType` is complete (2026-07-28: the default result type), but the SDK validates every raw result
  against the spec's schema, where `resultType` is required, before any adapter sees it. The wrapper adds the
  default to the results of the rounds the runtime sends, on a 2026-07-28 session, before that validation.

On a 2026-07-28 connection the tools are listed once before its first tool call: the session mirrors a tool's
`x-mcp-header` arguments into `Mcp-Param-*` headers only for tools it has listed, and the spec makes those headers
the client's duty, not something to learn from a server's -32020.

What a server sends is not trusted to be well formed. The SDK validates a round's result against the spec's schema;
when it refuses one, the result as the server sent it (kept by the same wrapper) is judged here: a round whose
questions can be read is returned as it is, to be parked even if a form inside it cannot be rendered; anything
else is `UnreadableResult`, as is an answer the SDK could not parse at all (JSON nested past its parser's limit).
The SDK logs such a parse failure with its traceback before failing the request; on the runtime's own connections
that record becomes one debug line (`_ServerInputRecords`), since the runtime raises one error for it. Whatever
ends a connection's block, the SDK's task groups wrap it in exception groups; `connect` raises the one exception
that explains it.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

import httpx2
import mcp_types
from mcp import Client
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import TypeAdapter, ValidationError

from askback.errors import AskbackError
from askback.runtime._http_status import HTTPFailure, LastStatus
from askback.runtime.questions import Mode, unreadable_round
from askback.runtime.unreadable import UnreadableResult, raise_if_unreadable

__all__ = [
    "TASKS_EXTENSION",
    "Connection",
    "HTTPFailure",
    "Method",
    "PushHandler",
    "UnreadableResult",
    "connect",
    "validation_reason",
]

log = logging.getLogger("askback.runtime")

Method = Literal["tools/call", "prompts/get", "resources/read"]
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# A 2025-11-25 server's pushed `elicitation/create`: (mode, params) -> ElicitResult as JSON.
PushHandler = Callable[[Mode, Mapping[str, Any]], Awaitable[dict[str, Any]]]

_ANY = TypeAdapter(dict[str, Any])
_REQUESTS: dict[str, type[Any]] = {
    "tools/call": mcp_types.CallToolRequest,
    "prompts/get": mcp_types.GetPromptRequest,
    "resources/read": mcp_types.ReadResourceRequest,
}


# The raw result of the last round sent in this task (set by `_complete_by_default`'s wrapper, read by
# `Connection._send` when the SDK refuses it): a context variable, so rounds sent by other tasks never mix.
_RAW: ContextVar[dict[str, Any] | None] = ContextVar("askback_runtime_raw", default=None)
# True inside the runtime's own connections (their transport tasks inherit it): whose SDK records are quietened.
_OURS: ContextVar[bool] = ContextVar("askback_runtime_connection", default=False)
# The SDK's loggers that report a server's unreadable answer (with its traceback) before failing the request.
_SDK_LOGGERS = (
    "mcp.client.streamable_http",
    "mcp.client.session",
    "mcp.client.client",
    "mcp.shared.jsonrpc_dispatcher",
)


class _ServerInputRecords(logging.Filter):
    """Makes a record the SDK logs with a traceback, on one of the runtime's connections, one debug line.

    The SDK logs what it cannot parse in a server's answer with `logger.exception` (a full traceback on stderr when
    nobody configured logging) and then fails the request, which the runtime raises as one askback error: from a
    server's input, no traceback reaches the person's terminal. Records of other code using the SDK are untouched."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.levelno > logging.DEBUG and _OURS.get():
            exc = record.exc_info[1]
            summary = " ".join(str(exc).split())[:200] if exc is not None else ""
            record.msg, record.args = "%s (%s: %s)", (record.getMessage(), type(exc).__name__, summary)
            record.exc_info, record.exc_text, record.stack_info = None, None, None
            record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


@cache
def _quieten_sdk() -> None:
    quiet = _ServerInputRecords()
    for name in _SDK_LOGGERS:
        logging.getLogger(name).addFilter(quiet)


def validation_reason(exc: ValidationError) -> str:
    """What the SDK found wrong with a result, in a few words: where (by field names) and what, never the values."""
    parts: list[str] = []
    for error in exc.errors(include_url=False, include_input=False)[:3]:
        where = ".".join(
            str(p) if isinstance(p, int) else repr(str(p)).encode("ascii", "backslashreplace").decode()
            for p in error["loc"]
        )
        parts.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def declared_elicitation(modes: frozenset[Mode]) -> mcp_types.ElicitationCapability | None:
    """The elicitation capability for exactly these modes (None declares no elicitation at all)."""
    if not modes:
        return None
    return mcp_types.ElicitationCapability(
        form=mcp_types.FormElicitationCapability() if "form" in modes else None,
        url=mcp_types.UrlElicitationCapability() if "url" in modes else None,
    )


def _narrow(session: ClientSession, modes: frozenset[Mode], tasks: bool) -> None:
    built = session._build_capabilities  # pyright: ignore[reportPrivateUsage]

    def narrowed(version: str) -> mcp_types.ClientCapabilities:
        declared = built(version).model_copy(update={"elicitation": declared_elicitation(modes)})
        if not tasks or version not in MODERN_PROTOCOL_VERSIONS:
            return declared
        return declared.model_copy(update={"extensions": {**(declared.extensions or {}), TASKS_EXTENSION: {}}})

    session._build_capabilities = narrowed  # type: ignore[method-assign]  # pyright: ignore[reportPrivateUsage]


def _complete_by_default(session: ClientSession) -> None:
    dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage]
    send = dispatcher.send_raw_request

    async def sending(method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> dict[str, Any]:
        raw = await send(method, params, opts)
        if method in _REQUESTS:
            if "resultType" not in raw and session.protocol_version in MODERN_PROTOCOL_VERSIONS:
                raw = {**raw, "resultType": "complete"}
            _RAW.set(raw)
        return raw

    dispatcher.send_raw_request = sending  # type: ignore[method-assign]


class _NarrowClient(Client):
    """`Client` whose session declares only `modes` of elicitation (and the tasks extension when `tasks`), and reads
    a round's result with no `resultType` as complete."""

    def __init__(self, *args: Any, modes: frozenset[Mode], tasks: bool, **kwargs: Any) -> None:
        self._askback_modes = modes
        self._askback_tasks = tasks
        super().__init__(*args, **kwargs)

    async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
        session = await super()._build_session(exit_stack)
        _narrow(session, self._askback_modes, self._askback_tasks)
        _complete_by_default(session)
        return session


class _TaskRequest(mcp_types.Request[dict[str, Any], str]):
    """A `tasks/*` request: its `taskId` goes in the `Mcp-Name` header, as SEP-2663 requires over HTTP."""

    name_param = "taskId"


@dataclass
class Connection:
    """A connected client, for sending the rounds of calls."""

    client: Client
    http: LastStatus = field(default_factory=LastStatus, repr=False)
    _tools_listed: bool = field(default=False, init=False, repr=False)

    @property
    def protocol(self) -> str:
        """The negotiated protocol version."""
        return self.client.protocol_version

    @property
    def server_name(self) -> str | None:
        """The name the server gives itself (`serverInfo`), when it gave one on this connection (a resume, which
        skips `server/discover`, has none)."""
        info = self.client.server_info
        return None if info is None else info.name

    async def send(
        self,
        method: Method,
        target: str,
        arguments: Mapping[str, Any] | None,
        *,
        responses: Mapping[str, Any] | None = None,
        state: str | None = None,
        read_timeout: float | None = None,
    ) -> dict[str, Any]:
        """Send one round and return the result as JSON (by alias). A result with no `resultType` comes back with
        `resultType: "complete"` (see `_complete_by_default`). A JSON-RPC error is `MCPError`; a -32020 header
        mismatch on a tool call is recovered once, as the spec says, by listing the tools again (the `Mcp-Param-*`
        headers come from the listing) and resending. A round of questions the SDK refuses only for what is inside
        a question comes back as sent (its questions carry their `problem`); any other answer that cannot be read
        is `UnreadableResult`, and an HTTP error status without a JSON-RPC error is `HTTPFailure`."""
        if method == "tools/call" and not self._tools_listed and self.protocol in MODERN_PROTOCOL_VERSIONS:
            await self._learn_tools()
        try:
            try:
                return await self._send(method, target, arguments, responses, state, read_timeout)
            except MCPError as exc:
                if method != "tools/call" or exc.code != mcp_types.HEADER_MISMATCH:
                    raise
                await self.client.list_tools(cache_mode="refresh")
                return await self._send(method, target, arguments, responses, state, read_timeout)
        except MCPError as exc:
            raise_if_unreadable(exc)
            self.http.reraise(exc)

    async def _learn_tools(self) -> None:
        # A server that cannot list its tools can still be called: the call just goes without `Mcp-Param-*`
        # headers, and a -32020 then says so.
        self._tools_listed = True
        try:
            await self.list_tools()
        except (MCPError, ValidationError) as exc:
            log.info("could not list the tools of the server (%s); calling without Mcp-Param-* headers", exc)

    async def _send(
        self,
        method: Method,
        target: str,
        arguments: Mapping[str, Any] | None,
        responses: Mapping[str, Any] | None,
        state: str | None,
        read_timeout: float | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if method == "tools/call":
            params = {"name": target, "arguments": dict(arguments) if arguments is not None else None}
        elif method == "prompts/get":
            params = {"name": target, "arguments": {k: str(v) for k, v in (arguments or {}).items()} or None}
        else:
            params = {"uri": target}
        if responses:
            params["inputResponses"] = dict(responses)
        if state is not None:
            params["requestState"] = state
        request = _REQUESTS[method].model_validate({"method": method, "params": params})
        _RAW.set(None)
        try:
            raw = await self._as_json(request, read_timeout)
        except ValidationError as exc:
            sent = _RAW.get()
            if sent is None:
                raise UnreadableResult(validation_reason(exc)) from None
            if sent.get("resultType") != "input_required":
                raise UnreadableResult(f"it is not a {method} result ({validation_reason(exc)})") from None
            raw = sent
        result = dict(raw)
        # Every round is read by one rule, whether or not the SDK's own model took it (an empty key, or one too long
        # to keep, passes the SDK's).
        problem = unreadable_round(result) if result.get("resultType") == "input_required" else None
        if problem is not None:
            raise UnreadableResult(problem)
        result.setdefault("resultType", "complete")
        return result

    async def send_task(
        self, method: str, task_id: str, params: Mapping[str, Any] | None = None, *, read_timeout: float | None = None
    ) -> dict[str, Any]:
        """Send `tasks/get`, `tasks/update` or `tasks/cancel` for task `task_id`: the result as JSON. A JSON-RPC
        error is `MCPError`; an answer that cannot be read is `UnreadableResult`, as for a round; an HTTP error status
        without a JSON-RPC error is `HTTPFailure`."""
        request = _TaskRequest(method=method, params={"taskId": task_id, **(params or {})})
        try:
            raw = await self._as_json(request, read_timeout)
        except MCPError as exc:
            raise_if_unreadable(exc)
            self.http.reraise(exc)
        return dict(raw)

    async def _as_json(self, request: Any, read_timeout: float | None) -> dict[str, Any]:
        """Send `request` on the session and read its result as plain JSON: the runtime judges it itself."""
        raw: dict[str, Any] = await self.client.session.send_request(
            request,
            _ANY,  # type: ignore[type-var]
            request_read_timeout_seconds=read_timeout,
        )
        return raw

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool the server lists (also teaches the session each tool's `Mcp-Param-*` headers). On a
        2026-07-28 connection the SDK leaves out tools whose `x-mcp-header` annotations are invalid."""
        self._tools_listed = True
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _ in range(100):
            page = await self.client.list_tools(cursor=cursor, cache_mode="refresh")
            tools.extend(t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools


@asynccontextmanager
async def connect(
    server: str,
    *,
    modes: frozenset[Mode],
    protocol: str | None = None,
    headers: Mapping[str, str] | None = None,
    on_push: PushHandler | None = None,
    read_timeout: float | None = 30.0,
    client_name: str = "askback-runtime",
    client_version: str = "1",
    tasks: bool = True,
) -> AsyncIterator[Connection]:
    """Connect to the server at URL `server`, declaring exactly `modes` of elicitation, and on 2026-07-28 the tasks
    extension unless `tasks` is false (a server then never answers with a task).

    `protocol` pins a modern version already negotiated (a resume skips the `server/discover` probe), or is
    "legacy" (the 2025-11-25 handshake only); `None` negotiates (`auto`), falling back to the handshake. On a
    handshake-era connection `on_push` answers pushed questions.
    `headers` go on every HTTP request (e.g. authorization) and are never stored.
    """

    async def elicit(
        context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        mode: Mode = "url" if isinstance(params, mcp_types.ElicitRequestURLParams) else "form"
        if on_push is None or mode not in modes:
            return mcp_types.ErrorData(
                code=mcp_types.INVALID_PARAMS, message=f"this client does not show {mode} questions"
            )
        answer = await on_push(mode, params.model_dump(by_alias=True, mode="json", exclude_none=True))
        return mcp_types.ElicitResult.model_validate(answer)

    _quieten_sdk()
    ours = _OURS.set(True)
    try:
        async with AsyncExitStack() as stack:
            yield await _enter(
                stack, server, modes, protocol, headers, elicit, read_timeout, client_name, client_version, tasks
            )
    except BaseExceptionGroup as group:
        # The SDK client runs its transport in a task group, which wraps whatever ends the block (ours included)
        # in an exception group, often beside the transport's own view of the same failure (a read timeout there,
        # the request's timeout here): one exception is raised, the one that explains it best.
        raise _cause(group) from None
    finally:
        _OURS.reset(ours)


@cache
def _tls() -> ssl.SSLContext:
    # Building an SSL context loads the CA bundle (tens of milliseconds): every connection of the process shares one.
    return httpx2.create_ssl_context()


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


# By what explains an ended block best: the process being stopped, then askback's own errors (they carry the call
# and the round), what the seam read (`UnreadableResult`), then any other failure; a cancellation explains nothing.
_EXPLAINS: tuple[tuple[type[BaseException], ...], ...] = (
    (KeyboardInterrupt, SystemExit),
    (AskbackError,),
    (UnreadableResult,),
    (Exception,),
)


def _cause(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one exception of `group` that explains why the block ended (the group itself when it holds only
    cancellations, which the task groups around it understand)."""
    leaves = _leaves(group)
    for kinds in _EXPLAINS:
        for leaf in leaves:
            if isinstance(leaf, kinds):
                return leaf
    return group


async def _enter(
    stack: AsyncExitStack,
    server: str,
    modes: frozenset[Mode],
    protocol: str | None,
    headers: Mapping[str, str] | None,
    elicit: Any,
    read_timeout: float | None,
    client_name: str,
    client_version: str,
    tasks: bool,
) -> Connection:
    last = LastStatus()
    http = await stack.enter_async_context(
        httpx2.AsyncClient(
            headers=dict(headers or {}),
            timeout=httpx2.Timeout(read_timeout, read=read_timeout),
            verify=_tls(),
            event_hooks={"response": [last.note]},
        )
    )
    transport = streamable_http_client(server, http_client=http)
    client = _NarrowClient(
        transport,
        modes=modes,
        tasks=tasks,
        mode=protocol if protocol is not None else "auto",
        elicitation_callback=elicit,
        read_timeout_seconds=read_timeout,
        client_info=mcp_types.Implementation(name=client_name, version=client_version),
    )
    try:
        await stack.enter_async_context(client)
    except MCPError as exc:
        last.reraise(exc)
    # A resume (a pinned version) skips listing the tools first: a server that needs `Mcp-Param-*` headers says so
    # with -32020, and `send` lists the tools then, which costs a round trip only where it is needed.
    connection = Connection(client, last)
    connection._tools_listed = protocol is not None and protocol != "legacy"
    return connection
