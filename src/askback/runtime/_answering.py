"""How a person's answer meets its question: `checked` fits an answer to its question (refused when it does not
fit), `interactive_for` finds the renderer that answers a question while the call waits, and `held_answer` answers
a question a 2025-11-25 server pushed on an open connection.

A pushed question cannot be parked (it lives on its connection): an interactive renderer answers it at once, or it
is held in this process's memory only (`Runtime.held`) until answered there or cancelled at its deadline.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import anyio

from askback.clock import Clock
from askback.errors import CallError, InvalidAnswerError, UnansweredError
from askback.runtime._outcomes import Held
from askback.runtime.forms import validate
from askback.runtime.questions import Answer, Mode, Origin, ParkedQuestion
from askback.runtime.renderers import Interactive, Renderer

__all__ = ["checked", "held_answer", "interactive_for", "pushed_question"]

log = logging.getLogger("askback.runtime")


def checked(question: ParkedQuestion, answer: Answer) -> Answer:
    """`answer` as it may be sent for `question`: only an accept carries content, a form's checked against its
    schema (`InvalidAnswerError` when it does not fit), a URL question's empty."""
    if answer.action != "accept":
        return Answer(answer.action)
    if question.problem is not None:
        raise InvalidAnswerError(
            f"question {question.key!r} cannot be accepted: {question.problem}. Decline or cancel it"
        )
    if question.mode == "form":
        return Answer("accept", validate(question.schema, answer.content))
    if question.mode == "url":
        if answer.content:
            raise InvalidAnswerError("a URL question is accepted without content")
        return Answer("accept")
    raise InvalidAnswerError(f"question {question.key!r} ({question.method}) cannot be answered by a person")


def interactive_for(renderers: Sequence[Renderer], question: ParkedQuestion) -> Interactive | None:
    """The first interactive renderer that shows `question`'s mode, if any."""
    for renderer in renderers:
        if isinstance(renderer, Interactive) and question.mode in renderer.modes:
            return renderer
    return None


def pushed_question(ref: str, mode: Mode, params: Mapping[str, Any], origin: Origin) -> ParkedQuestion:
    """A 2025-11-25 server's pushed `elicitation/create` as a question, known by `ref`."""
    return ParkedQuestion(
        call_id=ref,
        round=1,
        key="push",
        method="elicitation/create",
        mode=mode,
        message=str(params.get("message", "")),
        schema=params.get("requestedSchema") if mode == "form" else None,
        url=params.get("url") if mode == "url" else None,
        params=params,
        origin=origin,
    )


async def held_answer(
    question: ParkedQuestion,
    *,
    call_id: str,
    principal: str,
    target: str,
    renderers: Sequence[Renderer],
    held: MutableMapping[str, Held],
    clock: Clock,
    answer_wait: float,
) -> Answer:
    """The answer to a pushed `question` of call `call_id`: from an interactive renderer at once, else from whoever
    answers it while it is in `held` (under its `call_id`, its ref), else `cancel` after `answer_wait` seconds."""
    renderer = interactive_for(renderers, question)
    if renderer is not None:
        while True:
            try:
                return checked(question, await renderer.ask(question))
            except UnansweredError:
                # A pushed question cannot be parked: the call ends here, unanswered (never a cancel sent).
                raise CallError(
                    f"call {call_id}: a 2025-11-25 server pushed a question that was left unanswered; such a "
                    "question lives on its connection and cannot be parked, so the call ends here"
                ) from None
            except InvalidAnswerError as exc:
                log.info("answer to a pushed question of call %s refused: %s", call_id, exc)
    ref = question.call_id
    deadline = clock.now() + answer_wait
    waiting = Held(question, principal, target, deadline)
    held[ref] = waiting
    log.warning(
        "call %s: a 2025-11-25 server pushed a %s question; it is held in this process's memory only (the "
        "connection must stay open) as %s until answered here or cancelled at its deadline",
        call_id,
        question.mode,
        ref,
    )
    try:
        async with anyio.create_task_group() as tg:

            async def at_deadline() -> None:
                await clock.sleep_until(deadline)
                tg.cancel_scope.cancel()

            tg.start_soon(at_deadline)
            await waiting.answered.wait()
            tg.cancel_scope.cancel()
    finally:
        held.pop(ref, None)
    return waiting.answer or Answer("cancel")
