"""`askback db upgrade`, and `run_with_database`, which every command that opens the database (serve, audit, db)
runs its work through."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer

from askback.cli.options import DATABASE_HELP
from askback.cli.output import reports_errors
from askback.errors import ConfigurationError

__all__ = ["register", "run_with_database"]

_T = TypeVar("_T")

db_app = typer.Typer(
    help="The database behind flows, effects and the audit trail.", no_args_is_help=True, rich_markup_mode=None
)


def run_with_database(url: str, fn: Callable[[], Awaitable[_T]]) -> _T:
    """Run `fn`, which opens the database at `url`, in an event loop of its own; a database error the store did not
    already put in words becomes one `ConfigurationError` that says which database and what to do."""
    import anyio
    from sqlalchemy import exc as sa_exc
    from sqlalchemy.engine import make_url

    from askback.db.classify import first_line
    from askback.db.urls import normalize_database_url, safe_database_url

    try:
        return anyio.run(fn)
    except (sa_exc.DBAPIError, sqlite3.DatabaseError) as exc:
        reason = first_line(exc)
        safe = safe_database_url(make_url(normalize_database_url(url)))
        raise ConfigurationError(
            f"cannot use the database at {safe}: {reason}; point ASKBACK_DATABASE_URL at an askback database (run "
            "`askback db upgrade` on a new PostgreSQL one)"
        ) from exc


@db_app.command("upgrade")
@reports_errors
def db_upgrade(
    database: Annotated[str | None, typer.Option("--database", help=DATABASE_HELP)] = None,
) -> None:
    """Apply the database migrations of every askback component."""
    from askback.db.migrate import all_components
    from askback.settings import load_settings
    from askback.store import MIGRATIONS, Store

    url = database or load_settings().database_url

    async def run() -> dict[str, str | None]:
        store = await Store.open(url, migrate=False, check=False, components=all_components())
        try:
            await store.database.upgrade()
            return await store.database.revisions()
        finally:
            await store.close()

    revisions = run_with_database(url, run)
    typer.echo(f"database at revision {revisions.pop(MIGRATIONS.name)}")
    for component, revision in revisions.items():
        typer.echo(f"{component} at revision {revision}")


def register(app: typer.Typer) -> None:
    """Add the `db` group to `app`."""
    app.add_typer(db_app, name="db")
