"""Connected accounts keep their tables under their own migration history, beside the server kit's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from askback.accounts._models import Base
from askback.accounts.schema import MIGRATIONS as ACCOUNTS
from askback.db.migrate import all_components
from askback.store import MIGRATIONS, Store

pytestmark = pytest.mark.anyio


async def test_the_accounts_migration_creates_exactly_the_tables_its_models_describe(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'askback.db'}", migrate=True, components=all_components())
    try:

        def differences(connection: Connection) -> list[Any]:
            return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

        async with store.database.engine.connect() as conn:
            found = await conn.run_sync(differences)
        assert await store.database.revisions() == {
            "server": Store.head_revision(),
            "accounts": "a002",
            "runtime": "r004",
            "webhooks": "w001",
            "identity": "i002",
            "approvals": "p001",
        }
    finally:
        await store.close()
    ours = set(Base.metadata.tables)
    # The server kit's tables and the version tables belong to other histories.
    assert [d for d in found if not _elsewhere(d, ours)] == []
    assert ours == {"askback_accounts", "askback_account_links", "askback_account_events"}
    assert ACCOUNTS.version_table != MIGRATIONS.version_table


def _elsewhere(difference: Any, ours: set[str]) -> bool:
    """A table (or its index) that another history owns."""
    kind, item = difference[0], difference[1]
    if kind == "remove_table":
        return item.name not in ours
    if kind == "remove_index":
        return item.table.name not in ours
    return False
