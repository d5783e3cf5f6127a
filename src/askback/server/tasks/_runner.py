"""Running a task's handler in the background, on whichever instance holds the task's lease.

A task is run as a flow whose state lives in its row instead of a sealed `requestState`: each run reruns the handler
from the top with the answers so far (`askback.core.flow`, the same validation and re-asking as MRTR), and ends in
one decision (`settle`): completed with the tool result, failed with a JSON-RPC error, or waiting for answers
(`input_required`) with the questions under wire keys never used before in the task (`<key>.<round>`). Effects go
through `flow.once`, keyed by the task's own flow id, so a run taken over after a crash gets the recorded outcome
instead of running it again.

While the handler runs, the instance renews the task's lease every third of `ASKBACK_TASK_LEASE`. A renewal that
finds the task no longer its own (cancelled, or taken over after a stall) stops the run; an effect is not started
once the task is cancelled; and a run's end is written only while the task is still `working` under this lease.

The limits of an MRTR flow hold inside a task, decided by the same functions (`askback.core.round`): a run that
would ask one round more than `ASKBACK_MAX_ROUNDS` ends the task with `decide`'s "Stopped" result, and a task still
waiting for answers once its flow deadline has passed (`overdue`, measured as `admit` measures it) ends with the
"Expired" result, without its handler running again, when the next `tasks/update` or `tasks/get` finds it so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ClientCapabilities, ElicitResult, TextContent
from pydantic import ValidationError

from askback.audit import AuditEvent
from askback.audit.emit import emit, instance_id
from askback.core import flow as core_flow
from askback.core.caller import Caller, split_principal
from askback.core.round import End, Limits, admit, decide
from askback.errors import AskbackError, EffectInProgressError, StoreUnavailableError
from askback.server.effects import run_once
from askback.server.tasks._rows import TaskRecord, cancelled, change, read_task
from askback.server.tasks.status import TaskStatus

if TYPE_CHECKING:
    from askback.server.app import Askback
    from askback.store import Store

__all__ = ["RunEnd", "TaskRunner", "audit_events", "cancel", "lapse", "overdue", "settle", "wire_result"]

logger = logging.getLogger("askback")


class _Abandoned(BaseException):
    """The task is no longer this run's (cancelled, or its lease lost): stop without writing anything."""


