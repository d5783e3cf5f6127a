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

__all__ = ["Driven", "drive", "one_round", "said"]


def one_round(url: str, tool: str, arguments: dict[str, Any], **options: Any) -> Round:
    """One round on a fresh connection, in an event loop of its own."""
    return anyio.run(functools.partial(call_round, url, tool, arguments, **options))


def said(rnd: Round) -> str:
    """The text a completed round's result says."""
    return (
        " ".join(getattr(c, "text", "") for c in rnd.result.content) if isinstance(rnd.result, CallToolResult) else ""
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
