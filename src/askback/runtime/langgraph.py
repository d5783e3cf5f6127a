"""LangGraph adapter: call MCP tools from a graph; a call that waits on people pauses the graph with `interrupt()`.

    from typing import Annotated
    from langchain_core.tools import InjectedToolCallId, tool
    from langgraph.types import Command
    from askback.runtime import Runtime, WebInbox
    from askback.runtime.langgraph import answers_for, call_tool, waiting_calls

    runtime = await Runtime.open("sqlite:///agent.db", renderers=[WebInbox()])

    @tool
    async def deploy(service: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        \"\"\"Deploy a service.\"\"\"
        done = await call_tool(runtime, TOOLS, "deploy", {"service": service}, principal="ada",
                               tool_call_id=tool_call_id)
        return done.text

    graph = builder.compile(checkpointer=InMemorySaver())      # any checkpointer; ToolNode([deploy]) inside
    config = {"configurable": {"thread_id": "thread-1"}}
    result = await graph.ainvoke(inputs, config)
    for call in waiting_calls(result["__interrupt__"]):  # {"call_id", "tool_call_id", "round", "questions"}
        ...                                               # show call["questions"] to the person
    answers = {call["call_id"]: {"pick_env": {"action": "accept", "content": {"environment": "staging"}}}}
    result = await graph.ainvoke(Command(resume=answers_for(result["__interrupt__"], answers)), config)

How it fits. LangGraph re-executes an interrupted node from its start, so the call must not be sent again: each
call is recorded under a run id made of the thread id, the LangGraph task (its checkpoint namespace) and the tool
call id, and a re-executed node finds its call in the runtime's store (parked, completed or failed) instead of
calling the server again. A node re-executed in this process while its previous execution's call is still in flight
waits for it.

The resume value is keyed by call id, never by position: `{call_id: {question_key: answer}}`, an answer being
`{"action": "accept", "content": {...}}`, `"decline"` or `"cancel"`. LangGraph may hand one resume value to several
interrupts (langgraph#6533: the parallel tools of one ToolNode share a task and its interrupt ids) or replay earlier
values on re-execution; each call takes only its own entry, so answers cannot reach the wrong call. A value with no
usable entry for the call interrupts again with the same questions and an `error` saying why: nothing is guessed.
The plain form `{question_key: answer}` is accepted only while the call is the only one waiting in its task; the
keyed form is the safe one.

The parallel tools of one ToolNode run in one LangGraph task, and LangGraph surfaces one interrupt per task: the
interrupt of the first call to ask lists the others waiting in the same task under `parallel` (`waiting_calls`
flattens them), and an entry for any of them, in the one resume value, is recorded for that call by whichever
call receives the value. Answers are only ever recorded for calls of the same task and the same principal. (The
first call to ask waits until the others of its task have been sent or found, so they are listed and recorded
before the graph pauses.)

Limits: a replayed value is applied only to questions the call's current round asks and has no answer for, so a
server that asks one key again in a later round of the same call could receive the earlier answer (askback's own
flows never reuse a key). Calls to 2025-11-25 servers are not recorded by the runtime (their questions are answered
in memory while the call is open), so a node re-executed after a later interrupt sends them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, TypeGuard
from weakref import WeakKeyDictionary

import anyio
from langchain_core.runnables import RunnableConfig
from langgraph.config import get_config
from langgraph.types import Interrupt, interrupt

from askback.errors import CallError, CallStateError, InvalidAnswerError, UnknownCallError, UnsafeLinkError
from askback.runtime.call_status import CallStatus, Move, allows
from askback.runtime.calls import Claimed, Completed, Parked, Runtime
from askback.runtime.parked_calls import CallRecord
from askback.runtime.questions import Answer, Mode

__all__ = ["CallValue", "InterruptValue", "QuestionValue", "answers_for", "call_tool", "waiting_calls"]

log = logging.getLogger("askback.runtime.langgraph")

_EVERY_STATUS: tuple[CallStatus, ...] = tuple(CallStatus)
_ACTIONS = ("accept", "decline", "cancel")


class QuestionValue(TypedDict):
    """One question as an interrupt shows it. `host` is the host a URL question's link goes to; a link the runtime
    will not show (`link_refused` says why) has `url` and `host` None. A question that cannot be shown as the server
    asked it (a form whose schema cannot be rendered) has its `problem`, and `schema` None: decline or cancel it."""

    key: str
    mode: Mode | None
    message: str
    schema: dict[str, Any] | None
    url: str | None
    host: str | None
    link_refused: NotRequired[str]
    problem: NotRequired[str]


class CallValue(TypedDict):
    """A call waiting on people: the questions of round `round` still unanswered. `tool_call_id` is the one given
    to `call_tool` (the ToolCall's id: its arguments are in the model's message)."""

    call_id: str
    tool_call_id: str
    round: int
    questions: list[QuestionValue]


class InterruptValue(CallValue):
    """The value of an askback interrupt: the call, the other calls waiting in the same LangGraph task
    (`parallel`), and `error` when the previous resume value could not be used for this call."""

    parallel: list[CallValue]
    error: NotRequired[str]


async def call_tool(
    runtime: Runtime,
    server: str,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    principal: str,
    tool_call_id: str,
    config: RunnableConfig | None = None,
) -> Completed:
    """Call tool `name` on `server` for `principal` from inside a LangGraph node or tool; while the call waits on
    people the graph is interrupted (`InterruptValue`) and resumed with `Command(resume={call_id: {key: answer}})`.

    `tool_call_id` is the ToolCall's id (`InjectedToolCallId`, `ToolRuntime.tool_call_id`); in a plain node, any
    key unique within the node and the same on every execution of it. `config` defaults to the running node's.
    A call the server failed raises `ServerRefusedError`, on every re-execution."""
    config = config if config is not None else get_config()
    task_key = _task_key(config)
    run_id = f"{task_key}:{_digest(tool_call_id)}"
    local = _local(runtime)
    with local.task(task_key) as task:
        async with local.run(run_id):
            with task.starting():
                outcome = await _start(runtime, server, name, arguments, principal=principal, run_id=run_id)
                if isinstance(outcome, Parked):
                    task.waiting[outcome.call_id] = tool_call_id
            try:
                return await _until_done(runtime, task, outcome, principal, task_key)
            finally:
                task.waiting.pop(outcome.call_id, None)


def answers_for(interrupts: Iterable[Interrupt], answers: Mapping[str, Any]) -> dict[str, Any]:
    """The `Command(resume=...)` value for a graph's pending interrupts: `answers` (`{call_id: {question_key:
    answer}}`) for each askback interrupt, by interrupt id, as LangGraph wants when several are pending. Every
    interrupt gets the same mapping; each call takes only its own entry. Interrupts not askback's are left out."""
    return {item.id: dict(answers) for item in interrupts if _is_ours(item.value)}


def waiting_calls(interrupts: Iterable[Interrupt]) -> list[CallValue]:
    """Every call the askback interrupts are waiting on, parallel ones included, each once."""
    found: dict[str, CallValue] = {}
    for item in interrupts:
        value = item.value
        if not _is_ours(value):
            continue
        for call in (value, *value["parallel"]):
            found.setdefault(
                call["call_id"],
                CallValue(
                    call_id=call["call_id"],
                    tool_call_id=call["tool_call_id"],
                    round=call["round"],
                    questions=call["questions"],
                ),
            )
    return list(found.values())


# Where the call belongs ------------------------------------------------------------------------------------------


def _task_key(config: RunnableConfig) -> str:
    """`langgraph:<digest of thread id and task>`: the same on every execution of the task, in any process."""
    configurable = config.get("configurable") or {}
    thread_id = configurable.get("thread_id")
    if thread_id is None:
        raise CallError(
            "askback's LangGraph adapter needs the graph's thread id, to find a call again when the node re-executes: "
            "compile the graph with a checkpointer and invoke it with config={'configurable': {'thread_id': ...}}"
        )
    return "langgraph:" + _digest(json.dumps([str(thread_id), str(configurable.get("checkpoint_ns", ""))]))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


async def _start(
    runtime: Runtime,
    server: str,
    name: str,
    arguments: Mapping[str, Any] | None,
    *,
    principal: str,
    run_id: str,
) -> Completed | Parked | Claimed:
    """The call of this run id as it stands (sent once, ever), or sent now if there is none."""
    found = await runtime.calls.listing(run_id=run_id, status=_EVERY_STATUS)
    if not found:
        return await runtime.call_tool(server, name, arguments, principal=principal, run_id=run_id)
    record = found[-1]  # the oldest, should a race in two processes ever have made two
    if (record.server, record.target, record.principal) != (server, name, principal):
        raise CallStateError(
            f"this tool call (run {run_id}) was made as call {record.id} of {record.target!r} on {record.server} for "
            f"{record.principal!r}, not of {name!r} on {server} for {principal!r}: give each tool call its own id"
        )
    return await runtime.resume(record.id)


# Waiting on people -----------------------------------------------------------------------------------------------


async def _until_done(
    runtime: Runtime, task: _Task, outcome: Completed | Parked | Claimed, principal: str, task_key: str
) -> Completed:
    error: str | None = None
    while True:
        if isinstance(outcome, Completed):
            return outcome
        if isinstance(outcome, Claimed):
            raise CallStateError(
                f"call {outcome.call_id} (round {outcome.round}) is being resumed by another process right now; "
                "nothing was sent from here. Run the graph again (`graph.invoke(None, config)`) to pick up its outcome"
            )
        error = await _wait(runtime, task, outcome.call_id, principal, task_key, error)
        outcome = await runtime.resume(outcome.call_id)


async def _wait(
    runtime: Runtime, task: _Task, call_id: str, principal: str, task_key: str, error: str | None
) -> str | None:
    """Interrupt the graph until a resume value answers the call (or its deadline passes); returns why the value
    could not be used for the call, if it could not."""
    # One call of the task at a time: the one that receives a resume value records its entries for the others
    # before they look, so parallel calls answered in one value all go on from it.
    async with task.lock:
        await task.settled()
        record = await runtime.calls.get(call_id)
        missing = await _missing(runtime, record)
        if not missing:
            return None
        shown = _call_value(runtime, record, task.waiting[call_id], missing)
        value: InterruptValue = {
            "call_id": shown["call_id"],
            "tool_call_id": shown["tool_call_id"],
            "round": shown["round"],
            "questions": shown["questions"],
            "parallel": [],
        }
        for other, other_tool_call in list(task.waiting.items()):
            if other != call_id:
                sibling = await runtime.calls.get(other)
                if left := await _missing(runtime, sibling):
                    value["parallel"].append(_call_value(runtime, sibling, other_tool_call, left))
        if error is not None:
            value["error"] = error
        resumed = interrupt(value)
        return await _apply(runtime, resumed, record, principal, task_key, alone=len(task.waiting) == 1)


async def _missing(runtime: Runtime, record: CallRecord) -> tuple[str, ...]:
    """The keys of the call's round still unanswered; none once the round can go (answered, or deadline passed)."""
    if not allows(record.status, Move.ANSWER) or record.waiting == 0:
        return ()
    if record.deadline is not None and runtime.clock.now() >= record.deadline:
        return ()
    answered = await runtime.calls.answers(record.id, record.round)
    return tuple(q.key for q in record.questions if q.key not in answered)


def _call_value(runtime: Runtime, record: CallRecord, tool_call_id: str, missing: tuple[str, ...]) -> CallValue:
    questions: list[QuestionValue] = []
    for q in record.questions:
        if q.key not in missing:
            continue
        shown: QuestionValue = {
            "key": q.key,
            "mode": q.mode,
            "message": q.message,
            "schema": dict(q.schema) if q.schema is not None and q.problem is None else None,
            "url": q.url,
            "host": None,
        }
        if q.problem is not None:
            shown["problem"] = q.problem
        if q.url is not None:
            try:
                shown["host"] = runtime.link_host(q)
            except UnsafeLinkError as exc:
                shown["url"] = None
                shown["link_refused"] = str(exc)
        questions.append(shown)
    return {"call_id": record.id, "tool_call_id": tool_call_id, "round": record.round, "questions": questions}


async def _apply(
    runtime: Runtime, value: Any, record: CallRecord, principal: str, task_key: str, *, alone: bool
) -> str | None:
    """Record the answers `value` holds for this call and for the other calls of its task; why this call got none."""
    if not isinstance(value, Mapping):
        return f"the resume value is a {type(value).__name__}; resume with {{{record.id!r}: {{question_key: answer}}}}"
    for other, entry in value.items():
        if other != record.id and isinstance(entry, Mapping):
            await _apply_to_sibling(runtime, str(other), entry, principal, task_key)
    if record.id in value:
        entry = value[record.id]
    elif alone and any(q.key in value for q in record.questions):
        entry = value
    else:
        return (
            f"the resume value holds no answers for call {record.id}; resume with "
            f"{{{record.id!r}: {{question_key: answer}}}}"
        )
    if not isinstance(entry, Mapping):
        return f"the answers for call {record.id} are a {type(entry).__name__}, not {{question_key: answer}}"
    refused = await _record_answers(runtime, record, entry, principal)
    if refused:
        return "; ".join(f"the answer to {key!r} was refused: {why}" for key, why in refused.items())
    return None


async def _apply_to_sibling(
    runtime: Runtime, call_id: str, entry: Mapping[str, Any], principal: str, task_key: str
) -> None:
    try:
        record = await runtime.calls.get(call_id)
    except UnknownCallError:
        return
    if record.run_id is None or not record.run_id.startswith(task_key + ":") or record.principal != principal:
        log.info("a resume value held answers for call %s, of another task or person: not recorded", call_id)
        return
    refused = await _record_answers(runtime, record, entry, principal)
    if refused:
        log.info("answers to call %s refused (it asks again): %s", call_id, ", ".join(refused))


async def _record_answers(
    runtime: Runtime, record: CallRecord, entry: Mapping[str, Any], principal: str
) -> dict[str, str]:
    """Record the answers to questions the call's round asks and has no answer for (an answer to anything else is
    from another round, replayed by LangGraph, or a mistake: ignored); returns the refused ones."""
    refused: dict[str, str] = {}
    for key in await _missing(runtime, record):
        if key not in entry:
            continue
        try:
            answer = _answer(entry[key])
            await runtime.answer(record.id, key, answer, round_=record.round, by=principal)
        except InvalidAnswerError as exc:
            refused[key] = str(exc)
        except CallStateError:
            pass  # answered, or the round moved on, meanwhile: the store kept the first answer
    return refused


def _answer(raw: Any) -> Answer:
    if raw in _ACTIONS:
        return Answer(raw)
    if isinstance(raw, Mapping) and raw.get("action") in _ACTIONS:
        content = raw.get("content")
        if content is not None and not isinstance(content, Mapping):
            raise InvalidAnswerError(f"an answer's content is an object of form fields, not a {type(content).__name__}")
        return Answer(raw["action"], content if raw["action"] == "accept" else None)
    raise InvalidAnswerError(
        "an answer is {'action': 'accept', 'content': {...}}, {'action': 'decline'}, 'decline' or 'cancel'"
    )


def _is_ours(value: Any) -> TypeGuard[InterruptValue]:
    return isinstance(value, Mapping) and {"call_id", "round", "questions", "parallel"} <= value.keys()


# In-process coordination -------------------------------------------------------------------------------------------


@dataclass
class _Task:
    """The adapter's calls of one LangGraph task in this process (the parallel tools of one ToolNode share one)."""

    lock: anyio.Lock = field(default_factory=anyio.Lock)
    waiting: dict[str, str] = field(default_factory=dict)  # call id -> tool call id, of the calls parked here
    users: int = 0
    _starting: int = 0
    _idle: anyio.Event | None = None

    @contextmanager
    def starting(self) -> Iterator[None]:
        """A call being found or sent: the others wait for it before they interrupt, so it is listed as waiting."""
        if self._starting == 0:
            self._idle = anyio.Event()
        self._starting += 1
        try:
            yield
        finally:
            self._starting -= 1
            if self._starting == 0 and self._idle is not None:
                self._idle.set()

    async def settled(self) -> None:
        while self._starting and self._idle is not None:
            await self._idle.wait()


@dataclass
class _Local:
    """Per runtime: the tasks with calls in this process, and a lock per run id (one execution of a call at a time)."""

    tasks: dict[str, _Task] = field(default_factory=dict)
    runs: dict[str, tuple[anyio.Lock, int]] = field(default_factory=dict)

    @contextmanager
    def task(self, key: str) -> Iterator[_Task]:
        task = self.tasks.setdefault(key, _Task())
        task.users += 1
        try:
            yield task
        finally:
            task.users -= 1
            if task.users == 0:
                del self.tasks[key]

    @asynccontextmanager
    async def run(self, run_id: str) -> AsyncIterator[None]:
        lock, users = self.runs.get(run_id) or (anyio.Lock(), 0)
        self.runs[run_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self.runs[run_id]
            if users == 1:
                del self.runs[run_id]
            else:
                self.runs[run_id] = (lock, users - 1)


_LOCAL: WeakKeyDictionary[Runtime, _Local] = WeakKeyDictionary()


def _local(runtime: Runtime) -> _Local:
    return _LOCAL.setdefault(runtime, _Local())
