"""The tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) as the SDK serves it: an `Extension` whose
`intercept_tool_call` turns a call of a task tool into a durable task, and which serves `tasks/get`, `tasks/update`
and `tasks/cancel`. `tasks/result` and `tasks/list` are left unbound, so the SDK answers them -32601.

A call becomes a task only when its tool allows it (`tool(task="optional" | "required")`) and the request declares
the extension in its client capabilities; the row is committed before `CreateTaskResult` is returned, so `tasks/get`
resolves the id from then on, on every instance. Questions a tool lists in `ask_first` are asked as ordinary MRTR
rounds on `tools/call` before the task exists (`_first`: sealed state, validation and audit as MRTR), and the round
that brings their answers opens the task, which goes on as that flow. Any other `tools/call` that carries a
`requestState` continues an MRTR flow begun without the extension, so it goes on in MRTR rounds even when it declares
the extension now (an optional task tool; a required one never began such a flow). A task is bound to the
principal that created it: another principal's id reads as unknown (-32602), like an expired one.

A task still waiting for answers past its flow deadline is ended (`completed`, "Expired") by the `tasks/update` that
brings answers too late, or else by the next `tasks/get`: lazily, with no scheduler.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver.server import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams, ClientCapabilities, InputResponse, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, TypeAdapter, ValidationError

from askback.audit import AuditEvent
from askback.core.caller import Caller, missing_scopes
from askback.core.state import FlowState
from askback.errors import AskbackError, InsufficientScopeError, InvalidParamsError, LimitReachedError
from askback.server._tools import log_failure
from askback.server.auth import caller_of
from askback.server.tasks._account_waits import AccountWaits
from askback.server.tasks._approval_waits import ApprovalWaits
from askback.server.tasks._first import began_first, first_round
from askback.server.tasks._host import TaskHost
from askback.server.tasks.rows import TaskRecord, change, insert_task, prune, read_task
from askback.server.tasks.runner import RunEnd, TaskRunner, cancel, lapse, task_config
from askback.server.tasks.status import TERMINAL, TaskStatus
from askback.store import Store

__all__ = ["CANCEL_META", "TASKS_EXTENSION", "TasksExtension", "iso_time", "new_task_id", "task_view"]

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
_PRUNE_EVERY = 60.0
# Where a `tasks/cancel` acknowledgement says what the cancel did (SEP-2663 keeps the task's fields out of it).
CANCEL_META = "askback/cancel"
_NOT_CANCELLED = (
    "Not cancelled: the task had already started its work (an effect), so it runs on and ends with its result. "
    "Read it with tasks/get."
)
_ENDED = "Not cancelled: the task had ended already. Read how with tasks/get."


class TaskIdParams(RequestParams):
    task_id: str = Field(alias="taskId")


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


_ANSWER: TypeAdapter[Any] = TypeAdapter(cast(Any, InputResponse))


def _answers(given: Mapping[str, Any], outstanding: Mapping[str, Any]) -> dict[str, Any]:
    """The answers `given` to the keys the task waits on, as JSON, each validated as the SDK validates an MRTR
    call's `inputResponses` (-32602, the same error, when one is not an answer: the task stays as it was). Answers
    to other keys are ignored, whatever they hold."""
    answers: dict[str, Any] = {}
    for wire, raw in given.items():
        if wire not in outstanding:
            continue
        try:
            answer = _ANSWER.validate_python(raw)
        except ValidationError:
            # What the SDK answers an MRTR `tools/call` whose `inputResponses` do not validate.
            raise MCPError(code=INVALID_PARAMS, message="Invalid request parameters", data="") from None
        answers[wire] = answer.model_dump(by_alias=True, exclude_none=True, mode="json")
    return answers


def new_task_id() -> str:
    """A task id nobody can guess, with a prefix so that it never starts with "-" (a shell would read it as an
    option of `askback tasks cancel`)."""
    return "task_" + secrets.token_urlsafe(24)


def iso_time(at: float) -> str:
    """`at` (epoch seconds) as the ISO-8601 UTC time the wire carries, to the millisecond."""
    return datetime.fromtimestamp(at, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def task_view(record: TaskRecord) -> dict[str, Any]:
    """The task's fields on the wire (`CreateTaskResult` without its `resultType`)."""
    view: dict[str, Any] = {
        "taskId": record.task_id,
        "status": str(record.status),
        "createdAt": iso_time(record.created_at),
        "lastUpdatedAt": iso_time(record.updated_at),
        "ttlMs": record.ttl_ms,
        "pollIntervalMs": record.poll_ms,
    }
    if record.status_message is not None:
        view["statusMessage"] = record.status_message
    return view


