"""`askback audit`: who was asked what, who answered what, and how each flow ended, as a table or JSON lines."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from askback.cli.output import UsageError, reports_errors

if TYPE_CHECKING:
    from askback.audit import AuditEvent

__all__ = ["register"]

_EVENTS = ("asked", "answered", "completed", "replayed", "rejected")


def _parse_time(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise UsageError(f"--{name} takes an ISO date or time, e.g. 2026-11-30 or 2026-11-30T14:00") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def _answer_cell(ev: AuditEvent) -> str:
    """What a person answered, or how the flow ended: `accept (project_name: billing-legacy)`, `decline`,
    `completed`, `invalid_state (the detail)`. Spaces after each separator let a narrow column wrap between
    words rather than inside a value."""
    what = ev.action or ev.outcome or ""
    if ev.content:
        shown = ", ".join(f"{k}: {v if isinstance(v, str) else json.dumps(v)}" for k, v in ev.content.items())
    else:
        shown = ev.detail or ""
    return f"{what} ({shown})" if what and shown else what or shown


def _audit_table(events: list[AuditEvent], *, wide: bool) -> Table:
    # No borders: at 80 columns every character goes to the values. Time and event never wrap; the rest wrap
    # between words and fold a value too long for its column rather than cut it.
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    if wide:
        table.add_column("tool", overflow="fold")
    table.add_column("user", overflow="fold")
    if wide:
        table.add_column("flow", overflow="fold")
    table.add_column("round", justify="right")
    table.add_column("question", overflow="fold")
    table.add_column("answer / outcome", overflow="fold", min_width=16)
    if wide:
        table.add_column("instance", overflow="fold")
    for ev in events:
        when = dt.datetime.fromtimestamp(ev.at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        cells = [when, ev.event]
        if wide:
            cells.append(ev.tool or "")
        cells.append(ev.principal or "")
        if wide:
            cells.append(ev.flow_id or "")
        cells += ["" if ev.round is None else str(ev.round), ", ".join(ev.keys), _answer_cell(ev)]
        if wide:
            cells.append(ev.instance or "")
        table.add_row(*(Text(cell) for cell in cells))  # Text: what a user typed is never read as markup
    return table


@reports_errors
def audit(
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
    principal: Annotated[str | None, typer.Option("--principal", "--user", help="Only this user.")] = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow id.")] = None,
    event: Annotated[str | None, typer.Option(help=f"Only this kind: {' | '.join(_EVENTS)}.")] = None,
    contains: Annotated[str | None, typer.Option(help="Answer content, outcome or detail contains this text.")] = None,
    since: Annotated[str | None, typer.Option(help="From this ISO time (UTC unless given).")] = None,
    until: Annotated[str | None, typer.Option(help="Until this ISO time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 1000,
    database: Annotated[
        str | None, typer.Option("--database", help="Database URL (default: ASKBACK_DATABASE_URL).")
    ] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column: also tool, full flow id and instance.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line, for machines.")] = False,
) -> None:
    """List audit events: who was asked what, who answered what, and how each flow ended.

    Who confirmed the deletion of billing-legacy, and when (after `askback demo`):

    \b
        askback audit --database sqlite:///askback-demo.db \\
          --tool delete_project --event answered --contains billing-legacy
    """
    from askback.audit import AuditFilter
    from askback.cli.db import run_with_database
    from askback.settings import load_settings
    from askback.store import Store

    if event is not None and event not in _EVENTS:
        raise UsageError(f"--event is one of {', '.join(_EVENTS)}, not {event!r}")
    flt = AuditFilter(
        tool=tool,
        principal=principal,
        flow_id=flow,
        event=event,
        contains=contains,
        since=_parse_time(since, "since"),
        until=_parse_time(until, "until"),
        limit=limit,
    )
    url = database or load_settings().database_url

    async def run() -> list[AuditEvent]:
        store = await Store.open(url, migrate=False)
        try:
            return await store.audit(flt)
        finally:
            await store.close()

    events = run_with_database(url, run)
    if as_json:
        for ev in events:
            row = {k: v for k, v in ev.__dict__.items() if v is not None and v != ()}
            row["keys"] = list(ev.keys)
            row["time"] = dt.datetime.fromtimestamp(ev.at, dt.UTC).isoformat()
            typer.echo(json.dumps(row, sort_keys=True))
        return
    console = Console()
    if not events:
        console.print("no audit events match")
        return
    console.print(_audit_table(events, wide=wide))


def register(app: typer.Typer) -> None:
    """Add `audit` to `app`."""
    app.command("audit")(audit)
