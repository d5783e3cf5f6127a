"""`askback keys new`: a fresh state key for ASKBACK_STATE_KEYS."""

from __future__ import annotations

import secrets

import typer

from askback.cli.output import reports_errors

__all__ = ["register"]

keys_app = typer.Typer(help="State keys for sealing requestState.", no_args_is_help=True, rich_markup_mode=None)


@keys_app.command("new")
@reports_errors
def keys_new() -> None:
    """Print a new random state key (put it in ASKBACK_STATE_KEYS; the first key of the ring seals)."""
    typer.echo(secrets.token_urlsafe(48))


def register(app: typer.Typer) -> None:
    """Add the `keys` group to `app`."""
    app.add_typer(keys_app, name="keys")
