"""`askback approvals list|show`: approval requests in the shared store, for operators, read-only. `--json` prints
one JSON document.

What is shown, and what is not: a request's id, status, key and title, tool, requester and the actors of its token,
its digest, the flow that asked and the one that consumed it, its times, why it ended, and each vote (who, approve or
deny, their reason, how they signed in, when). Never the values of the call's arguments, nor the answers or the
summary: only the arguments' names (those hidden by the policy marked so) and the answers' keys. They belong to the
requester and the approvers, who see them on the approvals' pages.

Nothing is written: a pending request past its time is shown `expired` (the next read by the server records it so).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar, get_args

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import ExitStatus, UsageError, reports_errors
from askback.core.approving import ApprovalStatus
from askback.core.terminal_text import for_terminal
from askback.errors import AskbackError

if TYPE_CHECKING:
    from askback.approvals.service import ApprovalRecord, ApprovalService

__all__ = ["UnknownApprovalError", "register"]

_T = TypeVar("_T")
_STATUSES: tuple[str, ...] = get_args(ApprovalStatus)

approvals_app = typer.Typer(
    help="Approval requests (the approvals extension): list, show.", no_args_is_help=True, rich_markup_mode=None
)

_DATABASE = typer.Option("--database", help=DATABASE_HELP)
_JSON = typer.Option("--json", help="Print JSON.")


class UnknownApprovalError(AskbackError):
    """No approval request has that id in the store: exit status 4, the command line's not-found status."""

    exit_code = ExitStatus.UNKNOWN_CALL


def _when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _with_service(database: str | None, work: Callable[[ApprovalService], Awaitable[_T]]) -> tuple[_T, float]:
    """Open the store (every component's schema must be current) and run `work(service)`; its result and the time."""
    from askback.approvals.service import ApprovalService
    from askback.cli.db import run_with_database
    from askback.clock import SystemClock
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import Store

    settings = load_settings()
    url = database or settings.database_url
    clock = SystemClock()

    async def run() -> tuple[_T, float]:
        store = await Store.open(url, components=all_components())
        try:
            service = ApprovalService(
                store.database,
                clock=clock,
                audit_log=store.audit_log,
                status_url=lambda approval_id: "",
                pending_per_requester=settings.pending_approvals_per_principal,
            )
            return await work(service), clock.now()
        finally:
            await store.close()

    return run_with_database(url, run)


def _status(record: ApprovalRecord, now: float) -> str:
    return "expired" if record.status in ("pending", "approved") and now >= record.expires_at else record.status


def _summary(record: ApprovalRecord, now: float) -> dict[str, Any]:
    return {
        "id": record.id,
        "status": _status(record, now),
        "key": record.approval.key,
        "title": record.approval.title,
        "tool": record.tool,
        "requester": record.requester,
        "approvals": len(record.approvers),
        "required": record.approval.required,
        "created_at": record.created_at,
        "expires_at": record.expires_at,
    }


def _detail(record: ApprovalRecord, now: float) -> dict[str, Any]:
    hidden = record.approval.hidden
    return {
        **_summary(record, now),
        "actors": list(record.actors),
        "digest": record.digest,
        "flow_id": record.flow_id,
        "consumed_by_flow": record.consumed_by_flow,
        "decided_at": record.decided_at,
        "reason": record.reason,
        "policy": {
            "principals": sorted(record.approval.principals),
            "groups": sorted(record.approval.groups),
            "self_approval": record.approval.self_approval,
        },
        "arguments": [f"{name} (hidden)" if name in hidden else name for name in sorted(record.arguments)],
        "answers": sorted(record.answers),
        "votes": [
            {"approver": v.approver, "decision": v.decision, "reason": v.reason, "method": v.method, "at": v.at}
            for v in record.votes
        ],
    }


@approvals_app.command("list")
@reports_errors
def approvals_list(
    status: Annotated[str | None, typer.Option("--status", help=f"Only {', '.join(_STATUSES)} ones.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="How many, newest first.")] = 100,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """List approval requests, newest first: id, status, tool, requester, approvals so far, created, expires."""
    if status is not None and status not in _STATUSES:
        raise UsageError(f"--status is one of {', '.join(_STATUSES)}, not {status!r}")
    # A pending request past its time is shown expired: read the pending ones too when asked for expired ones.
    stored = None if status in (None, "expired", "pending") else status

    async def work(service: ApprovalService) -> list[ApprovalRecord]:
        return await service.listing(status=stored, limit=limit, expire=False)  # type: ignore[arg-type]

    found, now = _with_service(database, work)
    rows = [row for row in (_summary(r, now) for r in found) if status is None or row["status"] == status]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no approval requests")
    for r in rows:
        typer.echo(
            for_terminal(
                f"{r['id']}  {r['status']}  {r['tool']}  {r['requester'] or '-'}  {r['approvals']}/{r['required']} "
                f"approved  created {_when(r['created_at'])}  expires {_when(r['expires_at'])}"
            )
        )


@approvals_app.command("show")
@reports_errors
def approvals_show(
    approval_id: Annotated[str, typer.Argument(help="The request's id (from `askback approvals list`).")],
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Show one approval request and its votes (never the call's argument values, answers or summary)."""

    async def work(service: ApprovalService) -> ApprovalRecord | None:
        return await service.get(approval_id, expire=False)

    record, now = _with_service(database, work)
    if record is None:
        raise UnknownApprovalError(
            f"there is no approval request {approval_id!r} in the store (see `askback approvals list`)"
        )
    shown = _detail(record, now)
    if as_json:
        typer.echo(json.dumps(shown, indent=2))
        return
    ended = f" ({shown['reason']})" if shown["reason"] else ""
    typer.echo(for_terminal(f"{record.id}: {shown['status']}{ended}  {record.approval.title} [{record.approval.key}]"))
    typer.echo(for_terminal(f"tool {record.tool}({', '.join(shown['arguments'])}) for {record.requester or '-'}"))
    if record.actors:
        typer.echo(for_terminal(f"acting for them: {', '.join(record.actors)}"))
    who = [*shown["policy"]["principals"], *(f"group {g}" for g in shown["policy"]["groups"])]
    typer.echo(for_terminal(f"{record.approval.required} of: {', '.join(who)}"))
    typer.echo(
        f"created {_when(record.created_at)}, expires {_when(record.expires_at)}, decided {_when(record.decided_at)}"
    )
    typer.echo(f"digest {record.digest}")
    consumed = f", consumed by flow {record.consumed_by_flow}" if record.consumed_by_flow else ""
    typer.echo(for_terminal(f"asked by flow {record.flow_id}{consumed}"))
    for v in record.votes:
        reason = f": {v.reason}" if v.reason else ""
        typer.echo(for_terminal(f"  {_when(v.at)}  {v.approver} {v.decision}d ({v.method}){reason}"))


def register(app: typer.Typer) -> None:
    """Add the `approvals` group to `app`."""
    app.add_typer(approvals_app, name="approvals")
