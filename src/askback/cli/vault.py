"""`askback vault new-key` and `askback vault rotate`: the connected accounts' vault and its key ring."""

from __future__ import annotations

from typing import Annotated

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import reports_errors

__all__ = ["register"]

vault_app = typer.Typer(
    help="The vault that holds connected accounts' credentials (ASKBACK_VAULT_KEYS).",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@vault_app.command("new-key")
@reports_errors
def vault_new_key() -> None:
    """Print a new vault key (<id>:<key>). Put it first in ASKBACK_VAULT_KEYS to seal with it."""
    from askback.accounts.vault import new_key

    typer.echo(new_key())


@vault_app.command("rotate")
@reports_errors
def vault_rotate(
    database: Annotated[str | None, typer.Option("--database", help=DATABASE_HELP)] = None,
) -> None:
    """Re-encrypt every stored credential with the first key of ASKBACK_VAULT_KEYS; the other keys can then be
    removed."""
    from askback.accounts.repository import Accounts
    from askback.accounts.vault import Vault
    from askback.cli.db import run_with_database
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import Store

    settings = load_settings()
    vault = Vault.from_settings(settings)  # a missing or malformed key ring fails here, before the database
    url = database or settings.database_url

    async def run() -> tuple[int, int]:
        store = await Store.open(url, components=all_components())
        try:
            return await Accounts(store.database).rotate(vault)
        finally:
            await store.close()

    rotated, total = run_with_database(url, run)
    typer.echo(f"re-encrypted {rotated} of {total} credential(s) with key {vault.sealing_key_id}")


def register(app: typer.Typer) -> None:
    """Add the `vault` group to `app`."""
    app.add_typer(vault_app, name="vault")
