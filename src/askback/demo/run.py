"""`askback demo`: start the demo server with several workers and walk through three flows, round by round.

Every round is a new connection, so the retry can land on another worker process; each round prints the
questions, the answers, and the worker that served it. `--interactive` asks the person at the terminal instead of
answering from the script.

The third flow, `summarize_inbox`, needs the caller's account at Demo Mail, a development OAuth provider the demo
runs on loopback in a thread of this process (`askback.demo.provider`). It is called through the demo's own agent
runtime (`askback.runtime`, on the demo's database), which parks it on its link; the scripted person follows the
link with plain HTTP (`askback.demo.person`): the demo server's development sign-in, the provider's sign-in and
consent page, the callback that stores the grant. Nobody answers the question: the demo server's one webhook
endpoint (`ASKBACK_WEBHOOKS`) is the runtime's receiver, served in another thread of this process
(`serving_receiver`), and the grant's `account.connected` resumes the call, which then reads the inbox. With
`--interactive`, the person opens the link in their own browser and presses Enter when it says Connected (or `n`
to decline).

Then erin, with no account yet, reaches the same tool through the META exposure (`askback.demo.meta_walk`; the demo
server serves both exposures) from a client that declares no elicitation: not_connected, her link, ready, the summary.

Last, bob asks to drop a database, which someone else in `sre` must approve first (`askback.demo.approval_walk`): the
status link, the approvals' pages refusing bob his own request, erin approving it there, the retry dropping it once.

Each round runs in an event loop of its own and the questions are asked between rounds, in plain code: a prompt
inside a running event loop would not see Ctrl-C (asyncio turns the first SIGINT into a cancellation that a
blocked `input()` never notices). So one Ctrl-C raises `KeyboardInterrupt` wherever the demo is, and `serving`
stops the server's whole process group on the way out.

The demo's SQLite database is replaced on every run, so it carries a marker table (`askback_demo`) written when the
demo creates it; an existing file without it is refused rather than deleted.

This module is the demo's steps; the person's answers are in `askback.demo.asking`, the round loop in
`askback.demo.rounds`, the database and the servers' processes in `askback.demo.servers`, the agent runtime's webhook
receiver in `askback.demo.receiver`.
"""

from __future__ import annotations

import base64
import queue
import secrets
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp_types import CallToolResult, ElicitResult
from rich.markup import escape

from askback.demo.approval_walk import walk_approval
from askback.demo.asking import answer_question, console, open_link
from askback.demo.meta_walk import EXPOSE, walk_meta
from askback.demo.ports import check_free, demo_ports
from askback.demo.receiver import (
    LANDING_TIMEOUT,
    WEBHOOK_SECRET_ENV,
    Landed,
    landing,
    runtime_options,
    serving_receiver,
    webhooks_file,
)
from askback.demo.rounds import drive, one_round, served_by
from askback.demo.servers import demo_servers, prepare_database, serving_demo
from askback.runtime import Answer, Completed, Parked, Runtime
from askback.runtime.calls import Outcome
from askback.testing import free_port

__all__ = ["demo_servers", "run_demo", "serving_demo"]


# --- driving the flows -----------------------------------------------------------------------------------------


def _show_projects(url: str, user: str) -> None:
    # What a person would look up before typing a project's name to confirm its deletion.
    rnd = one_round(url, "list_projects", {}, token=f"demo-{user}")
    if isinstance(rnd.result, CallToolResult) and isinstance(rnd.result.structured_content, dict):
        projects = rnd.result.structured_content.get("projects", [])
        listed = ", ".join(f"{p['id']} is {p['name']}" for p in projects) or "none"
        console.print(f"  [dim]{escape(user)} looks up the projects first: {escape(listed)}[/]")


def _drive(url: str, user: str, tool: str, arguments: dict[str, Any], interactive: bool) -> set[str]:
    console.rule(f"[bold]{user}[/] calls [cyan]{tool}[/] {escape(str(arguments))}")
    if interactive and tool == "delete_project":
        _show_projects(url, user)

    def answer(key: str, params: dict[str, Any]) -> ElicitResult:
        console.print(f"    asks [bold]{key}[/]: {escape(str(params.get('message')))}")
        given = answer_question(key, params, user, interactive)
        console.print(f"    answers {given.action} {escape(str(given.content or ''))}")
        return given

    return set(drive(url, user, tool, arguments, answer).instances)


