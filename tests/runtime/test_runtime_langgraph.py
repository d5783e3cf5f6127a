"""The LangGraph adapter (`askback.runtime.langgraph`) on real parts: real LangGraph graphs with `InMemorySaver`, the
agent runtime on a SQLite file, and the demo server over HTTP (`askback serve askback.demo:server`, conftest's
module-wide `demo_server`). Each test calls as a user of its own, so the server's audit trail of one test is its own.
The runtimes declare no tasks (`call_tasks=False`), so the demo's `deploy` runs in MRTR rounds, except in the test of
a deploy run as a task.

The demo's `deploy` asks `pick_env` (a form, field `environment`: dev, staging or production), then, for
production, `confirm_prod` (boolean field `confirm`).
"""

from __future__ import annotations

import operator
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import InjectedToolCallId, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Interrupt, Send

from _http import Served, audit
from askback import load_settings
from askback.runtime import Runtime, WebInbox
from askback.runtime.langgraph import answers_for, call_tool, waiting_calls

pytestmark = [pytest.mark.http, pytest.mark.anyio]

OpenRuntime = Callable[..., Awaitable[Runtime]]


@pytest.fixture
async def open_runtime(tmp_path: Path) -> AsyncIterator[OpenRuntime]:
    """A runtime on a SQLite file of its own, calling the demo as `user` (its bearer token `demo-<user>`)."""
    opened: list[Runtime] = []

    async def open_(user: str, *, tasks: bool = False) -> Runtime:
        runtime = await Runtime.open(
            f"sqlite:///{tmp_path / f'agent-{user}.db'}",
            renderers=[WebInbox()],
            headers=lambda _server: {"Authorization": f"Bearer demo-{user}"},
            settings=load_settings(call_tasks=tasks),
        )
        opened.append(runtime)
        return runtime

    yield open_
    for runtime in opened:
        await runtime.close()


def env(name: str) -> dict[str, Any]:
    return {"action": "accept", "content": {"environment": name}}


