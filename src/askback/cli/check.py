"""`askback check URL --tool NAME`: the command around `askback.tools.check`.

Parsing and conversion happen here (the `--args` JSON, the URL), the probe in `askback.tools.check.run_check`, and the
output here again: a table for people (colour only on a terminal) or one JSON document with `--json`. Exit status
0 when no check failed, 1 when one did, 2 when the server could not be probed at all or the options are wrong.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from askback.cli.output import UsageError, reports_errors
from askback.errors import ProbeError

if TYPE_CHECKING:
    from askback.tools.check import Check, Report

__all__ = ["register"]

_STYLE = {"pass": "green", "fail": "bold red", "skip": "yellow"}


def _parse_args(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UsageError(
            f"--args is not valid JSON ({exc}); give the tool's arguments as an object, e.g. '{{\"id\": 1}}'"
        ) from None
    if not isinstance(value, dict):
        raise UsageError(f"--args must be a JSON object of the tool's arguments, not {type(value).__name__}")
    return value


def _evidence_cell(check: Check) -> str:
    lines = [escape(check.detail)]
    for item in check.evidence:
        lines.append(f"[dim]→ {escape(item.request)}[/]")
        lines.append(f"[dim]← {escape(item.response)}[/]")
    return "\n".join(lines)


def print_report(report: Report, console: Console) -> None:
    """The report as a table: one row per check, with the evidence the verdict rests on."""
    table = Table(title=f"askback check {report.url} --tool {report.tool}")
    table.add_column("check", no_wrap=True)
    table.add_column("status")
    table.add_column("rule")
    table.add_column("evidence", overflow="fold")  # long JSON tokens are folded, never cut
    for check in report.checks:
        status = f"[{_STYLE[check.status]}]{check.status}[/]"
        table.add_row(check.name, status, ", ".join(check.rules), _evidence_cell(check))
    console.print(table)
    counts = report.counts()
    verdict = "[bold red]FAILED[/]" if report.failed else "[green]OK[/]"
    console.print(f"{verdict}: {counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")


@reports_errors
def check(
    url: Annotated[str, typer.Argument(metavar="URL", help="The MCP endpoint, e.g. http://127.0.0.1:8000/mcp.")],
    tool: Annotated[str, typer.Option("--tool", help="A tool that asks the user; the probe calls it.")],
    args: Annotated[str, typer.Option("--args", help="The tool's arguments, a JSON object.")] = "{}",
    token: Annotated[str | None, typer.Option("--token", help="Sent as Authorization: Bearer TOKEN.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds allowed for each request.")] = 10.0,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document, for machines.")] = False,
) -> None:
    """Probe an MCP server's elicitation behaviour (2026-07-28, stateless Streamable HTTP) through one tool.

    The tool is called about a dozen times: with every combination of declared elicitation modes, with a
    tampered state, declined, cancelled, and answered with deliberately invalid content. Nothing is ever
    accepted with valid content, but point it at a test deployment all the same.
    """
    from askback.tools.check import run_check  # the probe needs httpx and the SDK's wire types: only when it runs

    arguments = _parse_args(args)
    try:
        if as_json:
            report = run_check(url, tool, arguments, token=token, timeout=timeout)
        else:
            with Console(stderr=True).status(f"probing {tool} at {url}"):
                report = run_check(url, tool, arguments, token=token, timeout=timeout)
    except ProbeError as exc:
        raise ProbeError(f"cannot check {url}: {exc}") from None
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2))
    else:
        print_report(report, Console())
    raise typer.Exit(1 if report.failed else 0)


def register(app: typer.Typer) -> None:
    """Add the `check` command to `app` (the `askback` command, or an app of your own)."""
    app.command("check")(check)