def _drive_resumed(url: str, user: str, database: str, landed: queue.Queue[Landed], interactive: bool) -> bool:
    """True unless the person declined to connect or their input ended (then the demo asks them nothing more)."""
    tool = "summarize_inbox"
    console.rule(f"[bold]{user}[/] calls [cyan]{tool}[/] {{}} [dim]through the demo's agent runtime[/]")

    async def with_runtime(work: Callable[[Runtime], Awaitable[Outcome]]) -> Outcome:
        async with await Runtime.open(database, **runtime_options(user)) as runtime:
            return await work(runtime)

    def done(outcome: Outcome, number: int) -> None:
        if isinstance(outcome, Completed):
            console.print(f"  round {number}: [green]complete[/] {escape(repr(outcome.text))}")
        else:
            console.print(f"  round {number}: [yellow]{type(outcome).__name__.lower()}[/] call {outcome.call_id}")

    first = anyio.run(with_runtime, lambda rt: rt.call_tool(url, tool, {}, principal=user))
    if not isinstance(first, Parked):
        done(first, 1)
        return True
    console.print(f"  round 1: [yellow]input_required[/]: the runtime parked call {first.call_id}")
    [question] = first.questions
    console.print(f"    asks [bold]{question.key}[/]: {escape(question.message)}")
    given = open_link(question.url or "", user, interactive)
    if given.action != "accept":
        console.print(f"    answers {given.action}")

        async def answer(runtime: Runtime) -> Outcome:
            await runtime.answer(first.call_id, question.key, Answer(given.action))
            return await runtime.resume(first.call_id)

        done(anyio.run(with_runtime, answer), 2)
        return False
    console.print("    [dim]nobody answers the question: the runtime waits for the server's webhook[/]")
    got = landing(landed, first.call_id)
    if got is None:
        console.print(
            f"  the grant's webhook did not arrive within {LANDING_TIMEOUT:.0f} s; the call stays parked: "
            f"askback webhooks deliveries --database {database}"
        )
        return True
    console.print(f"  [bold]the grant landed: {escape(got.type)}; the call resumed by itself[/]")
    done(anyio.run(with_runtime, lambda rt: rt.resume(first.call_id)), first.round + 1)
    return True


def run_demo(*, interactive: bool, workers: int, port: int, database: str) -> int:
    """Walk the demo; `port` places every port it opens (`askback.demo.ports`), 0 picks free ones."""
    ports = demo_ports(port, free_port())
    check_free(ports, port)
    prepare_database(database)
    secret = "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()
    # The receiver takes the events of the demo server on `ports.server`, and of no other.
    with (
        tempfile.TemporaryDirectory(prefix="askback-demo-") as folder,
        serving_receiver(database, user="carol", port=ports.server, secret=secret, listen_port=ports.receiver) as (
            receiver,
            landed,
        ),
    ):
        env = {"ASKBACK_WEBHOOKS": str(webhooks_file(Path(folder), receiver)), WEBHOOK_SECRET_ENV: secret, **EXPOSE}
        with demo_servers(workers=workers, port=ports.server, database=database, env=env, mail_port=ports.mail) as url:
            console.print(f"The demo server sends account.connected to the demo's agent runtime at {receiver}")
            if interactive:
                console.print("[dim]Answer each question; an empty answer declines it. Ctrl-C stops the demo.[/]")
            seen = _drive(url, "alice", "delete_project", {"project_id": "prj_99"}, interactive)
            seen |= _drive(url, "bob", "deploy", {"service": "web-frontend"}, interactive)
            if _drive_resumed(url, "carol", database, landed, interactive) or not interactive:
                walk_meta(url, "erin", lambda link, user: open_link(link, user, interactive), console)
                seen |= walk_approval(url, interactive=interactive)
    console.rule()
    console.print(served_by(seen, workers))
    console.print(
        "Who confirmed the deletion of billing-legacy, and when:\n"
        f"  askback audit --database {database} --tool delete_project --event answered --contains billing-legacy"
    )
    console.print(
        "carol's connected account, its status and history, never its token:\n"
        f"  askback accounts list --database {database}"
    )
    console.print(
        "The webhook that resumed carol's call, and its every attempt:\n"
        f"  askback webhooks deliveries --attempts --database {database}"
    )
    console.print(
        "Who asked to drop billing-legacy, who approved it and why (approval.requested, approval.approved):\n"
        f"  askback audit --database {database} --tool drop_database"
    )
    return 0