def _detailed(record: TaskRecord) -> dict[str, Any]:
    view = {"resultType": "complete", **task_view(record)}
    if record.status == TaskStatus.INPUT_REQUIRED:
        view["inputRequests"] = {wire: dict(entry["request"]) for wire, entry in record.outstanding.items()}
    if record.status == TaskStatus.COMPLETED and record.result is not None:
        view["result"] = dict(record.result)
    if record.status == TaskStatus.FAILED and record.error is not None:
        view["error"] = dict(record.error)
    return view


def _unknown() -> Exception:
    # The id is the client's own text: none of it is echoed (a terminal or a log would act on its escapes).
    return InvalidParamsError(
        "Invalid params: there is no such task for this caller (unknown, expired, or another user's). "
        "Call the tool again to start a new task."
    ).to_mcp_error()


def _too_many(most: int) -> LimitReachedError:
    return LimitReachedError(
        f"Too many tasks: you already hold {most} tasks that have not ended, the most one caller may hold. Wait for "
        "one to end (tasks/get) or cancel one (tasks/cancel), then call the tool again.",
        limit=most,
    )


def _principal() -> str | None:
    caller = caller_of(get_access_token())
    return caller.principal if caller is not None else None


def _declares(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request declares the extension, on the 2026-07-28 wire (a task is not a 2025-11-25 result)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    capabilities = ctx.session.client_capabilities
    return bool(capabilities is not None and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def _on_the_wire(
    fn: Callable[[ServerRequestContext[Any, Any], Any], Awaitable[HandlerResult]],
) -> Callable[[ServerRequestContext[Any, Any], Any], Awaitable[HandlerResult]]:
    """`fn` behind the extension's gate, with askback's errors (a store that cannot be reached) turned into the
    JSON-RPC errors they are. A `tasks/*` request that does not declare the extension is refused with `-32021`
    before any task is looked up (SEP-2575's missing required capability), whatever its task id."""

    async def handler(ctx: ServerRequestContext[Any, Any], params: Any) -> HandlerResult:
        require_client_extension(ctx, TASKS_EXTENSION)
        try:
            return await fn(ctx, params)
        except AskbackError as exc:
            raise exc.to_mcp_error() from exc

    return handler


class TasksExtension(Extension):
    """The tasks extension of one `Askback` app, advertised as exactly `{}`."""

    identifier = TASKS_EXTENSION

    def __init__(self, app: TaskHost) -> None:
        self.app = app
        self.runner = TaskRunner(lambda: task_config(app))
        self.account_waits = AccountWaits(self.runner)
        self.approval_waits = ApprovalWaits(self.runner, lambda: app.round_config.approvals)
        self._pruned_at = float("-inf")

    async def start(self, store: Store) -> None:
        """When the store opens: with task tools and connected accounts, resume the tasks waiting only for an account
        once it connects (`AccountWaits`); with task tools and approvals, the tasks waiting for an approval once it
        is decided (`ApprovalWaits`)."""
        if self.app.task_tools and self.app.accounts_port is not None:
            await self.account_waits.start(store)
        if self.app.task_tools and self.app.round_config.approvals is not None:
            self.runner.approval_waits = self.approval_waits
            await self.approval_waits.start(store)

    async def aclose(self) -> None:
        await self.account_waits.aclose()
        await self.approval_waits.aclose()
        self.runner.approval_waits = None
        await self.runner.aclose()

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskIdParams, _on_the_wire(self._get)),
            MethodBinding("tasks/update", TaskUpdateParams, _on_the_wire(self._update)),
            MethodBinding("tasks/cancel", TaskIdParams, _on_the_wire(self._cancel)),
        )

    def refuse_without_extension(self, tool: str, ctx: ServerRequestContext[Any, Any]) -> None:
        """The one rule for a task tool run where no task can be made: a `task="required"` tool whose request does not
        declare the extension is refused with -32021 naming it (SEP-2575), whether it is called directly or through
        the META exposure's `execute_tool`. Any other tool may run inline."""
        declared = self.app.task_tools.get(tool)
        if declared is not None and declared[0] == "required" and not _declares(ctx):
            require_client_extension(ctx, TASKS_EXTENSION)

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        try:
            return await self._call(params, ctx, call_next)
        except AskbackError as exc:
            log_failure(params.name, exc)
            raise exc.to_mcp_error() from exc

    async def _call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        app = self.app
        declared = app.task_tools.get(params.name)
        if declared is None:
            return await call_next(ctx)
        support, asks_first = declared
        if not _declares(ctx):
            self.refuse_without_extension(params.name, ctx)
            if params.request_state is not None and began_first(params.request_state):
                # Its questions were asked for a task: only a client following the task can go on with them.
                require_client_extension(ctx, TASKS_EXTENSION)
            return await call_next(ctx)
        if support == "optional" and params.request_state is not None and not began_first(params.request_state):
            # A retry of an MRTR flow that began without the extension: its answers are in its state, and a new task
            # would ask them again, so it goes on as it began.
            return await call_next(ctx)
        caller = caller_of(get_access_token())
        needed = app.tool_scopes.get(params.name, ())
        if missing_scopes(caller.scopes if caller is not None else frozenset(), needed):
            raise InsufficientScopeError(
                f"the tool {params.name!r} needs the scope(s) {' '.join(needed)}, which this caller's token does not "
                "grant",
                scopes=needed,
            )
        arguments = dict(params.arguments or {})
        try:
            app.catalogue[params.name].arguments(arguments)
        except ValidationError:
            return await call_next(ctx)
        capabilities = ctx.session.client_capabilities

        async def open_task(flow: FlowState) -> dict[str, Any]:
            return await self._open(params.name, arguments, caller, capabilities, flow)

        if not asks_first:
            return await open_task(FlowState(flow_id=app.new_id(), started=app.clock.now()))
        asked = await first_round(
            app.round_config,
            params.name,
            asks_first,
            caller,
            capabilities=capabilities,
            plaintext=params.request_state,
            responses=params.input_responses,
            open_task=open_task,
        )
        if isinstance(asked, dict):
            return asked
        return asked.model_dump(by_alias=True, exclude_none=True, mode="json")

    async def _open(
        self,
        tool: str,
        arguments: dict[str, Any],
        caller: Caller | None,
        capabilities: ClientCapabilities | None,
        flow: FlowState,
    ) -> dict[str, Any]:
        """Make the task, committed before its view (the flat `CreateTaskResult`) is returned, and run it here.
        `flow`: what its handler starts from (the answers asked before it, if any); its deadline counts from now."""
        app = self.app
        store = await app.store()
        now = app.clock.now()
        await self._prune(store, now)
        settings = app.settings
        record = TaskRecord(
            task_id=new_task_id(),
            principal=caller.principal if caller is not None else None,
            scopes=tuple(sorted(caller.scopes)) if caller is not None else (),
            tool=tool,
            arguments=arguments,
            capabilities=capabilities.model_dump(by_alias=True, exclude_none=True, mode="json") if capabilities else {},
            status=TaskStatus.WORKING,
            status_message=None,
            created_at=now,
            updated_at=now,
            expires_at=now + settings.task_ttl,
            ttl_ms=int(settings.task_ttl * 1000),
            poll_ms=settings.task_poll_interval,
            flow=replace(flow, started=now),
            outstanding={},
            responses={},
            lease_owner=self.runner.owner,
            lease_until=now + settings.task_lease,
            actors=caller.actors if caller is not None else (),
        )
        if not await insert_task(store, record, most=settings.tasks_per_principal):
            raise _too_many(settings.tasks_per_principal)
        self.runner.start(record.task_id, record)
        return {"resultType": "task", **task_view(record)}

    async def _prune(self, store: Store, now: float) -> None:
        """Delete expired tasks, at most once a minute per process (an expired task reads as unknown anyway)."""
        if now - self._pruned_at >= _PRUNE_EVERY:
            self._pruned_at = now
            await prune(store, now=now)

    async def _mine(self, task_id: str) -> TaskRecord:
        store = await self.app.store()
        record = await read_task(store, task_id, now=self.app.clock.now())
        if record is None or record.principal != _principal():
            raise _unknown()
        return record

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        store = await self.app.store()
        now = self.app.clock.now()
        await self._prune(store, now)
        record = await self._mine(params.task_id)
        if record.status == TaskStatus.INPUT_REQUIRED or record.awaited_approvals:
            record = await self._lapse(record, now)
        if record.awaited_approvals:
            # An expiry is noticed on read only, with no event before: this read of the request writes it.
            if await self.approval_waits.check(store, record):
                record = await self._mine(params.task_id)
            return _detailed(record)
        stalled = record.lease_until is None or record.lease_until < now
        if record.status == TaskStatus.WORKING and stalled and not self.runner.running(record.task_id):
            record = await self._take_over(record, now)
        return _detailed(record)

    async def _lapse(self, record: TaskRecord, now: float) -> TaskRecord:
        """End a task that waited for answers past its flow deadline (as its next `tasks/get` finds it), and audit it;
        the task as it now stands."""
        ended = self.runner.past_deadline(record, now)
        if ended is None:
            return record
        store = await self.app.store()
        before, after = await change(
            store, record.task_id, lambda r: lapse(r, ended, now=now), now=now, audit=self.runner.audit(ended, now)
        )
        return before or record if after is None else after

    async def _take_over(self, record: TaskRecord, now: float) -> TaskRecord:
        """Take the lease of a working task whose instance stopped renewing it, and rerun its handler here."""
        store = await self.app.store()
        owner, lease = self.runner.owner, self.app.settings.task_lease

        def take(r: TaskRecord) -> TaskRecord | None:
            if r.status != TaskStatus.WORKING or (r.lease_until is not None and r.lease_until >= now):
                return None
            return r.moved(lease_owner=owner, lease_until=now + lease)

        before, after = await change(store, record.task_id, take, now=now)
        if after is not None:
            self.runner.start(record.task_id, after)
            return after
        return before or record

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> HandlerResult:
        if not params.input_responses:
            await self._mine(params.task_id)
            return {}
        store = await self.app.store()
        now = self.app.clock.now()
        owner, lease = self.runner.owner, self.app.settings.task_lease
        principal = _principal()
        late: RunEnd | None = None

        # The task is read once, locked: whose it is, whether it waits, and what it becomes.
        def answer(r: TaskRecord) -> TaskRecord | None:
            nonlocal late
            if r.principal != principal or r.status != TaskStatus.INPUT_REQUIRED:
                return None
            given = _answers(params.input_responses or {}, r.outstanding)
            late = self.runner.past_deadline(r, now)
            if late is not None:
                return lapse(r, late, now=now)
            taken = {wire: entry for wire, entry in r.outstanding.items() if wire in given}
            if not taken:
                return None
            responses = {**r.responses, **{entry["key"]: given[wire] for wire, entry in taken.items()}}
            left = {wire: entry for wire, entry in r.outstanding.items() if wire not in taken}
            if left:
                return r.moved(outstanding=left, responses=responses, updated_at=now)
            return r.moved(
                status=TaskStatus.WORKING,
                status_message=None,
                outstanding={},
                responses=responses,
                updated_at=now,
                lease_owner=owner,
                lease_until=now + lease,
            )

        def audited(after: TaskRecord) -> list[AuditEvent]:
            # Answers too late end the task as its deadline does, audited with the change.
            return [] if late is None else self.runner.audit(late, now)(after)

        before, after = await change(store, params.task_id, answer, now=now, audit=audited)
        if before is None or before.principal != principal:
            raise _unknown()
        if after is None or late is not None:
            return {}
        if after.status == TaskStatus.WORKING:
            self.runner.start(after.task_id, after)
        elif self.runner.on_waiting is not None:
            # Left waiting only for links, perhaps of accounts that connected while it waited for this answer too.
            await self.runner.on_waiting(store, after)
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> HandlerResult:
        """The empty acknowledgement SEP-2663 asks for, telling in its `_meta` (`askback/cancel`) what the cancel
        did: the task's status after it, and a message when it had ended already or had started an effect."""
        record = await self._mine(params.task_id)
        if record.status in TERMINAL:
            return _cancel_ack(record, _ENDED)
        store = await self.app.store()
        now = self.app.clock.now()
        before, after = await cancel(store, record.task_id, now=now, instance=self.runner.owner)
        if after is not None:
            self.runner.stop(record.task_id)
            if before is not None and before.awaited_approvals:
                await self.approval_waits.withdraw(before)
            return _cancel_ack(after, None)
        found = before or record
        return _cancel_ack(found, _ENDED if found.status in TERMINAL else _NOT_CANCELLED)


def _cancel_ack(record: TaskRecord, message: str | None) -> HandlerResult:
    told: dict[str, Any] = {"status": str(record.status)}
    if message is not None:
        told["message"] = message
    return {"_meta": {CANCEL_META: told}}
