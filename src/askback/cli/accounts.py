"""`askback accounts list|show|revoke|refresh` and `askback connections list`: connected accounts from the command
line. Listings never show a credential; `--json` prints one JSON document."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import UsageError, reports_errors
from askback.core.terminal_text import for_terminal

if TYPE_CHECKING:
    from askback.accounts.repository import Account, Accounts
    from askback.accounts.tokens import TokenKeeper

__all__ = ["register"]

accounts_app = typer.Typer(
    help="Connected accounts (never their credentials).", no_args_is_help=True, rich_markup_mode=None
)
connections_app = typer.Typer(help="The configured connections.", no_args_is_help=True, rich_markup_mode=None)

_DATABASE = typer.Option("--database", help=DATABASE_HELP)
_JSON = typer.Option("--json", help="Print JSON.")


def _when(at: float | None) -> str:
    return "-" if at is None else dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _as_dict(account: Account) -> dict[str, Any]:
    fields = dataclasses.asdict(account)
    fields["status"] = account.status.value
    return fields


def _with_accounts(database: str | None, work: Any) -> Any:
    """Open the store (every component's schema must be current) and run `work(accounts, keeper_factory)`."""
    from askback.accounts.repository import Accounts
    from askback.cli.db import run_with_database
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import Store

    settings = load_settings()
    url = database or settings.database_url

    async def run() -> Any:
        store = await Store.open(url, components=all_components())
        try:
            accounts = Accounts(store.database)

            def keeper() -> TokenKeeper:
                return _keeper(accounts, settings)

            return await work(accounts, keeper)
        finally:
            await store.close()

    return run_with_database(url, run)


def _keeper(accounts: Accounts, settings: Any) -> TokenKeeper:
    from askback.accounts.connections import load_connections
    from askback.accounts.tokens import TokenKeeper
    from askback.accounts.vault import Vault
    from askback.clock import SystemClock

    if not settings.connections_file:
        raise UsageError("set ASKBACK_CONNECTIONS_FILE to the connections file, to reach the providers")
    return TokenKeeper(
        accounts,
        Vault.from_settings(settings),
        load_connections(settings.connections_file),
        clock=SystemClock(),
        leeway=settings.refresh_leeway,
    )


@accounts_app.command("list")
@reports_errors
def accounts_list(
    principal: Annotated[str | None, typer.Option("--principal", help="Only this user's accounts.")] = None,
    connection: Annotated[str | None, typer.Option("--connection", help="Only this connection's.")] = None,
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """List connected accounts: id, user, connection, label, status, reason, token expiry."""

    async def work(accounts: Accounts, _: Any) -> list[Account]:
        return await accounts.listing(principal=principal, connection=connection)

    found: list[Account] = _with_accounts(database, work)
    if as_json:
        typer.echo(json.dumps([_as_dict(a) for a in found], indent=2))
        return
    if not found:
        typer.echo("no connected accounts")
        return
    for a in found:
        label = f" [{a.label}]" if a.label else ""
        reason = f"  ({a.reason})" if a.reason else ""
        typer.echo(
            for_terminal(
                f"{a.id}  {a.principal}  {a.connection}{label}  {a.status.value}  expires {_when(a.expires_at)}{reason}"
            )
        )


@accounts_app.command("show")
@reports_errors
def accounts_show(
    account_id: Annotated[str, typer.Argument(help="The account id (from `askback accounts list`).")],
    database: Annotated[str | None, _DATABASE] = None,
    as_json: Annotated[bool, _JSON] = False,
) -> None:
    """Show one account and its lifecycle events."""

    async def work(accounts: Accounts, _: Any) -> tuple[Account | None, list[dict[str, Any]]]:
        return await accounts.get(account_id), await accounts.history(account_id)

    account, history = _with_accounts(database, work)
    if account is None:
        raise UsageError(f"there is no connected account {account_id!r} (see `askback accounts list`)")
    if as_json:
        typer.echo(json.dumps({**_as_dict(account), "events": history}, indent=2))
        return
    label = f" [{account.label}]" if account.label else ""
    typer.echo(for_terminal(f"{account.id}: {account.principal}'s {account.connection} account{label}"))
    reason = f" ({account.reason})" if account.reason else ""
    typer.echo(for_terminal(f"status {account.status.value}{reason}; token expires {_when(account.expires_at)}"))
    for ev in history:
        before = ev["before"] or "-"
        detail = f"  {ev['detail']}" if ev["detail"] else ""
        typer.echo(for_terminal(f"  {_when(ev['at'])}  {ev['event']}: {before} -> {ev['after']}{detail}"))


def _act(account_id: str, database: str | None, verb: str) -> Account:
    async def work(accounts: Accounts, keeper_factory: Any) -> Account:
        account = await accounts.get(account_id)
        if account is None:
            raise UsageError(f"there is no connected account {account_id!r} (see `askback accounts list`)")
        keeper = keeper_factory()
        try:
            if verb == "revoke":
                await keeper.revoke(account)
            else:
                await keeper.refresh(account, force=True)
        finally:
            await keeper.aclose()
        after = await accounts.get(account_id)
        assert after is not None
        return after

    result: Account = _with_accounts(database, work)
    return result


@accounts_app.command("revoke")
@reports_errors
def accounts_revoke(
    account_id: Annotated[str, typer.Argument(help="The account id.")],
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Revoke the grant at the provider (where it can be), delete the credential, mark the account REVOKED."""
    after = _act(account_id, database, "revoke")
    typer.echo(f"{after.id}: {after.status.value}")


@accounts_app.command("refresh")
@reports_errors
def accounts_refresh(
    account_id: Annotated[str, typer.Argument(help="The account id.")],
    database: Annotated[str | None, _DATABASE] = None,
) -> None:
    """Refresh the account's token now; the status says how it went."""
    after = _act(account_id, database, "refresh")
    typer.echo(f"{after.id}: {after.status.value}{f' ({after.reason})' if after.reason else ''}")


@connections_app.command("list")
@reports_errors
def connections_list(as_json: Annotated[bool, _JSON] = False) -> None:
    """List the connections in ASKBACK_CONNECTIONS_FILE (never a secret)."""
    from askback.accounts.connections import ApiKeyConnection, load_connections
    from askback.settings import load_settings

    path = load_settings().connections_file
    if not path:
        raise UsageError("set ASKBACK_CONNECTIONS_FILE to the connections file")
    rows: list[dict[str, Any]] = []
    for c in load_connections(path):
        if isinstance(c, ApiKeyConnection):
            rows.append({"name": c.name, "kind": "api_key", "label": c.label, "origins": list(c.origins)})
        else:
            rows.append(
                {
                    "name": c.name,
                    "kind": "oauth",
                    "authorize_url": c.authorize_url,
                    "issuer": c.issuer,
                    "scopes": list(c.scopes),
                    "revocation": c.revocation_url is not None,
                    "origins": list(c.origins),
                }
            )
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        where = r.get("authorize_url") or r.get("issuer") or r.get("label")
        typer.echo(for_terminal(f"{r['name']}  {r['kind']}  {where}"))


def register(app: typer.Typer) -> None:
    """Add the `accounts` and `connections` groups to `app`."""
    app.add_typer(accounts_app, name="accounts")
    app.add_typer(connections_app, name="connections")
