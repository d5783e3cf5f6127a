"""The demo's approval: `drop_database(name)` drops one of the demo's databases only once someone in the group `sre`,
other than the caller, has approved this exact call on the approvals' pages.

The demo server has it only when it knows where people reach it and the development sign-in's secret
(`ASKBACK_DEMO_PUBLIC_URL`, `ASKBACK_DEMO_SIGN_IN_SECRET`, which `askback demo` sets): `approvals_from_env` makes the
approvals' extension from them (`demo_approvals`: the pages at `/approvals`, with the development sign-in, in which
bob and erin are in `sre`), and `add_drop_database` adds the tool and `list_databases`, beside the demo's seeded
databases. The sign-in's secret is the connected accounts' one, so one sign-in serves both sets of pages.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import sqlalchemy as sa
from mcp.server.mcpserver.exceptions import ToolError

from askback import Approval, Askback, Flow, current_principal
from askback.accounts.pages import DevelopmentSignIn
from askback.approvals.setup import ApprovalsSetup
from askback.demo.mail import PUBLIC_URL_ENV, SIGN_IN_SECRET_ENV
from askback.errors import ConfigurationError
from askback.store import Store

__all__ = ["DROP", "GROUPS", "PAGES_PREFIX", "SEED", "add_drop_database", "approvals_from_env", "demo_approvals"]

PAGES_PREFIX = "/approvals"

DROP = Approval(key="drop_database", title="Drop a database", groups=frozenset({"sre"}))
"""One person in `sre` approves; the requester never counts, even when they are in `sre` themselves."""

GROUPS: Mapping[str, tuple[str, ...]] = {"bob": ("sre",), "erin": ("sre",)}
"""Who is in which group at the development sign-in: bob (who deploys) and erin are the demo's on-call."""

SEED = ("billing-legacy", "web-frontend")
"""The demo's databases, one per seeded project."""

_meta = sa.MetaData()
databases = sa.Table("demo_databases", _meta, sa.Column("name", sa.String(200), primary_key=True))
drops = sa.Table(
    "demo_drops",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("by", sa.String(200)),
    sa.Column("approved_by", sa.String(400), nullable=False),
)

_EXISTS = sa.select(sa.func.count()).select_from(databases).where(databases.c.name == sa.bindparam("name"))
_DATABASES = sa.select(databases.c.name).order_by(databases.c.name)
_DROPS = sa.select(drops.c.name, drops.c.by, drops.c.approved_by).order_by(drops.c.id)
_DROP = databases.delete().where(databases.c.name == sa.bindparam("name"))
_ADD_DROP = drops.insert()


def demo_approvals(public_url: str, sign_in_secret: str) -> ApprovalsSetup:
    """The approvals' extension of the demo server reached at `public_url` (loopback: the development sign-in serves
    nowhere else), its pages at `/approvals` with the development sign-in keyed by `sign_in_secret`."""
    sign_in = DevelopmentSignIn(sign_in_secret, groups=GROUPS)
    return ApprovalsSetup(sign_in=sign_in, base_url=public_url, prefix=PAGES_PREFIX)


def approvals_from_env(environ: Mapping[str, str] | None = None) -> ApprovalsSetup | None:
    """The demo server's approvals from the environment `askback demo` gives it; `None` without a public URL and a
    sign-in secret (the demo server then has no `drop_database`)."""
    env = os.environ if environ is None else environ
    public_url, secret = env.get(PUBLIC_URL_ENV, "").strip(), env.get(SIGN_IN_SECRET_ENV, "").strip()
    if not public_url or not secret:
        return None
    if len(secret) < 16:
        raise ConfigurationError(f"{SIGN_IN_SECRET_ENV} needs at least 16 characters (secrets.token_urlsafe(32))")
    return demo_approvals(public_url.rstrip("/"), secret)


def add_drop_database(app: Askback) -> None:
    """`drop_database` and `list_databases` on `app`, made with `demo_approvals(...)` among its extensions."""

    @app.on_start
    async def create_and_seed(store: Store) -> None:
        async with store.database.exclusive() as conn:
            await conn.run_sync(lambda sync: _meta.create_all(sync, checkfirst=True))
            for name in SEED:
                exists = await conn.scalar(_EXISTS, {"name": name})
                dropped = await conn.scalar(sa.select(sa.func.count()).where(drops.c.name == name))
                if not exists and not dropped:
                    await conn.execute(databases.insert().values(name=name))

    @app.tool()
    async def drop_database(name: str, flow: Flow) -> str:
        """Drop one of the demo's databases, once someone in sre other than the caller has approved this exact call."""
        store = await app.store()
        found = await store.database.read(
            lambda conn: conn.execute(_EXISTS, {"name": name}).scalar(), doing="read a database"
        )
        if not found:
            raise ToolError(f"there is no database {name!r}; see list_databases")
        approved = await flow.approve(DROP, summary=f"Drop the database {name} and everything in it")
        row = {"name": name, "by": current_principal(), "approved_by": ", ".join(approved.approvers)}

        def drop(conn: Any) -> str:
            conn.execute(_DROP, {"name": name})
            conn.execute(_ADD_DROP, row)
            return name

        async def once() -> str:
            return await store.database.transaction(drop, doing="drop a database")

        await flow.once("drop", once)
        return f"Dropped the database {name}, approved by {row['approved_by']}."

    @app.tool()
    async def list_databases() -> dict[str, Any]:
        """The demo's databases, and every drop: who asked for it and who approved it."""
        store = await app.store()

        def read(conn: Any) -> tuple[list[Any], list[Any]]:
            return conn.execute(_DATABASES).all(), conn.execute(_DROPS).all()

        names, dropped = await store.database.read(read, doing="list databases")
        return {
            "databases": [r.name for r in names],
            "drops": [{"name": r.name, "by": r.by, "approved_by": r.approved_by} for r in dropped],
        }
