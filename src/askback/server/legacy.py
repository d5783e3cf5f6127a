"""The 2025-11-25 bridge: the same handlers, with each round's questions pushed on the open session.

An older client cannot take `input_required` results. For its requests the round's plan (`askback.core.round_plan`,
the same plan as for 2026-07-28) runs the handler here, in this process: each round's questions are pushed as
`elicitation/create` requests (`push_questions`), the answers come back on the same session, and the handler reruns
with them. The flow state never leaves the server.

A pushed question holds the call (and its memory) until the client answers, so the wait ends at the flow deadline
like any other, and the questions waiting at once are capped per session and per process.
"""

from __future__ import annotations

import typing
from contextlib import contextmanager
from typing import Any

import anyio
from mcp_types import ElicitResult, InputRequiredResult
from mcp_types.version import is_version_at_least

from askback.clock import Clock
from askback.core.capabilities import MRTR_REVISION
from askback.core.round_plan import NotPushed, Push, Pushed
from askback.core.state import FlowState

__all__ = ["PendingPushes", "modern", "push_questions"]


def modern(version: str | None) -> bool:
    """True for requests of 2026-07-28 or later (and in-process calls with no version), which take questions in
    `input_required` results; older sessions get them pushed."""
    return version is None or is_version_at_least(version, MRTR_REVISION)


class PendingPushes:
    """How many 2025-11-25 questions are pushed and waiting for an answer, in this process and per session; each
    holds a call open, so both are capped."""

    def __init__(self, total: int, per_session: int) -> None:
        self.total_cap = total
        self.session_cap = per_session
        self.total = 0
        self.by_session: dict[int, int] = {}

    @contextmanager
    def slot(self, session: object) -> typing.Iterator[bool]:
        """A place for one more pending question (`True`), or `False` when a cap is reached."""
        key = id(session)
        if self.total >= self.total_cap or self.by_session.get(key, 0) >= self.session_cap:
            yield False
            return
        self.total += 1
        self.by_session[key] = self.by_session.get(key, 0) + 1
        try:
            yield True
        finally:
            self.total -= 1
            left = self.by_session[key] - 1
            if left:
                self.by_session[key] = left
            else:
                del self.by_session[key]


async def push_questions(
    step: Push,
    *,
    session: Any,
    request_id: Any,
    pushes: PendingPushes,
    clock: Clock,
) -> Pushed | NotPushed:
    """Push one round's questions (`step.requests`) one by one and wait for each answer, until `step.deadline`. The
    round's plan (`askback.core.round_plan`) reruns the handler with the answers, or ends the flow."""
    state = step.state
    responses: dict[str, Any] = {}
    # The questions as the wire types read them, as a 2026-07-28 client would get them.
    asked = InputRequiredResult.model_validate({"inputRequests": dict(step.requests)})
    for key, request in (asked.input_requests or {}).items():
        params = request.params.model_dump(by_alias=True, exclude_none=True) if request.params else {}
        # The SDK's `session` is a per-request proxy; the `initialize` params it exposes belong to the
        # connection, so they identify the session across its requests.
        with pushes.slot(session.client_params or session) as free:
            if not free:
                return NotPushed("too_many_pending", clock.now())
            answer = await _push_until(session, request_id, clock, step.deadline, state, key, params)
        if answer is None:
            return NotPushed("expired", clock.now())
        responses[key] = answer
    return Pushed(responses, clock.now())


async def _push_until(
    session: Any, request_id: Any, clock: Clock, deadline: float, state: FlowState, key: str, params: dict[str, Any]
) -> ElicitResult | None:
    """Push one question and wait for its answer until `deadline`; `None` when the deadline came first (the pushed
    request is then abandoned: its waiter and the call's memory are released)."""
    answer: ElicitResult | None = None
    async with anyio.create_task_group() as tg:  # noqa: ABK105 - the 2025-11-25 bridge itself

        async def stop_at_deadline() -> None:
            await clock.sleep_until(deadline)
            tg.cancel_scope.cancel()

        tg.start_soon(stop_at_deadline)
        if params.get("mode") == "url":
            # 2025-11-25 URL mode needs an elicitationId; the flow's own id keeps it unique per question.
            answer = await session.elicit_url(  # noqa: ABK101 - the 2025-11-25 bridge itself
                message=params["message"],
                url=params["url"],
                elicitation_id=f"{state.flow_id}.{key}.{state.round}",  # noqa: ABK103
                related_request_id=request_id,
            )
        else:
            answer = await session.elicit_form(  # noqa: ABK101 - the 2025-11-25 bridge itself
                message=params["message"],
                requested_schema=params["requestedSchema"],
                related_request_id=request_id,
            )
        tg.cancel_scope.cancel()
    return answer
