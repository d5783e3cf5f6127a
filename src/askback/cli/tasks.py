"""`askback tasks list|show|cancel`: the durable tasks in the shared store (`askback.server.tasks`) from the command
line, for operators. `--json` prints one JSON document.

What is shown, and what is not: a task's id, status and status message, tool, principal and scopes, its times, the
instance holding its lease, the names of its arguments, how many answers it has received, and, while it waits, the
keys of its outstanding questions with their method and mode. Never the arguments' values, the questions' text, schema
or links (a connect link carries its own nonce), the answers' content, nor the result's or the error's content: only
whether the result is a tool error, and the JSON-RPC error's code. Those may hold what the person typed or what a tool
returned, which belongs to the task's principal, reachable through `tasks/get`.

`cancel` is the same cooperative cancel as `tasks/cancel`, the same function, audited alike: the task ends `cancelled`,
its outstanding questions are dropped, and the instance running its handler stops at its next lease renewal or
before its next effect, whichever comes first; a task that has ended already stays as it is. A task waiting for
approvals has the requests it waited on withdrawn, as `tasks/cancel` withdraws them.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import ExitStatus, UsageError, reports_errors
from askback.core.terminal_text import for_terminal
from askback.errors import AskbackError

if TYPE_CHECKING:
    from askback.server.tasks.rows import TaskRecord
    from askback.store import Store

__all__ = ["UnknownTaskError", "register"]

_T = TypeVar("_T")

tasks_app = typer.Typer(
    help="Durable tasks (the tasks extension): list, show, cancel.", no_args_is_help=True, rich_markup_mode=None
)

_DATABASE = typer.Option("--database", help=DATABASE_HELP)
_JSON = typer.Option("--json", help="Print JSON.")


class UnknownTaskError(AskbackError):
    """No live task has that id in the store (it never existed, or its time to live has passed): exit status 4, the
    command line's not-found status."""

    exit_code = ExitStatus.UNKNOWN_CALL


def _when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _unknown(task_id: str) -> UnknownTaskError:
    return UnknownTaskError(
        f"there is no task {task_id!r} in the store (unknown, or past its time to live; see `askback tasks list`)"
    )


def _with_store(database: str | None, work: Callable[[Store, float], Awaitable[_T]]) -> _T:
    """Open the store (every component's schema must be current) and run `work(store, now)`."""
    from askback.cli.db import run_with_database
    from askback.clock import SystemClock
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import Store

    url = database or load_settings().database_url

    async def run() -> _T:
        store = await Store.open(url, components=all_components())
        try:
            return await work(store, SystemClock().now())
        finally:
            await store.close()

    return run_with_database(url, run)


def _waiting_for(record: TaskRecord) -> list[dict[str, Any]]:
    """The outstanding questions: their wire keys, the flow's key, method and mode; never their text or links."""
    waiting = []
    for wire, entry in sorted(record.outstanding.items()):
        request = entry.get("request") or {}
        params = request.get("params") or {}
        waiting.append(
            {
                "key": wire,
                "question": entry.get("key"),
                "method": request.get("method"),
                "mode": params.get("mode", "form"),
            }
        )
    return waiting


def _summary(record: TaskRecord) -> dict[str, Any]:
    return {
        "task_id": record.task_id,
        "status": str(record.status),
        "tool": record.tool,
        "principal": record.principal,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
        "waiting_for": [q["key"] for q in _waiting_for(record)],
    }


def _detail(record: TaskRecord) -> dict[str, Any]:
    return {
        **_summary(record),
        "status_message": record.status_message,
        "scopes": list(record.scopes),
        "expires_at": record.expires_at,
        "ttl_ms": record.ttl_ms,
        "poll_interval_ms": record.poll_ms,
        "arguments": sorted(record.arguments),
        "answers_received": len(record.responses),
        "waiting_for": _waiting_for(record),
        "result": None if record.result is None else {"is_error": bool(record.result.get("isError", False))},
        "error": None if record.error is None else {"code": record.error.get("code")},
        "lease_owner": record.lease_owner,
        "lease_until": record.lease_until,
    }


async def _listing(
    store: Store, now: float, *, status: str | None, principal: str | None, limit: int
) -> list[TaskRecord]:
    from sqlalchemy import select

    from askback.server.tasks.rows import read_task
    from askback.store.models import TaskRow

    query = select(TaskRow.task_id).where(TaskRow.expires_at >= now)
    if status is not None:
        query = query.where(TaskRow.status == status)
    if principal is not None:
        query = query.where(TaskRow.principal == principal)
    query = query.order_by(TaskRow.created_at.desc(), TaskRow.task_id).limit(limit)
    ids = await store.database.read(lambda conn: [row.task_id for row in conn.execute(query).all()], doing="list tasks")
    found = [await read_task(store, task_id, now=now) for task_id in ids]
    return [record for record in found if record is not None]


