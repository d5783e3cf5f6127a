"""`askback webhooks list|deliveries|redeliver|test`: the webhook endpoints and their deliveries from the command
line. The endpoints come from the file ASKBACK_WEBHOOKS names; no listing shows a secret or a body, and every URL is
shown through `redacted_url` (no user name or password, no query string). `--json` prints one JSON document."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import UsageError, reports_errors
from askback.core.terminal_text import for_terminal
from askback.webhooks.endpoints import redacted_url

if TYPE_CHECKING:
    from askback.webhooks import Endpoint, Outbox

__all__ = ["register"]

_T = TypeVar("_T")

webhooks_app = typer.Typer(
    help="Signed webhooks: endpoints (ASKBACK_WEBHOOKS) and deliveries.", no_args_is_help=True, rich_markup_mode=None
)

_DATABASE = typer.Option("--database", help=DATABASE_HELP)
_JSON = typer.Option("--json", help="Print JSON.")
_STATUSES = ("pending", "delivered", "failed")


def _when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _endpoints() -> tuple[Endpoint, ...]:
    from askback.webhooks import Webhooks

    return Webhooks.from_settings().endpoints


def _with_outbox(database: str | None, work: Callable[[Outbox], Awaitable[_T]]) -> _T:
    """Open the store (with the webhooks' tables) and run `work(outbox)`."""
    from askback.cli.db import run_with_database
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import Store
    from askback.webhooks import Outbox
    from askback.webhooks.schema import MIGRATIONS

    url = database or load_settings().database_url
    components = tuple(dict.fromkeys((*all_components(), MIGRATIONS)))

    async def run() -> _T:
        store = await Store.open(url, components=components)
        try:
            return await work(Outbox(store.database, store.events))
        finally:
            await store.close()

    return run_with_database(url, run)


@webhooks_app.command("list")
@reports_errors
def webhooks_list(as_json: Annotated[bool, _JSON] = False) -> None:
    """List the endpoints of ASKBACK_WEBHOOKS: key, URL, events, where the secrets come from (never the secrets)."""
    rows = [
        {
            "key": e.key,
            "url": e.shown_url,
            "events": list(e.events),
            "secret_env": e.secret_env,
            "secrets": len(e.secrets),
        }
        for e in _endpoints()
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no webhook endpoints")
    for e in _endpoints() if rows else ():
        typer.echo(
            for_terminal(
                f"{e.key}  {e.shown_url}  {','.join(e.events)}  {len(e.secrets)} secret(s) from {e.secret_env}"
            )
        )


@webhooks_app.command("deliveries")
@reports_errors
def webhooks_deliveries(
    status: Annotated[str | None, typer.Option("--status", help="Only pending, delivered or failed ones.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="How many, newest first.")] = 100,
    attempts: Annotated[bool, typer.Option("--attempts", help="With every attempt of each.")] = False,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """List deliveries, newest first: id, status, attempts, event, endpoint, the last answer."""
    if status is not None and status not in _STATUSES:
        raise UsageError(f"--status is one of {', '.join(_STATUSES)}, not {status!r}")

    async def work(outbox: Outbox) -> list[dict[str, Any]]:
        found = await outbox.deliveries(status=status, limit=limit)  # type: ignore[arg-type]
        # Rows stored before URLs were stored redacted may still hold a query string.
        rows = [dataclasses.asdict(d) | {"url": redacted_url(d.url)} for d in found]
        if attempts:
            for row in rows:
                row["attempt_log"] = [dataclasses.asdict(a) for a in await outbox.attempts(row["id"])]
        return rows

    rows = _with_outbox(database, work)
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        typer.echo("no webhook deliveries")
    for r in rows:
        last = r["last_status"] if r["last_status"] is not None else (r["last_error"] or "-")
        due = f"  next {_when(r['next_attempt_at'])}" if r["status"] == "pending" else ""
        typer.echo(
            for_terminal(
                f"{r['id']}  {r['status']}  {r['attempts']} attempt(s)  {r['type']}  {r['url']}  {r['webhook_id']}  "
                f"last {last}{due}"
            )
        )
        for a in r.get("attempt_log", []):
            attempt = f"    #{a['attempt']} {_when(a['at'])}  {a['status'] or a['error']}  {a['duration']:.3f} s"
            typer.echo(for_terminal(attempt))


@webhooks_app.command("redeliver")
@reports_errors
def webhooks_redeliver(
    delivery_id: Annotated[int, typer.Argument(help="The delivery's id (from `askback webhooks deliveries`).")],
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Send a delivered or failed delivery again: pending now, with the same webhook-id, its schedule anew."""
    from askback.clock import SystemClock

    async def work(outbox: Outbox) -> str:
        return await outbox.redeliver(delivery_id, now=SystemClock().now())

    found = _with_outbox(database, work)
    if found == "unknown":
        raise UsageError(f"there is no webhook delivery {delivery_id} (see `askback webhooks deliveries`)")
    if found == "pending":
        raise UsageError(f"the webhook delivery {delivery_id} is pending already: it is sent when it falls due")
    typer.echo(f"{delivery_id}: pending (an instance running the webhooks sends it)")


@webhooks_app.command("test")
@reports_errors
def webhooks_test(
    endpoint_id: Annotated[
        str, typer.Argument(metavar="ENDPOINT", help="The endpoint's key (see `askback webhooks list`) or its URL.")
    ],
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Send the endpoint one signed `webhook.test` message now and say what it answered (exit 1 unless 2xx)."""
    import anyio

    from askback.webhooks import send_test

    endpoint = next((e for e in _endpoints() if endpoint_id in (e.key, e.url)), None)
    if endpoint is None:
        raise UsageError(
            f"no endpoint of ASKBACK_WEBHOOKS has the key or URL {redacted_url(endpoint_id)!r} (see `askback "
            "webhooks list`)"
        )
    result = anyio.run(send_test, endpoint)
    if as_json:
        typer.echo(json.dumps(dataclasses.asdict(result) | {"delivered": result.delivered}, indent=2))
    else:
        answer = f"HTTP {result.status}" if result.status is not None else f"no answer ({result.error})"
        typer.echo(for_terminal(f"{endpoint.shown_url}: {answer}, webhook-id {result.webhook_id}"))
    if not result.delivered:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add the `webhooks` group to `app`."""
    app.add_typer(webhooks_app, name="webhooks")
