"""`askback audit`: who was asked what, who answered what, and how each flow ended, as a table or JSON lines; and
`askback audit verify`, which checks the audit chains for rows edited, deleted, reordered, inserted or cut off."""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Annotated, get_args

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from askback.audit.event import EventKind
from askback.cli.options import DATABASE_HELP
from askback.cli.output import UsageError, reports_errors
from askback.core.terminal_text import for_terminal

if TYPE_CHECKING:
    from askback.audit import AuditEvent
    from askback.audit.chain import Break, Verdict

__all__ = ["register"]

_EVENTS: tuple[str, ...] = get_args(EventKind)

# `askback audit` lists events; `askback audit verify` checks the chains. The listing is the group's own callback,
# so that `askback audit --tool x` keeps working.
audit_app = typer.Typer(
    invoke_without_command=True, no_args_is_help=False, subcommand_metavar="[COMMAND]", rich_markup_mode=None
)


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
    # between words and fold a value too long for its column rather than cut it. The scopes column is there only
    # when some event listed has scopes recorded, so that a trail without tokens keeps its width.
    scoped = any(ev.scopes is not None for ev in events)
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    table.add_column("time (UTC)", no_wrap=True)
    table.add_column("event", no_wrap=True)
    if wide:
        table.add_column("tool", overflow="fold")
    table.add_column("user", overflow="fold")
    if scoped:
        table.add_column("scopes", overflow="fold")
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
        if scoped:
            cells.append(" ".join(ev.scopes or ()))
        if wide:
            cells.append(ev.flow_id or "")
        cells += ["" if ev.round is None else str(ev.round), ", ".join(ev.keys), _answer_cell(ev)]
        if wide:
            cells.append(ev.instance or "")
        # Text: what a user typed is never read as markup; for_terminal: nor obeyed as an escape sequence.
        table.add_row(*(Text(for_terminal(cell)) for cell in cells))
    return table


@reports_errors
def audit(
    ctx: typer.Context,
    tool: Annotated[str | None, typer.Option(help="Only this tool.")] = None,
    principal: Annotated[str | None, typer.Option("--principal", "--user", help="Only this user.")] = None,
    flow: Annotated[str | None, typer.Option(help="Only this flow id.")] = None,
    event: Annotated[str | None, typer.Option(help=f"Only this kind: {' | '.join(_EVENTS)}.")] = None,
    contains: Annotated[str | None, typer.Option(help="Answer content, outcome or detail contains this text.")] = None,
    since: Annotated[str | None, typer.Option(help="From this ISO time (UTC unless given).")] = None,
    until: Annotated[str | None, typer.Option(help="Until this ISO time.")] = None,
    limit: Annotated[int, typer.Option(min=1, help="At most this many events.")] = 1000,
    database: Annotated[str | None, typer.Option("--database", help=DATABASE_HELP)] = None,
    wide: Annotated[bool, typer.Option("--wide", help="Every column: also tool, full flow id and instance.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per line, for machines.")] = False,
) -> None:
    """List audit events: who was asked what, who answered what, and how each flow ended.

    Who confirmed the deletion of billing-legacy, and when (after `askback demo`):

    \b
        askback audit --database sqlite:///askback-demo.db \\
          --tool delete_project --event answered --contains billing-legacy

    `askback audit verify` checks that no event was edited, deleted, reordered, inserted or cut off.
    """
    if ctx.invoked_subcommand is not None:
        return
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
            return await store.audit_log.query(flt)
        finally:
            await store.close()

    events = run_with_database(url, run)
    if as_json:
        for ev in events:
            row = {k: v for k, v in ev.__dict__.items() if v is not None and v != ()}
            row["keys"] = list(ev.keys)
            if ev.scopes is not None:
                row["scopes"] = list(ev.scopes)
            row["time"] = dt.datetime.fromtimestamp(ev.at, dt.UTC).isoformat()
            typer.echo(json.dumps(row, sort_keys=True))
        return
    console = Console()
    if not events:
        console.print("no audit events match")
        return
    console.print(_audit_table(events, wide=wide))


def _break_json(found: Break) -> dict[str, object]:
    return {k: v for k, v in found.__dict__.items() if v is not None}


def _verdict_json(verdict: Verdict) -> str:
    return json.dumps(
        {
            "ok": verdict.ok,
            "chains": [
                {
                    "chain": report.head.chain,
                    "seq": report.head.seq,
                    "head": report.head.head,
                    "started_at": report.head.started_at,
                    "rows": report.rows,
                    "ok": report.broken is None,
                    "broken": None if report.broken is None else _break_json(report.broken),
                }
                for report in verdict.chains
            ],
            "problems": [_break_json(problem) for problem in verdict.problems],
            "unchained": verdict.unchained,
        },
        sort_keys=True,
    )


def _print_verdict(verdict: Verdict) -> None:
    console = Console()
    if verdict.chains:
        table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
        table.add_column("chain", overflow="fold")
        table.add_column("started (UTC)", no_wrap=True)
        table.add_column("seq", justify="right")
        table.add_column("head", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        for report in verdict.chains:
            started = dt.datetime.fromtimestamp(report.head.started_at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
            status = "ok" if report.broken is None else report.broken.kind
            cells = [report.head.chain, started, str(report.head.seq), report.head.head[:16], status]
            table.add_row(*(Text(for_terminal(cell)) for cell in cells))
        console.print(table)
    else:
        console.print("no audit chains yet")
    # soft_wrap: each finding stays one line, whole for grep and for a log collector.
    for report in verdict.chains:
        if report.broken is not None:
            console.print(
                Text(for_terminal(f"broken: chain {report.head.chain}: {report.broken.message}")), soft_wrap=True
            )
    for problem in verdict.problems:
        where = f"chain {problem.chain}: " if problem.chain is not None else ""
        console.print(Text(for_terminal(f"broken: {where}{problem.message}")), soft_wrap=True)
    if verdict.unchained:
        console.print(
            Text(f"{verdict.unchained} row(s) unchained, written before the chain existed: not verified"),
            soft_wrap=True,
        )
    rows = sum(report.rows for report in verdict.chains)
    broken = sum(report.broken is not None for report in verdict.chains) + len(verdict.problems)
    if broken:
        console.print(Text(f"{broken} broken link(s) in the audit trail"), soft_wrap=True)
    else:
        console.print(Text(f"{len(verdict.chains)} chain(s), {rows} row(s): intact"), soft_wrap=True)


@reports_errors
def verify(
    database: Annotated[str | None, typer.Option("--database", help=DATABASE_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object, with every chain's full head.")] = False,
) -> None:
    """Check the audit chains: report the first broken link of each (a row edited, deleted, reordered, inserted by
    hand, or a tail cut off) and print every chain's head. Exit status 1 when anything is broken.

    Keep the heads somewhere the database's writers cannot reach to make a rewrite of a whole chain show:

    \b
        askback audit verify --json > audit-heads-$(date +%F).json
    """
    from askback.cli.db import run_with_database
    from askback.settings import load_settings
    from askback.store import Store

    url = database or load_settings().database_url

    async def run() -> Verdict:
        store = await Store.open(url, migrate=False)
        try:
            return await store.audit_log.verify()
        finally:
            await store.close()

    verdict = run_with_database(url, run)
    if as_json:
        typer.echo(_verdict_json(verdict))
    else:
        _print_verdict(verdict)
    if not verdict.ok:
        raise typer.Exit(1)


audit_app.callback()(audit)
audit_app.command("verify")(verify)


def register(app: typer.Typer) -> None:
    """Add `audit` (and `audit verify`) to `app`."""
    app.add_typer(audit_app, name="audit")
