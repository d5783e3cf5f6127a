"""A migration runner that keeps one Alembic history per component.

Each product that keeps tables (the server kit today; connected accounts and the agent runtime next) ships its
own history in its own folder, with its own version table, so that products are upgraded together but never
share a revision chain. `askback db upgrade` applies every component's history; a store opened by one product
checks only that product's components.

Alembic is imported only when its scripts are needed (an upgrade, a revision this release does not have at its head):
a process that opens a current database reads its revision with one query and compares it with the component's
declared `head`, which a test keeps equal to the head of its scripts.

A component's `env.py` is two lines: it hands its metadata to `run_env`, which runs the migrations on the
connection the runner passed in (`config.attributes["connection"]`), inside the runner's transaction and lock.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from sqlalchemy import Connection, MetaData, String, column, inspect, select, table

from askback.errors import ConfigurationError

if TYPE_CHECKING:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = [
    "Component",
    "SchemaStatus",
    "all_components",
    "head_revision",
    "read_revision",
    "run_env",
    "schema_status",
    "upgrade",
]

# The modules whose `MIGRATIONS` attribute is a component, in the order they are upgraded. A product that keeps
# tables adds its module here.
_PRODUCTS = (
    "askback.store",
    "askback.accounts.schema",
    "askback.runtime.parked_calls",
    "askback.webhooks.schema",
    "askback.identity.schema",
    "askback.approvals.schema",
)

SchemaStatus = Literal["current", "missing", "behind", "ahead"]


@dataclass(frozen=True)
class Component:
    """One product's schema history: where its Alembic scripts live and which table records its revision."""

    name: str
    scripts: Path
    version_table: str
    head: str | None = None
    """The revision at the head of `scripts`, when the component declares it (askback's own do); `None`: read from
    the scripts."""

    def config(self, connection: Connection | None = None) -> Config:
        from alembic.config import Config

        config = Config()
        # Config values go through configparser, which would read a '%' in the path as interpolation.
        config.set_main_option("script_location", str(self.scripts).replace("%", "%%"))
        config.attributes["version_table"] = self.version_table
        if connection is not None:
            config.attributes["connection"] = connection
        return config


def all_components() -> tuple[Component, ...]:
    """Every component askback knows, for `askback db upgrade`."""
    found: list[Component] = []
    for module in _PRODUCTS:
        component = import_module(module).MIGRATIONS
        assert isinstance(component, Component)
        found.append(component)
    return tuple(found)


@cache
def _scripts(component: Component) -> ScriptDirectory:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(component.config())


def head_revision(component: Component) -> str:
    """The revision this release of the component needs."""
    if component.head is not None:
        return component.head
    return scripts_head(component)


def scripts_head(component: Component) -> str:
    """The revision at the head of the component's scripts, read with Alembic."""
    head = _scripts(component).get_current_head()
    if head is None:
        raise RuntimeError(f"askback is installed without the {component.name} migrations (in {component.scripts})")
    return head


def read_revision(connection: Connection, component: Component) -> str | None:
    """The revision the database is at for `component`; `None` when its tables were never created."""
    if not inspect(connection).has_table(component.version_table):
        return None
    version = column("version_num", String)
    rows = connection.execute(select(version).select_from(table(component.version_table)))
    found: list[str] = list(rows.scalars().all())
    if len(found) > 1:
        raise ConfigurationError(
            f"the {component.name} schema's version table ({component.version_table}) holds {len(found)} revisions; "
            "askback keeps one: restore it from a backup or ask for help before upgrading"
        )
    return found[0] if found else None


def schema_status(current: str | None, component: Component) -> SchemaStatus:
    """Where a database at revision `current` stands against this release: 'current', 'missing' (never created),
    'behind' (an older revision of this history: upgrade), or 'ahead' (a revision this release does not know: a
    newer release upgraded it, during a rolling update)."""
    if current == head_revision(component):
        return "current"
    if current is None:
        return "missing"
    known = {script.revision for script in _scripts(component).walk_revisions()}
    return "behind" if current in known else "ahead"


def upgrade(connection: Connection, components: tuple[Component, ...]) -> None:
    """Bring each component to its head on `connection`, in the caller's transaction (which holds the lock)."""
    from alembic import command

    for component in components:
        command.upgrade(component.config(connection), "head")


def run_env(metadata: MetaData) -> None:
    """The body of a component's `env.py`: run its migrations on the runner's connection."""
    from alembic import context

    connection = context.config.attributes.get("connection")
    if not isinstance(connection, Connection):
        raise RuntimeError(
            "askback's migrations need a live connection in config.attributes['connection']; "
            "run them with `askback db upgrade` rather than the alembic command."
        )
    context.configure(
        connection=connection,
        target_metadata=metadata,
        version_table=context.config.attributes["version_table"],
    )
    with context.begin_transaction():
        context.run_migrations()
