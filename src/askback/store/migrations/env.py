"""Alembic's entry point for askback's migrations, run only from inside `Store.upgrade`.

`Store` owns the async engine, opens a transaction and hands its synchronous face to Alembic through
`config.attributes["connection"]` (the `AsyncConnection.run_sync` pattern), so the migration commits or rolls
back with that transaction and no second engine or `alembic.ini` is involved. Run the migrations with
`askback db upgrade`, not with the `alembic` command.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from askback.store._models import VERSION_TABLE, Base


def run_migrations(connection: Connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, version_table=VERSION_TABLE)
    with context.begin_transaction():
        context.run_migrations()


_connection = context.config.attributes.get("connection")
if not isinstance(_connection, Connection):
    raise RuntimeError(
        "askback's migrations need a live connection in config.attributes['connection']; "
        "run them with `askback db upgrade` (askback.store.Store.upgrade) rather than the alembic command."
    )
run_migrations(_connection)
