"""How `askback demo` takes a call through its rounds: `flow_plan`'s loop driven one round per event loop (so that the
person is asked between rounds, where one Ctrl-C stops the demo at once), each round on a fresh connection that may
land on any worker, printed as it comes back."""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp_types import CallToolResult, ElicitResult
from rich.markup import escape

from askback.core.plan import Next, Round, flow_plan
from askback.demo.asking import console
from askback.testing import call_round

__all__ = ["Driven", "drive", "one_round", "said", "served_by", "serving_workers"]


def one_round(url: str, tool: str, arguments: dict[str, Any], **options: Any) -> Round:
    """One round on a fresh connection, in an event loop of its own."""
    return anyio.run(functools.partial(call_round, url, tool, arguments, **options))


def said(rnd: Round) -> str:
    """The text a completed round's result says."""
    return (
        " ".join(getattr(c, "text", "") for c in rnd.result.content) if isinstance(rnd.result, CallToolResult) else ""
    )


def _processes(count: int) -> str:
    return "1 worker process" if count == 1 else f"{count} worker processes"


def serving_workers(workers: int, address: str) -> str:
    """What the demo says as its server starts: how many workers, and how rounds find one."""
    if workers == 1:
        return f"1 worker process on {address}; each round names it as served by worker HOST:PID"
    return (
        f"{workers} worker processes sharing {address}. Each round is a new connection that whichever worker is free "
        "takes, as a load balancer may send each round to any instance; each round names the process that served it "
        "as served by worker HOST:PID"
    )


def served_by(seen: set[str], workers: int) -> str:
    """What the demo says at the end about the workers that served its rounds (`seen`, each HOST:PID)."""
    names = ", ".join(sorted(seen))
    if workers == 1:
        return f"Every round was served by the one worker process ({names}, as HOST:PID)."
    share = f"all {workers}" if len(seen) >= workers else f"{len(seen)} of the {workers}"
    return (
        f"Rounds were served by {share} worker processes (HOST:PID): {names}. Any worker may take any round, as a load "
        "balancer may send any round to any instance, so not every worker need serve one; each call went on "
        "wherever its next round landed."
    )


@dataclass(frozen=True)
class Driven:
    """A call taken to its end: the workers that served its rounds, its last round, and the request that round was
    (to send it again)."""

    instances: frozenset[str]
    last: Round
    request: Next


def drive(
    url: str, user: str, tool: str, arguments: dict[str, Any], answer: Callable[[str, dict[str, Any]], ElicitResult]
) -> Driven:
    """Call `tool` as `user` (demo token `demo-<user>`) until it completes or fails, printing each round; `answer`
    answers each question (its key and params) between rounds."""
    instances: set[str] = set()
    plan = flow_plan(answer, max_rounds=16)
    request = next(plan)
    for number in itertools.count(1):
        rnd = one_round(
            url, tool, arguments, token=f"demo-{user}", responses=request.responses, request_state=request.request_state
        )
        instances.add(rnd.instance or "?")
        where = f"[dim]served by worker {rnd.instance}[/]"
        if rnd.error is not None:
            console.print(f"  round {number}: error {rnd.error.error.code} {escape(rnd.error.error.message)} {where}")
        elif isinstance(rnd.result, CallToolResult):
            console.print(f"  round {number}: [green]complete[/] {escape(repr(said(rnd)))} {where}")
        else:
            console.print(f"  round {number}: [yellow]input_required[/] {where}")
        try:
            following = plan.send(rnd)
        except StopIteration:
            return Driven(frozenset(instances), rnd, request)
        request = following
    raise AssertionError("unreachable: itertools.count does not end")  # pragma: no cover
