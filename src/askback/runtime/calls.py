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
The decisions (can this round be sent, with what) are pure (`questions.resume_decision`); this module does the I/O
around them: the store, the clock, the server. A resume is claimed in the store first, so two processes resuming
one round send it once.

Against a 2025-11-25 server, questions are pushed on an open connection and cannot outlive it: they go to the
interactive renderers, or wait in this process's memory only (`held`) until answered here or cancelled at their
deadline. That is logged, once per question.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import httpx2
from mcp.shared.exceptions import MCPError
from mcp_types import REQUEST_TIMEOUT
from pydantic import ValidationError

from askback.clock import Clock, SystemClock
from askback.errors import (
    CallError,
    CallStateError,
    InvalidAnswerError,
    ServerProtocolError,
    ServerRefusedError,
    ServerTimeoutError,
    UnansweredError,
)
from askback.runtime import _sdk
from askback.runtime.forms import validate
from askback.runtime.questions import (
    Answer,
    Link,
    Mode,
    Origin,
    Question,
    Ready,
    Waiting,
    check_link,
    resume_decision,
)
from askback.runtime.renderers import Interactive, Renderer, declared_modes
from askback.runtime.store import MIGRATIONS, CallRecord, ParkedCalls, new_call_id
from askback.settings import Settings, load_settings
from askback.store import Store

__all__ = ["AccountActive", "Claimed", "Completed", "Held", "Parked", "Pending", "Runtime"]

log = logging.getLogger("askback.runtime")

_MODERN = "2026-07-28"
# Resumed automatically when an account becomes ACTIVE: a URL question askback's servers ask under this key.
_CONNECT_PREFIX = "connect."


@dataclass(frozen=True)
class Completed:
    """The call finished: `result` is the server's result as JSON (a tool's `content`, `isError`, ...)."""

    call_id: str
    result: Mapping[str, Any]
    rounds: int

    @property
    def text(self) -> str:
        """The text blocks of a tool result (or a prompt's messages, a resource's contents), joined."""
        parts: list[str] = []
        for block in self.result.get("content") or ():
            if isinstance(block, Mapping) and block.get("type") == "text":
                parts.append(str(block.get("text", "")))
        for message in self.result.get("messages") or ():
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, Mapping) and content.get("type") == "text":
                parts.append(str(content.get("text", "")))
        for item in self.result.get("contents") or ():
            if isinstance(item, Mapping) and "text" in item:
                parts.append(str(item["text"]))
        return "\n".join(parts)

    @property
    def is_error(self) -> bool:
        return bool(self.result.get("isError"))


@dataclass(frozen=True)
class Parked:
    """The call waits on people: `questions` of round `round`, until `deadline` (then unanswered ones are
    cancelled). `missing` are the keys still unanswered."""

    call_id: str
    round: int
    questions: tuple[Question, ...]
    deadline: float | None
    missing: tuple[str, ...]


@dataclass(frozen=True)
class Claimed:
    """Another process is resuming this round right now; nothing was sent from here."""

    call_id: str
    round: int


Outcome = Completed | Parked | Claimed


@dataclass(frozen=True)
class AccountActive:
    """An account became ACTIVE: `principal`'s account for `connection` (from connected accounts' events)."""

    principal: str
    connection: str


@dataclass(frozen=True)
class Pending:
    """An unanswered question with what a person needs to know about it: who must answer, what asked it (the
    method and the tool, prompt or resource), until when, and whether it waits in this process's memory only (a
    2025-11-25 push) rather than in the store."""

    question: Question
    principal: str
    method: str
    target: str
    deadline: float | None
    in_memory: bool = False


