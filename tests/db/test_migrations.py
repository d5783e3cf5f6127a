"""The migration runner keeps one schema history per component: the server kit's, and each product's beside it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import sqlalchemy as sa

from askback.accounts.schema import MIGRATIONS as ACCOUNTS
from askback.approvals.schema import MIGRATIONS as APPROVALS
from askback.db import migrate
from askback.errors import ConfigurationError
from askback.identity.schema import MIGRATIONS as IDENTITY
from askback.runtime.parked_calls import MIGRATIONS as RUNTIME
from askback.store import MIGRATIONS, Store
from askback.webhooks.schema import MIGRATIONS as WEBHOOKS
from infra import FIXTURES

pytestmark = pytest.mark.anyio

NOTES = migrate.Component("notes", FIXTURES / "migrations" / "notes", version_table="notes_alembic_version")
BOTH = (MIGRATIONS, NOTES)


@pytest.fixture
async def opened() -> AsyncIterator[list[Store]]:
    stores: list[Store] = []
    yield stores
    for store in stores:
        await store.close()


async def open_store(opened: list[Store], url: str, **options: object) -> Store:
    store = await Store.open(url, **options)  # type: ignore[arg-type]
    opened.append(store)
    return store


async def tables(store: Store) -> set[str]:
    async with store.database.engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))


async def set_revision(store: Store, component: migrate.Component, revision: str) -> None:
    async with store.database.engine.begin() as conn:
        await conn.execute(sa.text(f"UPDATE {component.version_table} SET version_num = :r"), {"r": revision})


async def test_one_upgrade_brings_every_component_to_its_own_head_each_in_its_own_version_table(
    any_database: str, opened: list[Store]
) -> None:
    store = await open_store(opened, any_database, migrate=True, components=BOTH)
    assert await store.database.revisions() == {"server": Store.head_revision(), "notes": "n002"}
    assert {"askback_effects", "askback_audit", "notes_items", "askback_alembic_version", "notes_alembic_version"} <= (
        await tables(store)
    )
    assert not await store.database.schema_behind()
    again = await open_store(opened, any_database, migrate=False, components=BOTH)  # checked, current
    assert await again.database.revisions() == await store.database.revisions()


async def test_a_product_added_to_an_existing_database_is_missing_until_upgraded_then_current(
    any_database: str, opened: list[Store]
) -> None:
    await open_store(opened, any_database, migrate=True)  # the server kit alone
    with pytest.raises(ConfigurationError, match="askback db upgrade"):
        await open_store(opened, any_database, migrate=False, components=BOTH)
    checking = await open_store(opened, any_database, migrate=False, check=False, components=BOTH)
    assert await checking.database.revisions() == {"server": Store.head_revision(), "notes": None}
    assert await checking.database.schema_behind()
    await checking.database.upgrade()
    assert await checking.database.revisions() == {"server": Store.head_revision(), "notes": "n002"}
    await open_store(opened, any_database, migrate=False, components=BOTH)


async def test_each_component_is_judged_against_its_own_history(any_database: str, opened: list[Store]) -> None:
    store = await open_store(opened, any_database, migrate=True, components=BOTH)
    await set_revision(store, NOTES, "n001")
    assert migrate.schema_status("n001", NOTES) == "behind"
    assert await store.database.schema_behind()
    with pytest.raises(ConfigurationError, match=r"'n001'.*needs 'n002'.*askback db upgrade"):
        await open_store(opened, any_database, migrate=False, components=BOTH)

    await set_revision(store, NOTES, "n999")  # a newer release upgraded the notes
    assert migrate.schema_status("n999", NOTES) == "ahead"
    assert not await store.database.schema_behind()  # a rolling update: the older release keeps working...
    with pytest.raises(ConfigurationError, match="newer askback"):  # ...but does not start on a schema it does not know
        await open_store(opened, any_database, migrate=False, components=BOTH)
    # The server kit's revision was never touched by any of this.
    assert (await store.database.revisions())["server"] == Store.head_revision()


def test_askback_db_upgrade_knows_every_component_askback_ships() -> None:
    assert migrate.all_components() == (MIGRATIONS, ACCOUNTS, RUNTIME, WEBHOOKS, IDENTITY, APPROVALS)
    assert len({c.version_table for c in migrate.all_components()}) == len(migrate.all_components())


@pytest.mark.parametrize("component", migrate.all_components(), ids=lambda c: c.name)
def test_each_component_declares_the_head_of_its_own_scripts(component: migrate.Component) -> None:
    # A process that opens a current database compares with the declared head and never loads Alembic; a migration
    # added without moving the declared head would leave every database one revision behind, unnoticed.
    assert component.head is not None
    assert migrate.head_revision(component) == migrate.scripts_head(component)


def test_a_component_without_a_declared_head_reads_it_from_its_scripts() -> None:
    assert NOTES.head is None
    assert migrate.head_revision(NOTES) == "n002"


def test_a_version_table_holding_two_revisions_is_refused_with_what_to_do() -> None:
    engine = sa.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE notes_alembic_version (version_num VARCHAR(32) NOT NULL)"))
        assert migrate.read_revision(conn, NOTES) is None
        conn.execute(sa.text("INSERT INTO notes_alembic_version VALUES ('n001')"))
        assert migrate.read_revision(conn, NOTES) == "n001"
        conn.execute(sa.text("INSERT INTO notes_alembic_version VALUES ('n002')"))
        with pytest.raises(ConfigurationError, match="holds 2 revisions"):
            migrate.read_revision(conn, NOTES)
    engine.dispose()