@tasks_app.command("list")
@reports_errors
def tasks_list(
    status: Annotated[
        str | None, typer.Option("--status", help="Only working, input_required, completed, failed or cancelled ones.")
    ] = None,
    principal: Annotated[str | None, typer.Option("--principal", help="Only this user's tasks.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 100,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """List live tasks, newest first: id, status, tool, user, created, updated, the question keys it waits on."""
    from askback.server.tasks.status import TaskStatus

    statuses = [str(s) for s in TaskStatus]
    if status is not None and status not in statuses:
        raise UsageError(f"--status is one of {', '.join(statuses)}, not {status!r}")

    async def work(store: Store, now: float) -> list[TaskRecord]:
        return await _listing(store, now, status=status, principal=principal, limit=limit)

    rows = [_summary(r) for r in _with_store(database, work)]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no tasks")
    for r in rows:
        waiting = f"  waiting for {', '.join(r['waiting_for'])}" if r["waiting_for"] else ""
        typer.echo(
            for_terminal(
                f"{r['task_id']}  {r['status']}  {r['tool']}  {r['principal'] or '-'}  created "
                f"{_when(r['created_at'])}  updated {_when(r['updated_at'])}{waiting}"
            )
        )


@tasks_app.command("show")
@reports_errors
def tasks_show(
    task_id: Annotated[str, typer.Argument(help="The task id (from `askback tasks list`).")],
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Show one task: where it stands, who made it, the questions it waits on (never answers or results)."""
    from askback.server.tasks.rows import read_task

    async def work(store: Store, now: float) -> TaskRecord | None:
        return await read_task(store, task_id, now=now)

    record = _with_store(database, work)
    if record is None:
        raise _unknown(task_id)
    shown = _detail(record)
    if as_json:
        typer.echo(json.dumps(shown, indent=2))
        return
    message = f" ({shown['status_message']})" if shown["status_message"] else ""
    typer.echo(for_terminal(f"{record.task_id}: {shown['status']}{message}"))
    typer.echo(for_terminal(f"tool {record.tool}({', '.join(shown['arguments'])}) for {record.principal or '-'}"))
    if record.scopes:
        typer.echo(for_terminal(f"scopes {' '.join(record.scopes)}"))
    typer.echo(
        f"created {_when(record.created_at)}, updated {_when(record.updated_at)}, expires {_when(record.expires_at)}"
    )
    for q in shown["waiting_for"]:
        typer.echo(for_terminal(f"  waiting for {q['key']}  ({q['question']}, {q['method']}, {q['mode']})"))
    if shown["answers_received"]:
        typer.echo(f"{shown['answers_received']} answer(s) received")
    if shown["result"] is not None:
        typer.echo("result: a tool error" if shown["result"]["is_error"] else "result: a tool result")
    if shown["error"] is not None:
        typer.echo(f"error: JSON-RPC {shown['error']['code']}")
    if record.lease_owner is not None:
        typer.echo(for_terminal(f"running on {record.lease_owner}, lease until {_when(record.lease_until)}"))


async def _withdraw(store: Store, record: TaskRecord) -> None:
    """Withdraw the approval requests a cancelled task waited on, as `tasks/cancel` does through
    `ApprovalWaits.withdraw`: by the ids the task's record names, whatever spelling its requester is kept in (the
    approvals keep the sign-in's home spelling, which this command does not know); one already decided stays as it
    is."""
    from askback.approvals.service import ApprovalService
    from askback.clock import SystemClock

    service = ApprovalService(
        store.database,
        clock=SystemClock(),
        audit_log=store.audit_log,
        status_url=lambda approval_id: "",
        pending_per_requester=0,  # a withdrawal makes no request: the cap is never read
    )
    for approval_id in sorted(record.awaited_approvals):
        try:
            await service.withdraw_awaited(approval_id, by=record.principal)
        except AskbackError as exc:
            # The task is cancelled all the same; the request ends when its time does.
            typer.echo(
                for_terminal(
                    f"warning: approval request {approval_id} was not withdrawn ({exc}); it expires by itself"
                ),
                err=True,
            )


@tasks_app.command("cancel")
@reports_errors
def tasks_cancel(
    task_id: Annotated[str, typer.Argument(help="The task id (from `askback tasks list`).")],
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Cancel a task as `tasks/cancel` does: it ends cancelled and its effects never run, unless it has started one
    (it then runs on to its result); an ended task stays as is."""
    from askback.audit.emit import instance_id
    from askback.server.tasks.runner import cancel
    from askback.server.tasks.status import TERMINAL

    async def work(store: Store, now: float) -> tuple[TaskRecord | None, TaskRecord | None]:
        before, after = await cancel(store, task_id, now=now, instance=instance_id())
        if after is not None and before is not None and before.awaited_approvals:
            await _withdraw(store, before)
        return before, after

    before, after = _with_store(database, work)
    if before is None:
        raise _unknown(task_id)
    if after is None and before.status in TERMINAL:
        typer.echo(f"{task_id}: {before.status} already (an ended task stays as it is)")
        return
    if after is None:
        typer.echo(f"{task_id}: not cancelled: it has started an effect, so it runs on and ends with its result")
        return
    typer.echo(f"{task_id}: cancelled (the instance running it stops at its next lease renewal or effect)")


def register(app: typer.Typer) -> None:
    """Add the `tasks` group to `app`."""
    app.add_typer(tasks_app, name="tasks")
