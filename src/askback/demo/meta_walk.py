"""`askback demo`'s walk through the META exposure: a person with no account yet reaches `summarize_inbox` through
the five meta-tools, from a client that declares no elicitation at all, so that no step can be a question:

    search_tools(query="inbox")          -> summarize_inbox, its connection needs_connection
    execute_tool(name="summarize_inbox") -> {"status": "not_connected", "connection": "demo-mail"}
    connect_account(connection=...)      -> the person's link and its host; the person connects through it
    check_readiness(name=...)            -> ready
    execute_tool(name="summarize_inbox") -> the tool's own answer, the summary

The demo server serves both exposures (`EXPOSE`, in its environment), so the demo's direct flows are unchanged.
Each call is one round on a fresh connection in an event loop of its own, as the demo's other rounds are, so that
the link is followed (by the scripted person, or by the person at the terminal) between rounds, in plain code.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from typing import Any

import anyio
from mcp_types import CallToolResult
from rich.console import Console
from rich.markup import escape

from askback.demo.mail import CONNECTION
from askback.testing import call_round

__all__ = ["EXPOSE", "walk_meta"]

EXPOSE = {"ASKBACK_EXPOSE": "both"}
"""The demo server's environment for serving the meta-tools beside its own tools."""

TOOL = "summarize_inbox"


def _brief(tool: str, found: Mapping[str, Any]) -> str:
    """One line (rich markup) about a meta-tool's structured result."""
    if tool == "search_tools":
        hits = []
        for hit in found.get("tools", []):
            needs = ", ".join(f"{c['connection']} {c['readiness']}" for c in hit["connections"])
            hits.append(f"[cyan]{escape(str(hit['name']))}[/]" + (f" needs {escape(needs)}" if needs else ""))
        return ", ".join(hits) or "no tool"
    if tool == "connect_account":
        return f"a link to {escape(str(found['connection']))} at [bold]{escape(str(found['host']))}[/]"
    if tool == "check_readiness":
        states = ", ".join(f"{c['connection']} {c['readiness']}" for c in found.get("connections", []))
        return f"{'[green]ready[/]' if found.get('ready') else '[yellow]not ready[/]'}: {escape(states)}"
    if tool == "execute_tool" and "status" not in found:
        return f"[green]complete[/] {escape(repr(found.get('result', dict(found))))}"
    return f"[yellow]{escape(json.dumps(dict(found)))}[/]"


def walk_meta(url: str, user: str, open_link: Callable[[str, str], object], console: Console) -> bool:
    """Walk the META loop on the demo server's /mcp `url` as `user` (demo token `demo-<user>`), printing each
    step's structured result on `console`; `open_link(link, user)` is the person following their link, done when
    it returns (whether they connected, `check_readiness` says next). True when `execute_tool` answered the tool's
    own result."""
    console.rule(f"[bold]{user}[/] reaches [cyan]{TOOL}[/] through the META exposure [dim](no elicitation)[/]")

    def call(tool: str, **arguments: Any) -> Mapping[str, Any] | None:
        rnd = anyio.run(functools.partial(call_round, url, tool, arguments, token=f"demo-{user}", elicitation=False))
        shown = escape(", ".join(f"{k}={v!r}" for k, v in arguments.items()))
        if rnd.error is not None:
            console.print(f"  {tool}({shown}): error {rnd.error.error.code} {escape(rnd.error.error.message)}")
            return None
        result = rnd.result
        if not isinstance(result, CallToolResult) or result.is_error or result.structured_content is None:
            text = " ".join(getattr(c, "text", "") for c in getattr(result, "content", []))
            console.print(f"  {tool}({shown}): [red]{escape(text or type(result).__name__)}[/]")
            return None
        found = dict(result.structured_content)
        console.print(f"  {tool}({shown}) -> {_brief(tool, found)}")
        return found

    if call("search_tools", query="inbox") is None:
        return False
    ran = call("execute_tool", name=TOOL)
    if ran is None or ran.get("status") != "not_connected":
        return ran is not None and "status" not in ran
    console.print(f"    [dim]the account is not connected: the agent asks for {escape(user)}'s link[/]")
    link = call("connect_account", connection=str(ran.get("connection", CONNECTION)))
    if link is None:
        return False
    open_link(str(link["url"]), user)
    readiness = call("check_readiness", name=TOOL)
    if readiness is None or not readiness.get("ready"):
        console.print(f"    [dim]{escape(user)} did not connect: execute_tool would answer not_connected again[/]")
        return False
    done = call("execute_tool", name=TOOL)
    return done is not None and "status" not in done
