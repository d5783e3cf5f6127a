"""The demo server: `askback serve askback.demo:server`.

Two tools that need a human: deleting a project (type its name to confirm) and deploying a service (pick an
environment; production asks for a second confirmation). Two read-only tools let anyone observe the effects. The
data lives in the same database as askback's own tables, seeded with `prj_99` = billing-legacy and
`prj_42` = web-frontend. Demo authentication is on: a bearer token `demo-<name>` is user `<name>`.

With `ASKBACK_DEMO_MAIL_ISSUER` set (as `askback demo` sets it), a fifth tool, `summarize_inbox`, reads the caller's
mailbox at Demo Mail, a development OAuth provider, through a connected account (`askback.demo.mail`); the hosted
pages it links to are mounted at `/accounts`. With `ASKBACK_DEMO_PUBLIC_URL` and `ASKBACK_DEMO_SIGN_IN_SECRET` set
(as `askback demo` sets them too), `drop_database` waits until someone in `sre` approves the exact call on the
approvals' pages at `/approvals` (`askback.demo.approving`), and `list_databases` shows what was dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import sqlalchemy as sa
from mcp.server.mcpserver.exceptions import ToolError

from askback import Argument, Askback, Choice, Confirm, Flow, Settings, current_principal, load_settings
from askback.approvals.setup import ApprovalsSetup
from askback.clock import Clock
from askback.demo.approving import add_drop_database, approvals_from_env
from askback.demo.mail import DemoMail, add_mail, mail_accounts, mail_from_env
from askback.extension import Extension, Mounted
from askback.store import Store

__all__ = ["build", "confirm_prod", "confirm_project", "pick_env", "server"]

SEED = {"prj_99": "billing-legacy", "prj_42": "web-frontend"}
ENVIRONMENTS = ("dev", "staging", "production")

_meta = sa.MetaData()
projects = sa.Table(
    "demo_projects",
    _meta,
    sa.Column("id", sa.String(64), primary_key=True),
    sa.Column("name", sa.String(200), nullable=False),
)
deletions = sa.Table(
    "demo_deletions",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("project_id", sa.String(64), nullable=False),
    sa.Column("name", sa.String(200), nullable=False),
    sa.Column("by", sa.String(200)),
)
deployments = sa.Table(
    "demo_deployments",
    _meta,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("service", sa.String(200), nullable=False),
    sa.Column("environment", sa.String(32), nullable=False),
    sa.Column("by", sa.String(200)),
)

# The demo's own statements, built once (the store's SQLite fast path compiles each statement object once) and run
# through `store.database.transaction` / `store.database.read`, as a tool's own data access should be.
_PROJECT_NAME = sa.select(projects.c.name).where(projects.c.id == sa.bindparam("id"))
_PROJECTS = sa.select(projects.c.id, projects.c.name).order_by(projects.c.id)
_DELETE_PROJECT = projects.delete().where(projects.c.id == sa.bindparam("id"))
_ADD_DELETION = deletions.insert()
_ADD_DEPLOYMENT = deployments.insert()
_DEPLOYMENTS = sa.select(deployments.c.service, deployments.c.environment, deployments.c.by).order_by(deployments.c.id)
_DELETIONS = sa.select(deletions.c.project_id, deletions.c.name, deletions.c.by).order_by(deletions.c.id)

confirm_project = Confirm(
    key="confirm_project",
    message="Confirm the project to delete.",
    field="project_name",
    title="Project name",
    typed=True,
    on_decline="Cancelled: you declined to delete the project.",
    on_cancel="Cancelled: the confirmation was dismissed; nothing was deleted.",
)
pick_env = Choice(
    key="pick_env",
    message="Which environment should I deploy to?",
    options=ENVIRONMENTS,
    field="environment",
    title="Environment",
    fallback=Argument("environment"),
    on_decline="Cancelled: no environment was chosen; nothing was deployed.",
    on_cancel="Cancelled: no environment was chosen; nothing was deployed.",
)
confirm_prod = Confirm(
    key="confirm_prod",
    message="Deploy to production? This affects every user.",
    field="confirm",
    title="Yes, deploy to production",
    on_decline="Cancelled: production deploy not confirmed.",
    on_cancel="Cancelled: production deploy not confirmed.",
)


def build(
    settings: Settings | None = None,
    clock: Clock | None = None,
    *,
    mail: DemoMail | None = None,
    approvals: ApprovalsSetup | None = None,
    mounts: Sequence[Mounted] = (),
) -> Askback:
    """A demo server; `settings` default to the environment's with demo authentication on. With `mail`, it also has
    `summarize_inbox` and the hosted pages of connected accounts; with `approvals` (`askback.demo.approving`),
    `drop_database`, `list_databases` and the approvals' pages; `mounts` are served beside them."""
    settings = settings or load_settings(demo_auth=True)
    extensions: list[Extension] = [mail_accounts(mail, settings)] if mail is not None else []
    if approvals is not None:
        extensions.append(approvals)
    app = Askback("askback-demo", settings=settings, clock=clock, extensions=extensions, mounts=mounts)

    @app.on_start
    async def create_and_seed(store: Store) -> None:
        async with store.database.exclusive() as conn:
            await conn.run_sync(lambda sync: _meta.create_all(sync, checkfirst=True))
            for project_id, name in SEED.items():
                exists = await conn.scalar(sa.select(sa.func.count()).where(projects.c.id == project_id))
                deleted = await conn.scalar(sa.select(sa.func.count()).where(deletions.c.project_id == project_id))
                if not exists and not deleted:
                    await conn.execute(projects.insert().values(id=project_id, name=name))

    @app.tool(asks=[confirm_project])
    async def delete_project(project_id: str, flow: Flow) -> str:
        """Delete a project. The user confirms by typing the project's name."""
        store = await app.store()
        name = await store.database.read(
            lambda conn: conn.execute(_PROJECT_NAME, {"id": project_id}).scalar(), doing="read a project"
        )
        if name is None:
            raise ToolError(f"unknown project id {project_id!r}; see list_projects")
        if not flow.ask(confirm_project, message=f"Type the project name to delete {project_id}.", expect=name):
            return "Cancelled: name did not match."
        by = current_principal()

        def delete(conn: Any) -> str:
            conn.execute(_DELETE_PROJECT, {"id": project_id})
            conn.execute(_ADD_DELETION, {"project_id": project_id, "name": name, "by": by})
            return str(name)

        async def once() -> str:
            return await store.database.transaction(delete, doing="delete a project")

        deleted = await flow.once("delete", once)
        return f"Deleted {deleted}."

    @app.tool(asks=[pick_env, confirm_prod], task="optional")
    async def deploy(
        service: str, flow: Flow, environment: Literal["dev", "staging", "production"] | None = None
    ) -> str:
        """Deploy a service. Without `environment` the user picks one; production asks for confirmation."""
        env = environment or flow.ask(pick_env)
        if env == "production" and not flow.ask(confirm_prod):
            return "Cancelled: production deploy not confirmed."
        store = await app.store()
        row = {"service": service, "environment": env, "by": current_principal()}

        async def record() -> str:
            await store.database.transaction(
                lambda conn: conn.execute(_ADD_DEPLOYMENT, row), doing="record a deployment"
            )
            return str(env)

        done = await flow.once("deploy", record)
        return f"Deployed {service} to {done}."

    @app.tool()
    async def list_projects() -> dict[str, Any]:
        """The projects that exist."""
        store = await app.store()
        rows = await store.database.read(lambda conn: conn.execute(_PROJECTS).all(), doing="list projects")
        return {"projects": [{"id": r.id, "name": r.name} for r in rows]}

    @app.tool()
    async def list_deployments() -> dict[str, Any]:
        """Every deployment recorded, oldest first, and every deletion."""
        store = await app.store()

        def read(conn: Any) -> tuple[list[Any], list[Any]]:
            return conn.execute(_DEPLOYMENTS).all(), conn.execute(_DELETIONS).all()

        deps, dels = await store.database.read(read, doing="list deployments")
        return {
            "deployments": [{"service": r.service, "environment": r.environment, "by": r.by} for r in deps],
            "deletions": [{"project_id": r.project_id, "name": r.name, "by": r.by} for r in dels],
        }

    if mail is not None:
        add_mail(app, mail)
    if approvals is not None:
        add_drop_database(app)
    return app


server = build(mail=mail_from_env(), approvals=approvals_from_env())