def tool_graph(runtime: Runtime, url: str, user: str, services: Sequence[str]) -> CompiledStateGraph[Any]:
    """A stand-in model that asks to deploy each of `services` in one message (tool call ids `tc_<service>`), then
    a ToolNode that runs those calls in parallel, in one LangGraph task."""

    @tool
    async def deploy(service: str, tool_call_id: Annotated[str, InjectedToolCallId]) -> str:
        """Deploy a service."""
        done = await call_tool(runtime, url, "deploy", {"service": service}, principal=user, tool_call_id=tool_call_id)
        return done.text

    def model(state: MessagesState) -> dict[str, Any]:
        calls = [{"name": "deploy", "args": {"service": s}, "id": f"tc_{s}", "type": "tool_call"} for s in services]
        return {"messages": [AIMessage("", tool_calls=calls)]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", ToolNode([deploy]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=InMemorySaver())


def replies(result: dict[str, Any]) -> dict[str, str]:
    """The tool messages of a finished run, by tool call id."""
    return {m.tool_call_id: str(m.content) for m in result["messages"] if isinstance(m, ToolMessage)}


def thread(name: str) -> Any:
    return {"configurable": {"thread_id": name}}


async def asked_rounds(server: Served, user: str) -> list[tuple[int | None, tuple[str, ...]]]:
    """What the server asked `user`, as (round, keys), oldest first: a first round sent twice would show twice."""
    return [(e.round, e.keys) for e in await audit(server.database_url, principal=user, event="asked")]


async def test_a_parked_call_interrupts_and_the_keyed_answer_completes_it_sending_the_call_once(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-one")
    graph = tool_graph(runtime, demo_server.url, "lg-one", ["web"])
    config = thread("one")

    result = await graph.ainvoke({"messages": []}, config)

    [paused] = result["__interrupt__"]
    value = paused.value
    call_id = value["call_id"]
    assert value["round"] == 1
    assert value["tool_call_id"] == "tc_web"
    assert value["parallel"] == []
    [question] = value["questions"]
    assert (question["key"], question["mode"]) == ("pick_env", "form")
    assert question["message"] == "Which environment should I deploy to?"
    assert question["schema"]["properties"]["environment"]["enum"] == ["dev", "staging", "production"]
    assert (question["url"], question["host"]) == (None, None)

    result = await graph.ainvoke(Command(resume={call_id: {"pick_env": env("staging")}}), config)

    assert "__interrupt__" not in result
    assert replies(result) == {"tc_web": "Deployed web to staging."}
    record = await runtime.calls.get(call_id)
    assert record.status == "completed"
    assert record.run_id is not None and record.run_id.startswith("langgraph:")
    every = await runtime.calls.listing(run_id=record.run_id, status=("parked", "resuming", "completed", "failed"))
    assert [r.id for r in every] == [call_id]
    [first] = await runtime.calls.rounds(call_id)
    assert list(first["asked"]["inputRequests"]) == ["pick_env"]
    assert first["sent"] == {"pick_env": env("staging")}
    assert await asked_rounds(demo_server, "lg-one") == [(1, ("pick_env",))]


async def test_a_deploy_run_as_a_task_interrupts_on_its_in_task_questions_and_completes_once(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-task", tasks=True)
    graph = tool_graph(runtime, demo_server.url, "lg-task", ["web"])
    config = thread("task")

    result = await graph.ainvoke({"messages": []}, config)
    [paused] = result["__interrupt__"]
    call_id = paused.value["call_id"]
    assert [q["key"] for q in paused.value["questions"]] == ["pick_env.1"]
    result = await graph.ainvoke(Command(resume={call_id: {"pick_env.1": env("production")}}), config)
    [paused] = result["__interrupt__"]
    assert [q["key"] for q in paused.value["questions"]] == ["confirm_prod.2"]
    confirm = {"action": "accept", "content": {"confirm": True}}
    result = await graph.ainvoke(Command(resume={call_id: {"confirm_prod.2": confirm}}), config)

    assert "__interrupt__" not in result
    assert replies(result) == {"tc_web": "Deployed web to production."}
    record = await runtime.calls.get(call_id)
    assert record.status == "completed" and record.task_id is not None
    assert await asked_rounds(demo_server, "lg-task") == [(1, ("pick_env",)), (2, ("confirm_prod",))]


async def test_a_second_round_interrupts_again_and_the_replayed_first_answer_is_not_reused(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-prod")
    graph = tool_graph(runtime, demo_server.url, "lg-prod", ["web"])
    config = thread("prod")
    call_id = (await graph.ainvoke({"messages": []}, config))["__interrupt__"][0].value["call_id"]

    result = await graph.ainvoke(Command(resume={call_id: {"pick_env": env("production")}}), config)

    [paused] = result["__interrupt__"]
    assert (paused.value["call_id"], paused.value["round"]) == (call_id, 2)
    assert [q["key"] for q in paused.value["questions"]] == ["confirm_prod"]

    # The node re-executes from its start: LangGraph replays the first value before handing over this one.
    confirm = {"action": "accept", "content": {"confirm": True}}
    result = await graph.ainvoke(Command(resume={call_id: {"confirm_prod": confirm}}), config)

    assert replies(result) == {"tc_web": "Deployed web to production."}
    assert [r["sent"] for r in await runtime.calls.rounds(call_id)] == [
        {"pick_env": env("production")},
        {"confirm_prod": confirm},
    ]
    assert await asked_rounds(demo_server, "lg-prod") == [(1, ("pick_env",)), (2, ("confirm_prod",))]


async def test_parallel_tools_of_one_toolnode_asking_the_same_key_each_take_their_own_answer(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    """langgraph#6533: the parallel tools of one ToolNode share one task (and its interrupt ids), and LangGraph
    surfaces one interrupt for it. That interrupt lists the other call under `parallel`, and one resume value keyed
    by call id answers both: each call takes its own entry, whichever of them receives the value."""
    runtime = await open_runtime("lg-toolnode")
    graph = tool_graph(runtime, demo_server.url, "lg-toolnode", ["svc-a", "svc-b"])
    config = thread("toolnode")

    result = await graph.ainvoke({"messages": []}, config)

    assert len(result["__interrupt__"]) == 1
    calls = waiting_calls(result["__interrupt__"])
    assert sorted(c["tool_call_id"] for c in calls) == ["tc_svc-a", "tc_svc-b"]
    assert [[q["key"] for q in c["questions"]] for c in calls] == [["pick_env"], ["pick_env"]]
    by_tool_call = {c["tool_call_id"]: c["call_id"] for c in calls}
    a, b = by_tool_call["tc_svc-a"], by_tool_call["tc_svc-b"]

    result = await graph.ainvoke(Command(resume={a: {"pick_env": env("dev")}, b: {"pick_env": env("staging")}}), config)

    assert "__interrupt__" not in result
    assert replies(result) == {"tc_svc-a": "Deployed svc-a to dev.", "tc_svc-b": "Deployed svc-b to staging."}
    assert [r["sent"] for r in await runtime.calls.rounds(a)] == [{"pick_env": env("dev")}]
    assert [r["sent"] for r in await runtime.calls.rounds(b)] == [{"pick_env": env("staging")}]
    assert await asked_rounds(demo_server, "lg-toolnode") == [(1, ("pick_env",)), (1, ("pick_env",))]


class Fan(TypedDict):
    services: list[str]
    done: Annotated[list[str], operator.add]


class Branch(TypedDict):
    service: str


def branch_graph(runtime: Runtime, url: str, user: str) -> CompiledStateGraph[Any]:
    """One branch per service (`Send`), each its own LangGraph task, in the same step."""

    async def deploy(branch: Branch) -> dict[str, Any]:
        service = branch["service"]
        done = await call_tool(
            runtime, url, "deploy", {"service": service}, principal=user, tool_call_id=f"deploy-{service}"
        )
        return {"done": [done.text]}

    def fan_out(state: Fan) -> list[Send]:
        return [Send("deploy", {"service": s}) for s in state["services"]]

    builder = StateGraph(Fan)
    builder.add_node("deploy", deploy)
    builder.add_conditional_edges(START, fan_out, ["deploy"])
    builder.add_edge("deploy", END)
    return builder.compile(checkpointer=InMemorySaver())


async def test_parallel_branches_handed_the_same_resume_mapping_each_take_their_own_answer(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-branches")
    graph = branch_graph(runtime, demo_server.url, "lg-branches")
    config = thread("branches")

    result = await graph.ainvoke({"services": ["svc-a", "svc-b"], "done": []}, config)

    interrupts: list[Interrupt] = result["__interrupt__"]
    assert len(interrupts) == 2 and len({i.id for i in interrupts}) == 2
    by_tool_call = {c["tool_call_id"]: c["call_id"] for c in waiting_calls(interrupts)}
    answers = {
        by_tool_call["deploy-svc-a"]: {"pick_env": env("dev")},
        by_tool_call["deploy-svc-b"]: {"pick_env": env("staging")},
    }
    resume = answers_for(interrupts, answers)
    assert resume == {i.id: answers for i in interrupts}  # the very same mapping for both interrupts

    result = await graph.ainvoke(Command(resume=resume), config)

    assert "__interrupt__" not in result
    assert sorted(result["done"]) == ["Deployed svc-a to dev.", "Deployed svc-b to staging."]


async def test_a_resume_value_without_an_entry_for_the_call_interrupts_again_with_the_same_questions(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-none")
    graph = tool_graph(runtime, demo_server.url, "lg-none", ["web"])
    config = thread("none")
    [first] = (await graph.ainvoke({"messages": []}, config))["__interrupt__"]
    call_id = first.value["call_id"]

    result = await graph.ainvoke(Command(resume={"call_someone_else": {"pick_env": env("dev")}}), config)

    [again] = result["__interrupt__"]
    assert {k: again.value[k] for k in ("call_id", "round", "questions")} == {
        k: first.value[k] for k in ("call_id", "round", "questions")
    }
    assert f"no answers for call {call_id}" in again.value["error"]
    assert await runtime.calls.answers(call_id, 1) == {}
    assert (await runtime.calls.get(call_id)).status == "parked"

    result = await graph.ainvoke(Command(resume={call_id: {"pick_env": env("dev")}}), config)

    assert replies(result) == {"tc_web": "Deployed web to dev."}
    assert await asked_rounds(demo_server, "lg-none") == [(1, ("pick_env",))]


async def test_an_answer_that_does_not_fit_the_form_interrupts_again_saying_why(
    demo_server: Served, open_runtime: OpenRuntime
) -> None:
    runtime = await open_runtime("lg-invalid")
    graph = tool_graph(runtime, demo_server.url, "lg-invalid", ["web"])
    config = thread("invalid")
    call_id = (await graph.ainvoke({"messages": []}, config))["__interrupt__"][0].value["call_id"]

    result = await graph.ainvoke(Command(resume={call_id: {"pick_env": env("qa")}}), config)

    [again] = result["__interrupt__"]
    assert [q["key"] for q in again.value["questions"]] == ["pick_env"]
    assert "'pick_env' was refused" in again.value["error"]
    result = await graph.ainvoke(Command(resume={call_id: {"pick_env": "decline"}}), config)
    assert replies(result) == {"tc_web": "Cancelled: no environment was chosen; nothing was deployed."}


async def test_the_plain_form_answers_the_only_call_waiting(demo_server: Served, open_runtime: OpenRuntime) -> None:
    runtime = await open_runtime("lg-plain")
    graph = tool_graph(runtime, demo_server.url, "lg-plain", ["web"])
    config = thread("plain")
    await graph.ainvoke({"messages": []}, config)

    result = await graph.ainvoke(Command(resume={"pick_env": env("staging")}), config)

    assert replies(result) == {"tc_web": "Deployed web to staging."}


def test_importing_the_runtime_does_not_import_langgraph() -> None:
    code = "import sys, askback.runtime; print(any(m.split('.')[0] == 'langgraph' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