@dataclass
class Held:
    """A 2025-11-25 question pushed on an open connection, waiting in this process's memory only."""

    question: Question
    principal: str
    target: str
    deadline: float
    answered: anyio.Event = field(default_factory=anyio.Event)
    answer: Answer | None = None


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
        self.calls = ParkedCalls(store)
        self.renderers = tuple(renderers)
        self.modes = declared_modes(self.renderers)
        self.clock: Clock = clock or SystemClock()
        self.settings = settings or load_settings()
        self.headers = headers
        self.timeout = timeout
        self.era = era
        self.held: dict[str, Held] = {}
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
        async with self._connect(server, principal="", call_id="tools/list") as conn:
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
        async with self._connect(
            server, principal=principal, call_id=call_id, target=target, arguments=arguments
        ) as conn:
            if conn.protocol != _MODERN:
                # 2025-11-25: questions are pushed on this connection, answered in-process (see `held`).
                result = await self._send(conn, method, target, arguments, call_id=call_id, round_=1)
                return Completed(call_id, result, rounds=1)
            outcome = await self._send(conn, method, target, arguments, call_id=call_id, round_=1)
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
            )
        # No connection stays open while people answer (which may take minutes, or end with a Ctrl-C that must not
        # wait on a server's goodbye): each later round opens its own, without the discovery round trip.
        return await self._after(record, None)

    async def _after(self, record: CallRecord, conn: _sdk.Connection | None) -> Completed | Parked:
        """A call just recorded or resumed: complete, or parked; interactive renderers answer it here, round after
        round, and it goes on."""
        while True:
            if record.status == "completed":
                return Completed(record.id, record.result or {}, rounds=record.round)
            if await self.answer_here(record.id, by=record.principal) > 0:
                return await self._resume_parked(record.id)
            outcome = await self._resume(record.id, conn)
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
        if record.status != "parked":
            return 0
        answered = await self.calls.answers(call_id, record.round)
        waiting, unanswered = 0, False
        for question in record.questions:
            if question.key in answered:
                continue
            renderer = None if unanswered else self._interactive_for(question)
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

    def _interactive_for(self, question: Question) -> Interactive | None:
        for renderer in self.renderers:
            if isinstance(renderer, Interactive) and question.mode in renderer.modes:
                return renderer
        return None

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
            call_id, question.round, key, self._checked(question, answer), by=by, now=self.clock.now()
        )

    def _checked(self, question: Question, answer: Answer) -> Answer:
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

    async def pending(self, *, principal: str | None = None, run_id: str | None = None) -> list[Question]:
        """The questions of `inbox(...)`, alone."""
        return [p.question for p in await self.inbox(principal=principal, run_id=run_id)]

    def link(self, question: Question) -> Link:
        """A URL question's link as a browser reads it: the address to hand the browser and the host it reaches
        (`UnsafeLinkError` when the link must not be shown as one)."""
        if question.url is None:
            raise InvalidAnswerError(f"question {question.key!r} has no link")
        return check_link(question.url, development=self.settings.development)

    def link_host(self, question: Question) -> str:
        """The host to show for a URL question (`UnsafeLinkError` when its link must not be shown as one)."""
        return self.link(question).shown

    # Resume -------------------------------------------------------------------------------------------------

    async def resume(self, call_id: str) -> Outcome:
        """Send the call's parked round back if it can go (all answered, or the deadline passed: unanswered
        questions are answered `cancel`): the call completes, parks on the server's next round, or is `Claimed`
        by another process resuming it at the same moment. A finished call returns its result again."""
        outcome = await self._resume(call_id, None)
        if isinstance(outcome, Parked) and any(isinstance(r, Interactive) for r in self.renderers):
            return await self._after(await self.calls.get(call_id), None)
        return outcome

    async def resume_due(self, *, limit: int = 100) -> list[Outcome]:
        """Resume every call that can go now (answered, past its deadline, or abandoned mid-resume)."""
        outcomes: list[Outcome] = []
        for call_id in await self.calls.due(now=self.clock.now(), limit=limit):
            outcomes.append(await self.resume(call_id))
        return outcomes

    async def _resume(self, call_id: str, conn: _sdk.Connection | None) -> Outcome:
        record = await self.calls.get(call_id)
        now = self.clock.now()
        if record.status == "completed":
            return Completed(record.id, record.result or {}, rounds=record.round)
        if record.status == "failed":
            raise ServerRefusedError(f"call {call_id} failed: {record.error}")
        answers = await self.calls.answers(call_id, record.round)
        decision = resume_decision(record.questions, answers, now=now, deadline=record.deadline)
        if isinstance(decision, Waiting):
            return self._parked(record, missing=decision.missing)
        claim = await self.calls.claim(call_id, record.round, now=now, lease=self.settings.resume_lease)
        if claim is None:
            return Claimed(call_id, record.round)
        try:
            outcome = await self._send_round(record, decision, conn)
        except (ServerRefusedError, ServerProtocolError) as exc:
            await self.calls.settle(
                call_id, claim, round_=record.round, sent=_wire(decision), outcome=None, error=str(exc), now=now
            )
            raise
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self.calls.release(call_id, claim)
            raise
        if decision.cancelled:
            log.info(
                "call %s round %d: deadline passed, cancelled %s", call_id, record.round, ", ".join(decision.cancelled)
            )
        asking = outcome.get("resultType") == "input_required"
        if asking and record.round + 1 > self.settings.call_max_rounds:
            error = f"the server asked for round {record.round + 1}, past this runtime's cap of {self.settings.call_max_rounds} (ASKBACK_CALL_MAX_ROUNDS)"
            await self.calls.settle(
                call_id, claim, round_=record.round, sent=_wire(decision), outcome=None, error=error, now=now
            )
            raise ServerRefusedError(f"call {call_id}: {error}")
        now = self.clock.now()
        settled = await self.calls.settle(
            call_id,
            claim,
            round_=record.round,
            sent=_wire(decision),
            outcome=outcome,
            deadline=now + self.settings.answer_wait,
            now=now,
        )
        if not settled:
            return Claimed(call_id, record.round)
        if not asking:
            return Completed(call_id, outcome, rounds=record.round + 1)
        return await self._resume_parked(call_id)

    async def _send_round(self, record: CallRecord, decision: Ready, conn: _sdk.Connection | None) -> dict[str, Any]:
        pending = record.pending or {}
        state = pending.get("requestState")
        responses = _wire(decision)
        if conn is not None:
            return await self._send(
                conn,
                cast(_sdk.Method, record.method),
                record.target,
                record.arguments,
                call_id=record.id,
                round_=record.round + 1,
                responses=responses,
                state=state,
            )
        async with self._connect(
            record.server, principal=record.principal, call_id=record.id, protocol=record.protocol
        ) as fresh:
            return await self._send(
                fresh,
                cast(_sdk.Method, record.method),
                record.target,
                record.arguments,
                call_id=record.id,
                round_=record.round + 1,
                responses=responses,
                state=state,
            )

    def _parked(self, record: CallRecord, *, missing: tuple[str, ...]) -> Parked:
        return Parked(record.id, record.round, record.questions, record.deadline, missing)

    # Account events -----------------------------------------------------------------------------------------

    def on_account_active(self, hook: Callable[[AccountActive], Awaitable[None]]) -> None:
        """Also run `hook` for every account event handed to `account_active` (after the runtime's own)."""
        self._account_hooks.append(hook)

    async def account_active(self, event: AccountActive) -> list[Outcome]:
        """An account became ACTIVE: every call of that person parked on a URL question to connect that account
        (key `connect.<connection>`, as askback servers ask) is answered `accept` and resumed. Connected
        accounts' ACTIVE event is handed here; until account events are delivered to runtimes, call it from the
        code that learns of the event."""
        outcomes: list[Outcome] = []
        wanted = _CONNECT_PREFIX + "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in event.connection)[:50]
        for record in [r async for page in self.calls.pages(principal=event.principal) for r in page]:
            answered = await self.calls.answers(record.id, record.round)
            for question in record.questions:
                if question.mode == "url" and question.key == wanted and question.key not in answered:
                    await self.calls.answer(
                        record.id,
                        record.round,
                        question.key,
                        Answer("accept"),
                        by=event.principal,
                        now=self.clock.now(),
                    )
                    outcomes.append(await self.resume(record.id))
        for hook in self._account_hooks:
            await hook(event)
        return outcomes

    # The wire -----------------------------------------------------------------------------------------------

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
        connected: list[_sdk.Connection] = []

        async def pushed(mode: Mode, params: Mapping[str, Any]) -> dict[str, Any]:
            name = connected[0].server_name if connected else None
            origin = Origin(server, name, "tools/call", target, arguments)
            return (await self._held_answer(call_id, principal, target, mode, params, origin)).wire()

        headers = self.headers(server) if self.headers is not None else None
        try:
            async with _sdk.connect(
                server,
                modes=self.modes,
                protocol=protocol if protocol is not None else ("legacy" if self.era == "legacy" else None),
                headers=headers,
                on_push=pushed,
                read_timeout=self.timeout,
            ) as conn:
                connected.append(conn)
                yield conn
        # What the SDK raises becomes one askback error here, whichever round it ended (`Connection.sending`).
        except (httpx2.TimeoutException, TimeoutError):
            raise self._timed_out(server, connected, call_id=call_id, resuming=protocol is not None) from None
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise self._timed_out(server, connected, call_id=call_id, resuming=protocol is not None) from None
            # A round's own refusal is `_send`'s (it fails the call); this one came before any round was sent.
            raise CallError(
                f"the MCP server at {server} refused the connection: {exc.message} (JSON-RPC {exc.code}); nothing "
                "was lost: a parked call stays parked, resume it again later"
            ) from exc
        except (_sdk.UnreadableResult, ValidationError) as exc:
            reason = exc.reason if isinstance(exc, _sdk.UnreadableResult) else _sdk.validation_reason(exc)
            sending = connected[0].sending if connected else None
            what = f"round {sending[1]} of call {sending[0]}" if sending is not None else "the connection"
            # A resume that reads no result marks its call failed (`_resume`): its answers did reach the server.
            kept = "the call is marked failed" if sending is not None and sending[1] > 1 else "nothing was kept"
            raise ServerProtocolError(
                f"the MCP server at {server} answered {what} with something askback cannot read: {reason}; {kept}. "
                "The server must be fixed to send results the protocol allows"
            ) from None
        except (httpx2.HTTPError, OSError) as exc:
            raise CallError(
                f"could not reach the MCP server at {server} ({type(exc).__name__}); nothing was lost: a parked call "
                "stays parked, resume it again later"
            ) from exc

    def _timed_out(
        self, server: str, connected: Sequence[_sdk.Connection], *, call_id: str, resuming: bool
    ) -> ServerTimeoutError:
        """The error for a server that did not answer in time, saying what became of the call."""
        waited = f"within {self.timeout:g} s" if self.timeout is not None else "before its connection ended"
        more = "or allow it more time (Runtime(timeout=...), --timeout SECONDS)"
        sending = connected[0].sending if connected else None
        if sending is not None and sending[1] == 1:
            return ServerTimeoutError(
                f"the MCP server at {server} did not answer call {sending[0]} {waited}; nothing was kept (the call "
                f"was never parked): call it again later, {more}"
            )
        if sending is not None or resuming:
            parked = f"round {sending[1] - 1}" if sending is not None else "its round"
            return ServerTimeoutError(
                f"the MCP server at {server} did not answer {waited} when call {call_id} was resumed; the call stays "
                f"parked on {parked} with its answers: resume it again later (askback inbox resume {call_id}), {more}"
            )
        return ServerTimeoutError(
            f"the MCP server at {server} did not answer {waited}; nothing was kept: try again later, {more}"
        )

    async def _send(
        self,
        conn: _sdk.Connection,
        method: _sdk.Method,
        target: str,
        arguments: Mapping[str, Any] | None,
        *,
        call_id: str,
        round_: int,
        responses: Mapping[str, Any] | None = None,
        state: str | None = None,
    ) -> dict[str, Any]:
        conn.sending = (call_id, round_)
        try:
            return await conn.send(
                method, target, arguments, responses=responses, state=state, read_timeout=self.timeout
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise  # `_connect` says what became of the call
            raise _refused(exc, call_id=call_id, round_=round_, modes=self.modes) from exc

    # 2025-11-25 pushes ----------------------------------------------------------------------------------------

    async def _held_answer(
        self, call_id: str, principal: str, target: str, mode: Mode, params: Mapping[str, Any], origin: Origin
    ) -> Answer:
        ref = f"mem_{secrets.token_urlsafe(9)}"
        question = Question(
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
        renderer = self._interactive_for(question)
        if renderer is not None:
            while True:
                try:
                    return self._checked(question, await renderer.ask(question))
                except UnansweredError:
                    # A pushed question cannot be parked: the call ends here, unanswered (never a cancel sent).
                    raise CallError(
                        f"call {call_id}: a 2025-11-25 server pushed a question that was left unanswered; such a "
                        "question lives on its connection and cannot be parked, so the call ends here"
                    ) from None
                except InvalidAnswerError as exc:
                    log.info("answer to a pushed question of call %s refused: %s", call_id, exc)
        deadline = self.clock.now() + self.settings.answer_wait
        held = Held(question, principal, target, deadline)
        self.held[ref] = held
        log.warning(
            "call %s: a 2025-11-25 server pushed a %s question; it is held in this process's memory only (the "
            "connection must stay open) as %s until answered here or cancelled at its deadline",
            call_id,
            mode,
            ref,
        )
        try:
            async with anyio.create_task_group() as tg:

                async def at_deadline() -> None:
                    await self.clock.sleep_until(deadline)
                    tg.cancel_scope.cancel()

                tg.start_soon(at_deadline)
                await held.answered.wait()
                tg.cancel_scope.cancel()
        finally:
            self.held.pop(ref, None)
        return held.answer or Answer("cancel")

    def _answer_held(self, ref: str, answer: Answer) -> int:
        held = self.held[ref]
        held.answer = self._checked(held.question, answer)
        held.answered.set()
        return 0


def _wire(decision: Ready) -> dict[str, Any]:
    return {key: answer.wire() for key, answer in decision.responses.items()}


def _refused(exc: MCPError, *, call_id: str, round_: int, modes: frozenset[Mode]) -> ServerRefusedError:
    data, code = exc.data, exc.code
    if code == -32021:
        needed = (data or {}).get("requiredCapabilities") if isinstance(data, Mapping) else None
        shows = ", ".join(sorted(modes)) or "nothing"
        message = (
            f"the server needs a client capability this runtime does not declare ({json.dumps(needed)}): its "
            f"renderers show {shows}. Add a renderer that shows it, or use the tool's fallback (-32021, round {round_} "
            f"of call {call_id})"
        )
    else:
        message = f"the server refused round {round_} of call {call_id}: {exc.message} (JSON-RPC {code})"
    return ServerRefusedError(message, code=code, data=data)
