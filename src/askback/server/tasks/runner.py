"""Running a task's handler in the background, on whichever instance holds the task's lease.

A task is run as a flow whose state lives in its row instead of a sealed `requestState`. Each run goes through the
same round plan as an MRTR call (`askback.server.round.run_task_round`, `RoundRequest.task`): the handler reruns
from the top with the answers so far, with the same validation and re-asking, limits (`decide`'s "Stopped"), error
mapping (`failure`: a crash reads "Error executing tool <name>", never the exception's text) and audit notes. Its
outcome ends in one decision (`settle`): completed with the tool result, failed with a JSON-RPC error, or waiting for
answers (`input_required`) with the questions under wire keys never used before in the task (`<key>.<round>`).
The run is given a frozen `TaskConfig` (the app's `RoundConfig`, its tools, the lease), not the app.

Effects go through `flow.once`, keyed by the task's own flow id, so a run taken over after a crash gets the recorded
outcome instead of running it again. Each effect is claimed in one transaction with the task's row, only while the
task is still `working` under this run's lease (`rows.claim_effect`, which marks the row at the first claim, a mark
no release clears); a cancel takes the same lock and ends the task only while it has no such mark
(`rows.cancelled`). So a cancel either comes first (the run stops at its next effect, which never starts) or finds an
effect started (the task runs on and ends with its result): no effect of a `cancelled` task ever started. While the handler runs, the instance renews the task's lease every third of
`ASKBACK_TASK_LEASE`; a renewal that finds the task no longer its own stops the run, and a run's end is written only
while the task is still `working` under this lease (one conditional write), with its audit events in the same
transaction (`rows.settle_run`). A run starts from the row as the request that started it has just written it.

A task still waiting for answers once its flow deadline has passed (`overdue`, measured as `admit` measures it) ends
with the "Expired" result, without its handler running again, when the next `tasks/update` or `tasks/get` finds it
so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import anyio
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ClientCapabilities, ElicitResult
from pydantic import ValidationError

from askback.audit import AuditEvent
from askback.audit.emit import emit_all, instance_id
from askback.core import round_plan as plan
from askback.core.approving import approval_links
from askback.core.round import End, Limits, admit
from askback.core.state import FlowState
from askback.errors import AskbackError, EffectInProgressError, StoreUnavailableError
from askback.server._catalogue import argument_problems
from askback.server._tools import log_failure
from askback.server.round import Abandoned, Handler, RoundConfig, TaskRun, failure, run_task_round
from askback.server.tasks import rows
from askback.server.tasks._host import TaskHost
from askback.server.tasks.rows import TaskRecord, change, read_task, task_caller
from askback.server.tasks.status import TaskStatus
from askback.store import EffectClaim

if TYPE_CHECKING:
    from askback.store import Store

__all__ = [
    "RunEnd",
    "TaskConfig",
    "TaskRunner",
    "TaskTool",
    "audit_events",
    "cancel",
    "lapse",
    "overdue",
    "settle",
    "wire_result",
]

logger = logging.getLogger("askback")


def wire_result(result: CallToolResult) -> dict[str, Any]:
    return result.model_dump(by_alias=True, exclude_none=True, mode="json")


def _error(exc: MCPError) -> dict[str, Any]:
    return exc.error.model_dump(by_alias=True, exclude_none=True, mode="json")


@dataclass(frozen=True)
class TaskTool:
    """What a task needs of one tool: its handler, and how its stored arguments become the handler's (validated
    as the SDK validates a call's)."""

    handler: Handler
    arguments: Callable[[Mapping[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class TaskConfig:
    """What every task run of one app is carried out with: the rounds' configuration, the task tools, the lease."""

    round: RoundConfig
    tools: Callable[[str], TaskTool]
    lease: float


def task_config(app: TaskHost) -> TaskConfig:
    """The app's `TaskConfig`, from its `RoundConfig` (built on first use, once every extension is in)."""

    def tool(name: str) -> TaskTool:
        entry = app.catalogue[name]
        return TaskTool(entry.handler, entry.arguments)

    return TaskConfig(round=app.round_config, tools=tool, lease=app.settings.task_lease)


@dataclass(frozen=True)
class RunEnd:
    """How one run of a task's handler ended, for `settle`: a tool result, a JSON-RPC error, or questions (`asked`,
    by the flow's key, asked under `next_state`). `reason`: why the flow ended before its handler returned (a limit:
    `expired`; `cancelled`), which the audit records as the outcome, as it does for MRTR."""

    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    asked: Mapping[str, Any] | None = None
    next_state: FlowState | None = None
    reason: str | None = None
    # The shared event log's newest id when the run started, kept with the questions it asks (`events_after`).
    events_from: int | None = None
    # When every question asked is an approval's status link: the request each waits on, by the flow's key, and the
    # status message the task waits with (`working`, no lease: `_approval_waits`).
    awaiting: Mapping[str, str] | None = None
    waiting: str | None = None


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
    if record.status != TaskStatus.INPUT_REQUIRED and not record.awaited_approvals:
        return None
    admission = admit(sealed=True, state=record.flow, recorded=None, now=now, limits=limits)
    return admission if isinstance(admission, End) else None


def lapse(record: TaskRecord, ended: RunEnd, *, now: float) -> TaskRecord | None:
    """What a task waiting for answers becomes when it ends as `ended` without its handler running again (its
    deadline passed): what `settle` makes of a run that ended so. `None` once it no longer waits (answered,
    cancelled)."""
    if record.status != TaskStatus.INPUT_REQUIRED and not record.awaited_approvals:
        return None
    return _finished(record, ended, now=now)


def _finished(record: TaskRecord, ended: RunEnd, *, now: float) -> TaskRecord:
    done: dict[str, Any] = {"lease_owner": None, "lease_until": None, "updated_at": now, "responses": {}}
    if ended.asked is not None and ended.next_state is not None:
        n = ended.next_state.round
        since = {} if ended.events_from is None else {"events_after": ended.events_from}
        if ended.awaiting is not None:
            # Nobody answers an approval's link in a task: it waits `working`, with no lease, for the decision.
            waits = {
                f"{key}.{n}": {"key": key, "request": request, "approval": ended.awaiting[key]}
                for key, request in ended.asked.items()
            }
            return record.moved(
                status=TaskStatus.WORKING,
                status_message=ended.waiting or "Waiting for approval.",
                flow=ended.next_state,
                outstanding=waits,
                **done,
            )
        outstanding = {f"{key}.{n}": {"key": key, "request": request, **since} for key, request in ended.asked.items()}
        return record.moved(
            status=TaskStatus.INPUT_REQUIRED,
            status_message="Waiting for your answer.",
            flow=ended.next_state,
            outstanding=outstanding,
            **done,
        )
    if ended.error is not None:
        return record.moved(status=TaskStatus.FAILED, status_message=None, error=ended.error, outstanding={}, **done)
    return record.moved(status=TaskStatus.COMPLETED, status_message=None, result=ended.result, outstanding={}, **done)


def audit_events(record: TaskRecord, ended: RunEnd, *, at: float, instance: str) -> list[AuditEvent]:
    """What the audit trail records of a task that ended without its handler running (`record`: cancelled, or
    expired while it waited): its `completed` event, whose outcome is the reason, or else the task's status."""
    outcome = ended.reason or str(record.status)
    event = AuditEvent(
        "completed",
        at=at,
        tool=record.tool,
        flow_id=record.flow.flow_id,
        principal=record.principal,
        instance=instance,
        scopes=record.scopes or None,
        outcome=outcome,
        detail="a task",
    )
    return [event]


def _response(raw: Any) -> Any:
    try:
        return ElicitResult.model_validate(raw)
    except ValidationError:
        return raw


def ended_by(tool: str, outcome: plan.RoundEnd) -> RunEnd | None:
    """What a task's run comes to, from its plan's outcome: the result or the questions it answers, or the JSON-RPC
    error or tool error an MRTR call of `tool` would answer for the same exception (`failure`). `None` when the run
    is to be retried (the database, or an effect still running elsewhere: the lease runs out and the next
    `tasks/get` reruns it) or stopped (cancelled)."""
    if isinstance(outcome, plan.Reply):
        result = outcome.result
        if isinstance(result, CallToolResult):
            return RunEnd(result=wire_result(result))
        # As an MRTR call puts them on the wire.
        asked = result.model_dump(by_alias=True, exclude_none=True, mode="json")["inputRequests"]
        return RunEnd(asked=asked, next_state=outcome.next_state)
    error = outcome.error
    if _retried(error) or isinstance(error, Abandoned | asyncio.CancelledError):
        return None
    answer = failure(tool, error)
    if isinstance(answer, MCPError):
        return RunEnd(error=_error(answer))
    return RunEnd(result=wire_result(answer))


def _retried(error: BaseException) -> bool:
    """Whether a run that raised `error` is tried again (the task stays `working` until its lease runs out)."""
    return isinstance(error, EffectInProgressError | StoreUnavailableError)


async def cancel(
    store: Store, task_id: str, *, now: float, instance: str
) -> tuple[TaskRecord | None, TaskRecord | None]:
    """The one cancel of `tasks/cancel` and `askback tasks cancel`: the row change `cancelled` makes (none once the
    task has started an effect) and, when it ended the task, the audit trail's `completed` event for it (outcome
    `cancelled`), written with it. The task before and after the change (after is `None` when the task had ended
    already, had started an effect, or is unknown)."""
    ended = RunEnd(reason="cancelled")
    return await rows.cancel(
        store, task_id, now=now, audit=lambda after: audit_events(after, ended, at=now, instance=instance)
    )


class Resumed(Protocol):
    """What a waiting task's row becomes when it goes on under `owner`'s lease (`None`: it stays as it is)."""

    def __call__(
        self, record: TaskRecord, *, owner: str, lease: float, now: float, limits: Limits
    ) -> TaskRecord | None: ...


class ApprovalWaitsHook(Protocol):
    """What the runner asks of the tasks waiting for approvals (`_approval_waits.ApprovalWaits`)."""

    async def message(self, record: TaskRecord, ids: Iterable[str]) -> str: ...

    async def check(self, store: Store, record: TaskRecord) -> bool: ...


class TaskRunner:
    """The tasks this instance runs: started after a create, an answer that completes a round, or a takeover.
    `config`: the app's `TaskConfig`, asked for when a task first needs it (the app builds it once)."""

    def __init__(self, config: Callable[[], TaskConfig]) -> None:
        self._make_config = config
        self._config: TaskConfig | None = None
        self._running: dict[str, asyncio.Task[None]] = {}
        # Started again while running here: run once more when the current run ends.
        self._again: set[str] = set()
        # Told of every task a run here left waiting for answers, right after that write (`AccountWaits.check`).
        self.on_waiting: Callable[[Store, TaskRecord], Awaitable[object]] | None = None
        # Told of every task a run here left waiting for approvals; gives its status message.
        self.approval_waits: ApprovalWaitsHook | None = None

    @property
    def config(self) -> TaskConfig:
        if self._config is None:
            self._config = self._make_config()
        return self._config

    @property
    def owner(self) -> str:
        """The lease holder this process writes: its instance id."""
        return instance_id()

    @property
    def lease(self) -> float:
        return self.config.lease

    def running(self, task_id: str) -> bool:
        return task_id in self._running

    async def go_on(self, store: Store, task_id: str, resumed: Resumed, why: str) -> bool:
        """Move the waiting task `task_id` back to `working` under this instance's lease, when `resumed` (given the
        task's row as it is now, this lease and the limits) says it may, then run it here; whether this instance won
        it (one conditional write: of several instances seeing the same event, one wins). `why`: for the log."""
        rounds = self.config.round
        owner, lease, limits = self.owner, self.lease, rounds.policy.limits
        now = rounds.clock.now()
        _, after = await change(
            store, task_id, lambda r: resumed(r, owner=owner, lease=lease, now=now, limits=limits), now=now
        )
        if after is None:
            return False
        logger.info("askback: task %s... goes on: %s", task_id[:6], why)
        self.start(task_id, after)
        return True

    def start(self, task_id: str, record: TaskRecord | None = None) -> None:
        """Run the task in the background here (this instance holds its lease); when it already runs here, run it
        once more after that run ends (which has written its end by then, or is about to). `record`: the task as the
        caller has just written it (it need not be read again); otherwise the run reads it."""
        if task_id in self._running:
            self._again.add(task_id)
            return
        task = asyncio.get_running_loop().create_task(self._drive(task_id, record))
        self._running[task_id] = task

        def done(_: object) -> None:
            self._running.pop(task_id, None)
            self._again.discard(task_id)

        task.add_done_callback(done)

    async def idle(self, task_id: str) -> None:
        """Wait until this instance no longer runs the task (at once when it does not), its end written: for a caller
        that must see what the run did without polling the store (a benchmark, a test)."""
        while (task := self._running.get(task_id)) is not None:
            await asyncio.wait({task})

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
        rounds = self.config.round
        end = overdue(record, now=now, limits=rounds.policy.limits)
        if end is None:
            return None
        return RunEnd(result=wire_result(rounds.end_result(record.tool, end.text)), reason=end.reason)

    def audit(self, ended: RunEnd, now: float) -> Callable[[TaskRecord], list[AuditEvent]]:
        """What the audit trail records of the end `ended` gives a task without its handler running, for `change` to
        write with the task's new row."""
        return lambda record: audit_events(record, ended, at=now, instance=self.owner)

    async def _drive(self, task_id: str, record: TaskRecord | None) -> None:
        again = True
        while again:
            self._again.discard(task_id)
            await self._drive_once(task_id, record)
            record = None  # run again: the row as it is now
            again = task_id in self._again

    async def _drive_once(self, task_id: str, record: TaskRecord | None) -> None:
        rounds = self.config.round
        try:
            store = await rounds.store()
            if record is None:
                record = await read_task(store, task_id, now=rounds.clock.now())
            if record is None or record.status != TaskStatus.WORKING or record.lease_owner != self.owner:
                return
            # Read before the handler reads anything: what happens from here on is after this id in the log.
            since = None if self.on_waiting is None else await store.events.latest_event_id()
            run = await self._run_holding_lease(record)
            ended = None if run is None else ended_by(record.tool, run.outcome)
            if run is not None and ended is not None and isinstance(run.outcome, plan.Raise):
                log_failure(record.tool, run.outcome.error)
            if run is None or ended is None:
                if run is not None and isinstance(run.outcome, plan.Raise) and _retried(run.outcome.error):
                    logger.warning("askback: the run of task %s... stopped for now; it is retried", task_id[:6])
                return
            ended = dataclasses.replace(ended, events_from=since)
            awaiting = None
            if self.approval_waits is not None and ended.asked is not None and ended.next_state is not None:
                awaiting = approval_links(ended.asked, ended.next_state)
            if awaiting is not None and self.approval_waits is not None:
                waiting = await self.approval_waits.message(record, awaiting.values())
                ended = dataclasses.replace(ended, awaiting=awaiting, waiting=waiting)
            # Settled from the row the run started from: nothing but this run changes a task while it works under
            # this lease, and the write checks that it still does.
            after = settle(record, ended, owner=self.owner, now=rounds.clock.now())
            if after is not None and not await rows.settle_run(store, after, owner=self.owner, events=run.events):
                after = None
            if after is not None:
                emit_all(run.events)
            if after is not None and after.status == TaskStatus.INPUT_REQUIRED and self.on_waiting is not None:
                # What happened while the handler ran (an account connected) was not this task's to see then.
                await self.on_waiting(store, after)
            if after is not None and after.awaited_approvals and self.approval_waits is not None:
                # A decision committed before that write was not this task's to see then.
                await self.approval_waits.check(store, after)
        except asyncio.CancelledError:
            raise
        except AskbackError:
            # The lease runs out and the next `tasks/get` on any instance takes the task over.
            logger.exception("askback: the task run of %s stopped", task_id[:6])

    async def _run_holding_lease(self, record: TaskRecord) -> TaskRun | None:
        ran: TaskRun | None = None
        async with anyio.create_task_group() as tg:
            run_scope = anyio.CancelScope()

            async def renew() -> None:
                clock = self.config.round.clock
                while True:
                    await clock.sleep_until(clock.now() + self.lease / 3)
                    if not await self._renew(record.task_id):
                        run_scope.cancel()
                        return

            tg.start_soon(renew)
            with run_scope:
                try:
                    ran = await self._run(record)
                except Abandoned:
                    ran = None
            tg.cancel_scope.cancel()
        return ran

    async def _renew(self, task_id: str) -> bool:
        rounds = self.config.round
        store = await rounds.store()
        now = rounds.clock.now()

        def extend(r: TaskRecord) -> TaskRecord | None:
            if r.status != TaskStatus.WORKING or r.lease_owner != self.owner:
                return None
            return r.moved(lease_until=now + self.lease)

        _, after = await change(store, task_id, extend, now=now)
        return after is not None

    async def _run(self, record: TaskRecord) -> TaskRun:
        """One run of the handler from the top through the round plan, with the task's answers so far."""
        config = self.config
        rounds = config.round
        tool = config.tools(record.tool)
        store = await rounds.store()
        owner = self.owner

        async def claim(flow_id: str, name: str, at: float, lease: float | None) -> EffectClaim:
            found = await rows.claim_effect(
                store, record.task_id, owner=owner, flow_id=flow_id, name=name, at=at, lease=lease
            )
            if found is None:
                raise Abandoned
            return found

        try:
            arguments = tool.arguments(dict(record.arguments))
        except ValidationError as exc:
            # Checked when the task was made: only a tool whose signature changed since gets here.
            return TaskRun(plan.Raise(ToolError(argument_problems(exc)), ()), ())
        return await run_task_round(
            rounds,
            tool.handler,
            arguments,
            task_caller(record),
            capabilities=ClientCapabilities.model_validate(record.capabilities),
            state=record.flow,
            responses={k: _response(v) for k, v in record.responses.items()},
            claim_effect=claim,
        )