def wire_result(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


def _error(exc: MCPError) -> dict[str, Any]:
    return exc.error.model_dump(by_alias=True, exclude_none=True, mode="json")


@dataclass(frozen=True)
class RunEnd:
    """How one run of a task's handler ended, for `settle`: a tool result, a JSON-RPC error, or questions.
    `reason`: why the flow ended before its handler returned (`declined`, or a limit: `too_many_rounds`, `expired`),
    which the audit records as the outcome, as it does for MRTR."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    asked: core_flow.Asked | None = None
    events: tuple[core_flow.FlowEvent, ...] = ()
    reason: str | None = None


def settle(record: TaskRecord, ended: RunEnd, *, owner: str, now: float) -> TaskRecord | None:
    """What the task becomes when a run under `owner`'s lease ends as `ended`; `None` when the task is no longer that
    run's to change (cancelled meanwhile, or taken over)."""
    if record.status != TaskStatus.WORKING or record.lease_owner != owner:
        return None
    return _finished(record, ended, now=now)


def overdue(record: TaskRecord, *, now: float, limits: Limits) -> End | None:
    """How a task waiting for answers (`input_required`) ends once its flow deadline has passed: `expired`'s end,
    decided by `admit` as for an MRTR answer (the flow's `started` plus `limits.flow_deadline`, against `now`).
    `None` while it may still wait, and for a task not waiting for answers: the deadline stops no running handler."""
    if record.status != TaskStatus.INPUT_REQUIRED:
        return None
    admission = admit(sealed=True, state=record.flow, recorded=None, now=now, limits=limits)
    return admission if isinstance(admission, End) else None


def lapse(record: TaskRecord, ended: RunEnd, *, now: float) -> TaskRecord | None:
    """What a task waiting for answers becomes when it ends as `ended` without its handler running again (its
    deadline passed): what `settle` makes of a run that ended so. `None` once it no longer waits (answered,
    cancelled)."""
    if record.status != TaskStatus.INPUT_REQUIRED:
        return None
    return _finished(record, ended, now=now)


def _finished(record: TaskRecord, ended: RunEnd, *, now: float) -> TaskRecord:
    done: dict[str, Any] = {"lease_owner": None, "lease_until": None, "updated_at": now, "responses": {}}
    if ended.asked is not None:
        asked = ended.asked
        n = asked.next_state.round
        outstanding = {f"{key}.{n}": {"key": key, "request": request} for key, request in asked.requests.items()}
        return record.moved(
            status=TaskStatus.INPUT_REQUIRED,
            status_message="Waiting for your answer.",
            flow=asked.next_state,
            outstanding=outstanding,
            **done,
        )
    if ended.error is not None:
        return record.moved(status=TaskStatus.FAILED, status_message=None, error=ended.error, outstanding={}, **done)
    return record.moved(status=TaskStatus.COMPLETED, status_message=None, result=ended.result, outstanding={}, **done)


def audit_events(record: TaskRecord, ended: RunEnd, *, at: float, instance: str) -> list[AuditEvent]:
    """What the audit trail records of a run that moved the task to `record`: the answers it took, then the
    questions it asked or how the task ended (`outcome`: its status)."""
    base: dict[str, Any] = {
        "at": at,
        "tool": record.tool,
        "flow_id": record.flow.flow_id,
        "principal": record.principal,
        "instance": instance,
        "scopes": record.scopes or None,
    }
    events = [
        AuditEvent("answered", keys=(e.key,), mode=e.mode, action=e.action, content=_content(e), **base)
        for e in ended.events
        if e.kind == "answered"
    ]
    if record.status == TaskStatus.INPUT_REQUIRED:
        keys = tuple(sorted(record.outstanding))
        events.append(AuditEvent("asked", round=record.flow.round, keys=keys, detail="in a task", **base))
    else:
        outcome = ended.reason or str(record.status)
        events.append(AuditEvent("completed", outcome=outcome, detail="a task", **base))
    return events


def _content(event: core_flow.FlowEvent) -> dict[str, Any] | None:
    return None if event.content is None else dict(event.content)


def _response(raw: Any) -> Any:
    try:
        return ElicitResult.model_validate(raw)
    except ValidationError:
        return raw


async def cancel(
    store: Store, task_id: str, *, now: float, instance: str
) -> tuple[TaskRecord | None, TaskRecord | None]:
    """The one cancel of `tasks/cancel` and `askback tasks cancel`: the row change `cancelled` makes and, when it
    ended the task, the audit trail's `completed` event for it (outcome `cancelled`). The task before and after the
    change (after is `None` when the task had ended already or is unknown)."""
    before, after = await change(store, task_id, lambda r: cancelled(r, now), now=now)
    if after is not None:
        events = audit_events(after, RunEnd(reason="cancelled"), at=now, instance=instance)
        for event in events:
            emit(event)
        await store.add_audit_many(events)
    return before, after


class TaskRunner:
    """The tasks this instance runs: started after a create, an answer that completes a round, or a takeover."""

    def __init__(self, app: Askback) -> None:
        self.app = app
        self._running: dict[str, asyncio.Task[None]] = {}

    @property
    def owner(self) -> str:
        """The lease holder this process writes: its instance id."""
        return instance_id()

    @property
    def lease(self) -> float:
        return self.app.settings.task_lease

    def running(self, task_id: str) -> bool:
        return task_id in self._running

    def start(self, task_id: str) -> None:
        """Run the task in the background here (this instance holds its lease), unless it already runs here."""
        if task_id in self._running:
            return
        task = asyncio.get_running_loop().create_task(self._drive(task_id))
        self._running[task_id] = task
        task.add_done_callback(lambda _: self._running.pop(task_id, None))

    def stop(self, task_id: str) -> None:
        """Stop the task's run here, if there is one (after a cancel)."""
        task = self._running.get(task_id)
        if task is not None:
            task.cancel()

    async def aclose(self) -> None:
        tasks = list(self._running.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            # Each run logged its own failure; closing goes on.
            with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                await task

    def past_deadline(self, record: TaskRecord, now: float) -> RunEnd | None:
        """How `record` ends when it waits for answers past its flow deadline (`overdue`), as a run's end with the
        tool's "Expired" result; `None` while it may still wait."""
        end = overdue(record, now=now, limits=self.app.limits)
        if end is None:
            return None
        return RunEnd(result=wire_result(self.app.end_result(record.tool, end.text)), reason=end.reason)

    async def audit(self, record: TaskRecord, ended: RunEnd, now: float) -> None:
        """Record in the audit trail the change `ended` made of the task, now `record`."""
        store = await self.app.store()
        events = audit_events(record, ended, at=now, instance=self.owner)
        for event in events:
            emit(event)
        await store.add_audit_many(events)

    async def _drive(self, task_id: str) -> None:
        try:
            store = await self.app.store()
            record = await read_task(store, task_id, now=self.app.clock.now())
            if record is None or record.status != TaskStatus.WORKING or record.lease_owner != self.owner:
                return
            ended = await self._run_holding_lease(record)
            if ended is None:
                return
            now = self.app.clock.now()
            _, after = await change(store, task_id, lambda r: settle(r, ended, owner=self.owner, now=now), now=now)
            if after is not None:
                await self.audit(after, ended, now)
        except asyncio.CancelledError:
            raise
        except AskbackError:
            # The lease runs out and the next `tasks/get` on any instance takes the task over.
            logger.exception("askback: the task run of %s stopped", task_id[:6])

    async def _run_holding_lease(self, record: TaskRecord) -> RunEnd | None:
        ended: RunEnd | None = None
        async with anyio.create_task_group() as tg:
            run_scope = anyio.CancelScope()

            async def renew() -> None:
                while True:
                    clock = self.app.clock
                    await clock.sleep_until(clock.now() + self.lease / 3)
                    if not await self._renew(record.task_id):
                        run_scope.cancel()
                        return

            tg.start_soon(renew)
            with run_scope:
                try:
                    ended = await self._run(record)
                except _Abandoned:
                    ended = None
            tg.cancel_scope.cancel()
        return ended

    async def _renew(self, task_id: str) -> bool:
        store = await self.app.store()
        now = self.app.clock.now()

        def extend(r: TaskRecord) -> TaskRecord | None:
            if r.status != TaskStatus.WORKING or r.lease_owner != self.owner:
                return None
            return r.moved(lease_until=now + self.lease)

        _, after = await change(store, task_id, extend, now=now)
        return after is not None

    async def _still_mine(self, task_id: str) -> None:
        store = await self.app.store()
        record = await read_task(store, task_id, now=self.app.clock.now())
        if record is None or record.status != TaskStatus.WORKING or record.lease_owner != self.owner:
            raise _Abandoned

    async def _run(self, record: TaskRecord) -> RunEnd | None:
        """One run of the handler from the top, with the task's answers so far (`None`: to be retried)."""
        app = self.app
        entry = app.catalogue[record.tool]
        handler = entry.handler
        store = await app.store()
        settings = app.settings

        async def run_effect(flow_id: str, name: str, fn: Callable[[], Awaitable[Any]]) -> Any:
            await self._still_mine(record.task_id)
            return await run_once(
                store, flow_id, name, fn, clock=app.clock, wait=settings.effect_wait, lease=settings.effect_lease
            )

        try:
            kwargs = entry.arguments(dict(record.arguments))
        except ValidationError as exc:
            return RunEnd(result=wire_result(_tool_error(f"Invalid arguments for tool {record.tool}: {exc}")))
        caller = (
            None
            if record.principal is None
            else Caller(record.principal, frozenset(record.scopes), issuer=split_principal(record.principal)[0])
        )
        accounts = None if app.accounts_port is None else app.accounts_port(record.principal)
        responses: Mapping[str, Any] = {k: _response(v) for k, v in record.responses.items()}
        flow = core_flow.Flow(
            tool=record.tool,
            arguments=kwargs,
            capabilities=ClientCapabilities.model_validate(record.capabilities),
            state=record.flow,
            responses=responses,
            now=app.clock.now(),
            run_effect=run_effect,
            accounts=accounts,
            new_id=app.new_id,
            caller=caller,
        )
        call = dict(kwargs)
        if handler.flow_param is not None:
            call[handler.flow_param] = flow
        try:
            end = await self._ended(record, flow, lambda: handler.fn(**call))
        finally:
            if accounts is not None:
                with anyio.CancelScope(shield=True):
                    await accounts.aclose()
        return None if end is None else dataclasses.replace(end, events=core_flow.run_events(flow))

    async def _ended(self, record: TaskRecord, flow: core_flow.Flow, fn: Callable[[], Awaitable[Any]]) -> RunEnd | None:
        app = self.app
        try:
            outcome = await core_flow.run(flow, fn, new_id=app.new_id)
        except (_Abandoned, asyncio.CancelledError):
            raise
        except MCPError as exc:
            return RunEnd(error=_error(exc))
        except (EffectInProgressError, StoreUnavailableError):
            # Retryable: the task stays working, and once the lease runs out the next `tasks/get` reruns it.
            logger.warning("askback: the run of task %s... stopped for now; it is retried", record.task_id[:6])
            return None
        except AskbackError as exc:
            if exc.tool_error:
                return RunEnd(result=wire_result(_tool_error(str(exc))))
            return RunEnd(error=_error(exc.to_mcp_error()))
        except ToolError as exc:
            return RunEnd(result=wire_result(_tool_error(str(exc))))
        except Exception as exc:
            logger.exception("askback: the tool %r of a task raised", record.tool)
            return RunEnd(result=wire_result(_tool_error(f"Error executing tool {record.tool}: {exc}")))
        if isinstance(outcome, core_flow.Returned):
            return RunEnd(result=wire_result(app.tool_result(record.tool, outcome.value)))
        if isinstance(outcome, core_flow.Ended):
            return RunEnd(result=wire_result(app.end_result(record.tool, outcome.text)), reason=outcome.reason)
        if isinstance(outcome, core_flow.Refused):
            return RunEnd(error=_error(outcome.error.to_mcp_error()))
        decision = decide(outcome, limits=app.limits)
        if isinstance(decision, End):
            return RunEnd(result=wire_result(app.end_result(record.tool, decision.text)), reason=decision.reason)
        return RunEnd(asked=outcome)


def _tool_error(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
