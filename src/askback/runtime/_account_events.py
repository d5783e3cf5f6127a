"""How an account event (or an approval's decision) resumes parked calls: which calls wait for exactly that account, and what each is sent.

An event (`AccountActive`) names a server, a principal, a connection and a label. The calls it concerns are that
principal's parked calls made to that server whose round asks the link for exactly that account
(`questions.account_question`: the label's default is `""` on both sides). Each is sent back with the link left
unanswered (`questions.look_decision`): a signed event is a hint to look, not a fact, and the server reads the
account's real status. Connected, the call goes on. Not connected (a replayed or early event, an account that
failed since), the server asks for the account again and the call parks on that round with the new link, waiting as
before, until the deadline it had: an event never ends a call, and never gives it more time. A link a person has
already answered is sent as they answered it, and a round past its deadline is resumed as `Runtime.resume` resumes
it (its unanswered questions answered `cancel`): an event does not bring back a call the person let expire.

Each call is tried on its own: one that cannot go on (its server down or refusing) stays as it was, for its own
retry, and the others go on; `ResumeDueError` then carries what each came to.

A call the server made a task of is not sent back: a task's round cannot be sent back to look. An askback server
resumes such a task itself once the account connects (docs/tasks.md), and the runtime's polling sees it move on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from askback.core.server_urls import same_server
from askback.errors import CallError, ResumeDueError
from askback.runtime._outcomes import AccountActive, ApprovalDecided, Outcome, Parked
from askback.runtime.call_record import CallRecord
from askback.runtime.parked_calls import ParkedCalls
from askback.runtime.questions import ParkedQuestion, account_question, approval_question

# How a call is sent back: `resume(call_id)` as `Runtime.resume` sends it, `look(call_id, key)` with the link `key`
# left unanswered for the server to look at the account itself.
Resume = Callable[[str], Awaitable[Outcome]]
Look = Callable[[str, str], Awaitable[Outcome]]

__all__ = ["account_active", "approval_decided", "same_server"]

log = logging.getLogger("askback.runtime")


async def account_active(calls: ParkedCalls, resume: Resume, look: Look, event: AccountActive) -> list[Outcome]:
    """Send back every call of `calls` waiting for exactly `event`'s account (see the module's docstring); what each
    came to. `ResumeDueError` when some could not go on, once every call has been tried."""
    return await _waiting_on(calls, resume, look, event)


async def approval_decided(calls: ParkedCalls, resume: Resume, look: Look, event: ApprovalDecided) -> list[Outcome]:
    """Send back every call of `calls` waiting on exactly `event`'s approval request (its status link left unanswered,
    as for an account: the server reads the decision itself); what each came to, as `account_active` says."""
    return await _waiting_on(calls, resume, look, event)


def _question(record: CallRecord, event: AccountActive | ApprovalDecided) -> ParkedQuestion | None:
    if isinstance(event, ApprovalDecided):
        return approval_question(record.questions, approval_id=event.approval_id)
    return account_question(record.questions, connection=event.connection, label=event.label)


async def _waiting_on(
    calls: ParkedCalls, resume: Resume, look: Look, event: AccountActive | ApprovalDecided
) -> list[Outcome]:
    outcomes: list[Outcome] = []
    errors: dict[str, CallError] = {}
    records = [r async for page in calls.pages(principal=event.principal) for r in page]
    for record in records:
        if record.task_id is not None or (event.server is not None and not same_server(record.server, event.server)):
            continue
        question = _question(record, event)
        if question is None:
            continue
        try:
            outcomes.append(await _send_back(calls, resume, look, record, question.key))
        except CallError as exc:
            errors[record.id] = exc
    if errors:
        waiting = "the approval" if isinstance(event, ApprovalDecided) else "the account"
        raise ResumeDueError(outcomes, errors, of=f"calls waiting for {waiting}")
    return outcomes


async def _send_back(calls: ParkedCalls, resume: Resume, look: Look, record: CallRecord, key: str) -> Outcome:
    if key in await calls.answers(record.id, record.round):
        return await resume(record.id)  # the person's own answer, not yet sent
    # Past its deadline the look is not taken: the round is resumed as `resume` does (`look_decision`).
    outcome = await look(record.id, key)
    if isinstance(outcome, Parked) and outcome.round > record.round:
        log.info("call %s: the account is not connected yet; it waits again on round %d", record.id, outcome.round)
    return outcome
