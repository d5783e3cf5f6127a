"""Carries out a resume's plan (`resume_plan`): each step it yields is performed against the store (`ParkedCalls`),
the clock or the call's server, and its result sent back, until the plan ends. The resume's I/O, and none of its
decisions.

Requests go out on one connection, opened for the plan's first request and kept until the plan ends. A request the
server refuses is the plan's to judge (`Refused`); one that fails otherwise ends the connection with it, so that the
SDK says what ended it, and the plan is sent that failure, worded (`_wire.explained`) for the round the request
belonged to: the step's own, never state kept on the connection.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, cast

import anyio
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT

from askback.clock import Clock
from askback.runtime._outcomes import Outcome
from askback.runtime._sdk import Connection, Method
from askback.runtime._wire import explained
from askback.runtime.call_record import CallRecord
from askback.runtime.parked_calls import ParkedCalls
from askback.runtime.resume_plan import Plan
from askback.runtime.resume_steps import (
    Answered,
    AskedKeys,
    CancelTask,
    Claim,
    Complete,
    Fail,
    Failed,
    Log,
    ParkAgain,
    Raise,
    Refused,
    Release,
    Reload,
    Request,
    SendRound,
    Snapshot,
    Step,
    UpdateTask,
    Wait,
)

__all__ = ["Connector", "ResumeDriver"]

log = logging.getLogger("askback.runtime")

Connector = Callable[[CallRecord], AbstractAsyncContextManager[Connection]]
"""A connection to a call's server, as the SDK gives it: what the SDK raises comes out of it as it is."""


@dataclass(frozen=True)
class _Ended:
    end: Outcome | Raise


def _advance(plan: Plan, result: Any) -> Step | _Ended:
    try:
        return plan.send(result)
    except StopIteration as stop:
        return _Ended(stop.value)


@dataclass(frozen=True)
class ResumeDriver:
    """Performs resume plans for calls in `calls`, on `clock`, sending requests on connections from `connect` and
    waiting at most `timeout` seconds for each answer."""

    calls: ParkedCalls
    clock: Clock
    connect: Connector
    timeout: float | None

    async def snapshot(self, call_id: str) -> Snapshot:
        """The call as the store keeps it now, with its round's answers (`UnknownCallError` when there is none)."""
        call = await self.calls.get(call_id)
        return Snapshot(call, await self.calls.answers(call_id, call.round), self.clock.now())

    async def run(self, call: CallRecord, plan: Plan) -> Outcome:
        """Perform `plan`'s steps for `call` until it ends: what the call came to, or the error it ends with."""
        step = _advance(plan, None)
        while not isinstance(step, _Ended):
            if isinstance(step, Request):
                step = await self._online(call, plan, step)
            else:
                step = _advance(plan, await self._perform(step))
        if isinstance(step.end, Raise):
            raise step.end.error
        return step.end

    async def _online(self, call: CallRecord, plan: Plan, first: Request) -> Step | _Ended:
        """Perform the plan's steps on one connection, from `first` until the plan ends or a request fails."""
        step: Step | _Ended = first
        asking: Request | None = first  # the connection is opened for it
        connected = False
        try:
            async with self.connect(call) as conn:
                connected = True
                while not isinstance(step, _Ended):
                    if isinstance(step, Request):
                        asking = step
                        result = await self._ask(conn, call, step)
                        asking = None
                    else:
                        result = await self._perform(step)
                    step = _advance(plan, result)
        except BaseException as exc:
            if asking is None:
                if isinstance(step, _Ended) and isinstance(exc, Exception):
                    # What the call came to is recorded already; only the connection's end went wrong.
                    log.warning("call %s: its connection ended with an error after the resume", call.id, exc_info=True)
                    return step
                raise  # a step of the store or the clock, or the plan itself: not the server's
            sending = asking.round if connected else None
            error = explained(exc, call.server, sending, call_id=call.id, resuming=True, timeout=self.timeout)
            return _advance(plan, Failed(error))
        return step

    async def _ask(self, conn: Connection, call: CallRecord, step: Request) -> Answered | Refused:
        try:
            if isinstance(step, SendRound):
                result = await conn.send(
                    cast(Method, call.method),
                    call.target,
                    call.arguments,
                    responses=step.responses,
                    state=step.state,
                    read_timeout=self.timeout,
                )
            elif isinstance(step, UpdateTask):
                params = {"inputResponses": dict(step.responses)}
                result = await conn.send_task("tasks/update", step.task_id, params, read_timeout=self.timeout)
            else:
                request = "tasks/cancel" if isinstance(step, CancelTask) else "tasks/get"
                result = await conn.send_task(request, step.task_id, read_timeout=self.timeout)
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise  # it ends the connection, and `explained` says what became of the call
            return Refused(exc.code, exc.message, exc.data)
        return Answered(result, self.clock.now())

    async def _perform(self, step: Step) -> Any:
        calls = self.calls
        if isinstance(step, Claim):
            return await calls.claim(step.call_id, step.round, now=step.now, lease=step.lease)
        if isinstance(step, ParkAgain):
            return await calls.settle(
                step.call_id,
                step.claim,
                round_=step.round,
                sent=step.sent,
                outcome=step.pending,
                deadline=step.deadline,
                now=step.now,
                task=step.task,
            )
        if isinstance(step, Complete):
            return await calls.settle(
                step.call_id, step.claim, round_=step.round, sent=step.sent, outcome=step.result, now=step.now
            )
        if isinstance(step, Fail):
            return await calls.settle(
                step.call_id,
                step.claim,
                round_=step.round,
                sent=step.sent,
                outcome=None,
                error=step.error,
                now=step.now,
            )
        if isinstance(step, Release):
            with anyio.CancelScope(shield=True):  # also as the process is being stopped: the claim must go back
                await calls.release(step.call_id, step.claim)
            return None
        if isinstance(step, Reload):
            return await self.snapshot(step.call_id)
        if isinstance(step, AskedKeys):
            return frozenset(k for r in await calls.rounds(step.call_id) for k in r["asked"].get("inputRequests") or {})
        if isinstance(step, Wait):
            await self.clock.sleep_until(step.until)
            return None
        assert isinstance(step, Log), step
        log.info("%s", step.message)
        return None
