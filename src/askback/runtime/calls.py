"""The agent runtime: call a tool, prompt or resource on any MCP server; when the server asks a person, park the
call durably and resume it, in any process, once the answers are in or the deadline has passed.

    runtime = await Runtime.open("sqlite:///agent.db", renderers=[WebInbox()])
    outcome = await runtime.call_tool("https://tools.example.com/mcp", "deploy", {"env": "prod"}, principal="ada")
    if isinstance(outcome, Parked):     # the process may exit now; the call waits in the store
        ...
    # later, anywhere: the person answered in the inbox
    outcome = await runtime.resume(outcome.call_id)

Each round (2026-07-28) is sent by hand and its `InputRequiredResult` is kept as the server sent it, so a resume is
the spec's retry: the answers under the server's keys and `requestState` echoed byte for byte, from any process.
A resume is a plan (`resume_plan`: can this round be sent, with what, and what the server's answer means, as data)
carried out by `resume_driver` against the store, the clock and the server. It is claimed in the store first, so two
processes resuming one round send it once.

Against a 2025-11-25 server, questions are pushed on an open connection and cannot outlive it: they go to the
interactive renderers, or wait in this process's memory only (`held`) until answered here or cancelled at their
deadline. That is logged, once per question.

Its parts: what a call comes back as (`_outcomes`), the round on the wire with the mapping of the SDK's failures to
askback's errors (`_wire`, worded by `call_errors`), how answers meet their questions (`_answering`), the resume
(`resume_plan`, `resume_steps`, `resume_driver`), and what a task a server makes of a call means (`_tasks`).
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Literal

from askback.clock import Clock, SystemClock
from askback.core.capabilities import MRTR_REVISION
from askback.errors import CallError, CallStateError, InvalidAnswerError, ResumeDueError, UnansweredError
from askback.runtime import _account_events, _answering, _sdk
from askback.runtime._outcomes import AccountActive, ApprovalDecided, Claimed, Completed, Held, Outcome, Parked, Pending
from askback.runtime._tasks import is_task, made, waiting_round
from askback.runtime._wire import explaining, send
from askback.runtime.call_status import CallStatus, Move, allows
from askback.runtime.parked_calls import MIGRATIONS, CallRecord, ParkedCalls, new_call_id
from askback.runtime.questions import Answer, CheckedLink, Mode, Origin, ParkedQuestion, checked_link
from askback.runtime.renderers import Interactive, Renderer, declared_modes
from askback.runtime.resume_driver import ResumeDriver
from askback.runtime.resume_plan import resume_plan
from askback.runtime.resume_steps import Limits
from askback.settings import Settings, load_settings
from askback.store import Store

__all__ = [
    "AccountActive",
    "ApprovalDecided",
    "Claimed",
    "Completed",
    "Held",
    "Outcome",
    "Parked",
    "Pending",
    "Runtime",
]

log = logging.getLogger("askback.runtime")

_MODERN = MRTR_REVISION


class Runtime:
    """Calls MCP servers on people's behalf and parks the calls that wait on them. Make one with `Runtime.open`.

    `renderers` decide what the runtime declares (the union of their modes) and who answers: interactive ones
    answer while the call waits; with none, a call that asks comes back `Parked`. `headers(server)` gives HTTP
    headers for a server (authorization); they are never stored. `era="legacy"` speaks only the 2025-11-25
    handshake (for servers that answer nothing else); `"auto"` negotiates and falls back to it. `timeout` is how long
    to wait for each of a server's answers (`ServerTimeoutError` after it: a parked call stays parked as it was).
    """

    def __init__(
        self,
        store: Store,
        *,
        renderers: Sequence[Renderer] = (),
        clock: Clock | None = None,
        settings: Settings | None = None,
        headers: Callable[[str], Mapping[str, str]] | None = None,
        timeout: float | None = 30.0,
        era: Literal["auto", "legacy"] = "auto",
    ) -> None:
        self.store = store
        self.calls = ParkedCalls(store.database)
        self.renderers = tuple(renderers)
        self.modes = declared_modes(self.renderers)
        self.clock: Clock = clock or SystemClock()
        self.settings = settings or load_settings()
        self.headers = headers
        self.timeout = timeout
        self.era = era
        self.held: dict[str, Held] = {}
        lease = self.settings.resume_lease
        if timeout is None or 2 * timeout >= lease:
            # A resume holds its claim for the lease; a round still waited for past it can be taken over and sent
            # again by another process (a cancel's wait sends two requests under one claim).
            log.warning(
                "a server's answer may be waited for %s, longer than half ASKBACK_RESUME_LEASE (%g s): another "
                "process can take a slow resume over and send its round again; keep the timeout under %g s",
                "without end" if timeout is None else f"{timeout:g} s",
                lease,
                lease / 2,
            )
        self._account_hooks: list[Callable[[AccountActive], Awaitable[None]]] = []

    @classmethod
    async def open(cls, url: str | None = None, *, migrate: bool | None = None, **kwargs: Any) -> Runtime:
        """Open the runtime's store at `url` (default: the settings' database URL). SQLite is migrated on open;
        PostgreSQL only by `askback db upgrade` (or `migrate=True`)."""
        settings = kwargs.get("settings") or load_settings()
        kwargs["settings"] = settings
        store = await Store.open(url or settings.database_url, migrate=migrate, components=(MIGRATIONS,))
        return cls(store, **kwargs)

    async def close(self) -> None:
        await self.store.close()

    async def __aenter__(self) -> Runtime:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # Calls -------------------------------------------------------------------------------------------------

    async def call_tool(
        self,
        server: str,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        principal: str,
        run_id: str | None = None,
    ) -> Completed | Parked:
        """Call tool `name` on the server at URL `server` on behalf of `principal` (who answers its questions)."""
        return await self._call(server, "tools/call", name, arguments, principal=principal, run_id=run_id)

    async def get_prompt(
        self,
        server: str,
        name: str,
        arguments: Mapping[str, str] | None = None,
        *,
        principal: str,
        run_id: str | None = None,
    ) -> Completed | Parked:
        """Get prompt `name`; its questions are parked like a tool's."""
        return await self._call(server, "prompts/get", name, arguments, principal=principal, run_id=run_id)

    async def read_resource(
        self, server: str, uri: str, *, principal: str, run_id: str | None = None
    ) -> Completed | Parked:
        """Read the resource `uri`; its questions are parked like a tool's."""
        return await self._call(server, "resources/read", uri, None, principal=principal, run_id=run_id)

    async def list_tools(self, server: str) -> list[dict[str, Any]]:
        """The tools the server at URL `server` lists, as JSON; on a 2026-07-28 server, without those whose
        `x-mcp-header` annotations are invalid (the spec says not to call them)."""
        connection = self._connect(server, principal="", call_id="tools/list")
        async with explaining(
            connection, server, call_id="tools/list", sends=None, resuming=False, read_timeout=self.timeout
        ) as conn:
            return await conn.list_tools()

    async def _call(
        self,
        server: str,
        method: _sdk.Method,
        target: str,
        arguments: Mapping[str, Any] | None,
        *,
        principal: str,
        run_id: str | None,
    ) -> Completed | Parked:
        call_id = new_call_id()
        connection = self._connect(server, principal=principal, call_id=call_id, target=target, arguments=arguments)
        async with explaining(
            connection, server, call_id=call_id, sends=1, resuming=False, read_timeout=self.timeout
        ) as conn:
            outcome = await send(
                conn, method, target, arguments, call_id=call_id, round_=1, modes=self.modes, read_timeout=self.timeout
            )
            task: tuple[str, float] | None = None
            if is_task(outcome):  # the server made a task of the call: parked on round 1, waiting on the server
                task = made(outcome, server=server, call_id=call_id, kept="nothing was kept")
                outcome = waiting_round(task[0], outcome)
            elif conn.protocol != _MODERN:
                # 2025-11-25: questions are pushed on this connection, answered in-process (see `held`).
                return Completed(call_id, outcome, rounds=1)
            now = self.clock.now()
            record = await self.calls.add(
                call_id=call_id,
                run_id=run_id,
                principal=principal,
                server=server,
                protocol=conn.protocol,
                method=method,
                target=target,
                arguments=arguments,
                outcome=outcome,
                sent=None,
                deadline=now + self.settings.answer_wait,
                now=now,
                server_name=conn.server_name,
                task=task,
            )
        # No connection stays open while people answer (which may take minutes, or end with a Ctrl-C that must not
        # wait on a server's goodbye): each later round opens its own, without the discovery round trip.
        return await self._after(record)

    async def _after(self, record: CallRecord) -> Completed | Parked:
        """A call just recorded or resumed: complete, or parked; interactive renderers answer it here, round after
        round, and it goes on."""
        while True:
            if record.status == CallStatus.COMPLETED:
                return Completed(record.id, record.result or {}, rounds=record.round)
            if await self.answer_here(record.id, by=record.principal) > 0:
                return await self._resume_parked(record.id)
            outcome = await self._resume(record.id)
            if not isinstance(outcome, Parked):
                return outcome if isinstance(outcome, Completed) else await self._resume_parked(record.id)
            record = await self.calls.get(record.id)

    async def _resume_parked(self, call_id: str) -> Parked:
        record = await self.calls.get(call_id)
        answered = await self.calls.answers(call_id, record.round)
        return self._parked(record, missing=tuple(q.key for q in record.questions if q.key not in answered))

    async def answer_here(self, call_id: str, *, by: str | None = None, keys: Sequence[str] | None = None) -> int:
        """Ask this runtime's interactive renderers (terminal, callback) every unanswered question of the call's
        current round they can show (only `keys`, when given); an answer that does not fit is asked again. Returns
        how many questions of the round still wait. A renderer that gets no answer (`UnansweredError`, e.g. the end
        of the terminal's input) leaves that question and the rest of the round unanswered: the call stays parked."""
        record = await self.calls.get(call_id)
        if not allows(record.status, Move.ANSWER):
            return 0
        answered = await self.calls.answers(call_id, record.round)
        waiting, unanswered = 0, False
        for question in record.questions:
            if question.key in answered:
                continue
            renderer = None if unanswered else _answering.interactive_for(self.renderers, question)
            if renderer is None or (keys is not None and question.key not in keys):
                waiting += 1
                continue
            while True:
                try:
                    answer = await renderer.ask(question)
                except UnansweredError as exc:
                    # The person is gone (end of input): this question and the rest of the round wait, parked.
                    log.info("%s left unanswered: %s", question.ref, exc)
                    unanswered, waiting = True, waiting + 1
                    break
                try:
                    await self.answer(call_id, question.key, answer, round_=question.round, by=by or record.principal)
                    break
                except InvalidAnswerError as exc:
                    log.info("answer to %s refused: %s", question.ref, exc)
        return waiting

    # Answers ------------------------------------------------------------------------------------------------

    async def answer(
        self, call_id: str, key: str, answer: Answer, *, round_: int | None = None, by: str | None = None
    ) -> int:
        """Record a person's answer to question `key` of the call's current round (or of `round_`, refused when the
        call has moved on). A form answer is checked against the form (`InvalidAnswerError`); a URL question
        accepts no content. Returns how many questions of the round still wait."""
        if call_id in self.held:
            return self._answer_held(call_id, answer)
        record = await self.calls.get(call_id)
        question = next((q for q in record.questions if q.key == key), None)
        if question is None:
            raise CallStateError(
                f"call {call_id} is {record.status} and asks no question {key!r} in round {record.round}"
            )
        if round_ is not None and round_ != record.round:
            raise CallStateError(f"call {call_id} is on round {record.round}, not {round_}")
        return await self.calls.answer(
            call_id, question.round, key, _answering.checked(question, answer), by=by, now=self.clock.now()
        )

    async def inbox(self, *, principal: str | None = None, run_id: str | None = None) -> list[Pending]:
        """The unanswered questions of parked calls, newest call first, after those held in this process's memory
        (2025-11-25 pushes); of one person and/or one run when given."""
        found = [
            Pending(h.question, h.principal, "tools/call", h.target, h.deadline, in_memory=True)
            for h in self.held.values()
            if principal in (None, h.principal) and run_id is None
        ]
        async for page in self.calls.pages(principal=principal, run_id=run_id):
            for record in page:
                if record.waiting == 0:
                    continue
                answered = (
                    await self.calls.answers(record.id, record.round) if record.waiting < len(record.questions) else {}
                )
                found.extend(
                    Pending(q, record.principal, record.method, record.target, record.deadline)
                    for q in record.questions
                    if q.key not in answered
                )
        return found

    async def pending(self, *, principal: str | None = None, run_id: str | None = None) -> list[ParkedQuestion]:
        """The questions of `inbox(...)`, alone."""
        return [p.question for p in await self.inbox(principal=principal, run_id=run_id)]

    def link(self, question: ParkedQuestion) -> CheckedLink:
        """A URL question's link as a browser reads it: the address to hand the browser and the host it reaches
        (`UnsafeLinkError` when the link must not be shown as one)."""
        if question.url is None:
            raise InvalidAnswerError(f"question {question.key!r} has no link")
        return checked_link(question.url, development=self.settings.development)

    def link_host(self, question: ParkedQuestion) -> str:
        """The host to show for a URL question (`UnsafeLinkError` when its link must not be shown as one)."""
        return self.link(question).shown

    # Resume -------------------------------------------------------------------------------------------------

    async def resume(self, call_id: str) -> Outcome:
        """Send the call's parked round back if it can go (all answered, or the deadline passed: unanswered
        questions are answered `cancel`): the call completes, parks on the server's next round, or is `Claimed`
        by another process resuming it at the same moment. A finished call returns its result again."""
        return await self._resumed(call_id)

    async def _resumed(self, call_id: str, *, leave_open: str | None = None) -> Outcome:
        outcome = await self._resume(call_id, leave_open=leave_open)
        if isinstance(outcome, Parked) and any(isinstance(r, Interactive) for r in self.renderers):
            return await self._after(await self.calls.get(call_id))
        return outcome

    async def resume_due(self, *, limit: int = 100) -> list[Outcome]:
        """Resume every call that can go now (answered, past its deadline, or abandoned mid-resume), oldest first.
        A call that cannot go on (its server down or refusing) does not stop the others: once every call has been
        tried, `ResumeDueError` carries what the others came to and each failed call's error."""
        outcomes: list[Outcome] = []
        errors: dict[str, CallError] = {}
        for call_id in await self.calls.due(now=self.clock.now(), limit=limit):
            try:
                outcomes.append(await self.resume(call_id))
            except CallError as exc:
                errors[call_id] = exc
        if errors:
            raise ResumeDueError(outcomes, errors)
        return outcomes

    async def _resume(self, call_id: str, *, leave_open: str | None = None) -> Outcome:
        """One resume of the call, as `resume_plan` decides it. `leave_open`: send the round with that question
        unanswered, to look (`questions.look_decision`)."""
        driver = ResumeDriver(self.calls, self.clock, self._connect_to, self.timeout)
        start = await driver.snapshot(call_id)
        settings = self.settings
        limits = Limits(
            settings.call_max_rounds, settings.answer_wait, settings.call_cancel_wait, settings.resume_lease
        )
        return await driver.run(start.call, resume_plan(start, limits, modes=self.modes, leave_open=leave_open))

    def _parked(self, record: CallRecord, *, missing: tuple[str, ...]) -> Parked:
        return Parked(record.id, record.round, record.questions, record.deadline, missing)

    # Account events -----------------------------------------------------------------------------------------

    def on_account_active(self, hook: Callable[[AccountActive], Awaitable[None]]) -> None:
        """Also run `hook` for every account event handed to `account_active` (after the runtime's own)."""
        self._account_hooks.append(hook)

    async def account_active(self, event: AccountActive) -> list[Outcome]:
        """An account became ACTIVE, says an event: send back every call waiting for exactly that account, as
        `askback.runtime._account_events` says; `ResumeDueError` when some could not go on, once all were tried.
        The hooks of `on_account_active` run after, either way."""
        failed: ResumeDueError | None = None
        try:
            outcomes = await _account_events.account_active(
                self.calls, self.resume, lambda call_id, key: self._resumed(call_id, leave_open=key), event
            )
        except ResumeDueError as exc:
            outcomes, failed = list(exc.outcomes), exc
        for hook in self._account_hooks:
            await hook(event)
        if failed is not None:
            raise failed
        return outcomes

    async def approval_decided(self, event: ApprovalDecided) -> list[Outcome]:
        """An approval request was decided, says an event: send back every call waiting on exactly that request, its
        status link unanswered (the server reads the decision); `ResumeDueError` when some could not go on."""
        return await _account_events.approval_decided(
            self.calls, self.resume, lambda call_id, key: self._resumed(call_id, leave_open=key), event
        )

    # The wire -----------------------------------------------------------------------------------------------

    def _connect_to(self, record: CallRecord) -> AbstractAsyncContextManager[_sdk.Connection]:
        """A connection to a parked call's server, at the protocol version it negotiated."""
        return self._connect(record.server, principal=record.principal, call_id=record.id, protocol=record.protocol)

    @asynccontextmanager
    async def _connect(
        self,
        server: str,
        *,
        principal: str,
        call_id: str,
        protocol: str | None = None,
        target: str = "",
        arguments: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[_sdk.Connection]:
        """A connection to `server` for call `call_id`, as the SDK gives it (`_wire.explained` says what its failures
        mean for the call); `protocol`: the version a parked call negotiated (a resume skips the discovery)."""
        connected: list[_sdk.Connection] = []

        async def pushed(mode: Mode, params: Mapping[str, Any]) -> dict[str, Any]:
            name = connected[0].server_name if connected else None
            origin = Origin(server, name, "tools/call", target, arguments)
            return (await self._held_answer(call_id, principal, target, mode, params, origin)).wire()

        headers = self.headers(server) if self.headers is not None else None
        async with _sdk.connect(
            server,
            modes=self.modes,
            protocol=protocol if protocol is not None else ("legacy" if self.era == "legacy" else None),
            headers=headers,
            on_push=pushed,
            read_timeout=self.timeout,
            tasks=self.settings.call_tasks,
        ) as conn:
            connected.append(conn)
            yield conn

    # 2025-11-25 pushes ----------------------------------------------------------------------------------------

    async def _held_answer(
        self, call_id: str, principal: str, target: str, mode: Mode, params: Mapping[str, Any], origin: Origin
    ) -> Answer:
        return await _answering.held_answer(
            _answering.pushed_question(f"mem_{secrets.token_urlsafe(9)}", mode, params, origin),
            call_id=call_id,
            principal=principal,
            target=target,
            renderers=self.renderers,
            held=self.held,
            clock=self.clock,
            answer_wait=self.settings.answer_wait,
        )

    def _answer_held(self, ref: str, answer: Answer) -> int:
        held = self.held[ref]
        held.answer = _answering.checked(held.question, answer)
        held.answered.set()
        return 0
