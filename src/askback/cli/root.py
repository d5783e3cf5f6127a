"""The `askback` command: the one Typer app, every command group registered on it, and `main()`.

Each command group lives in a module of its own and adds itself with `register(app)`; every command is wrapped by
`askback.cli.output.reports_errors`, the one place where an error is printed and its exit status chosen. The
modules import the server stack (SQLAlchemy, Starlette, uvicorn, the SDK) only inside the commands that need it,
so `askback lint --help` starts fast.
"""

from __future__ import annotations

import os
from importlib import metadata

import typer

from askback.cli import accounts, approvals, audit, check, db, demo, inbox, keys, lint, serve, tasks, vault, webhooks

__all__ = ["app", "main"]

# Plain help (click's formatter): typer's rich panels show every flag as taking a value (`--json <bool>`) and
# cram long help into narrow columns.
app = typer.Typer(
    help="askback: MCP tools that ask the human, on every instance.", no_args_is_help=True, rich_markup_mode=None
)


def _print_version(asked: bool) -> None:
    if asked:
        typer.echo(f"askback {package_version()}")
        raise typer.Exit(0)


def package_version() -> str:
    """The installed askback's version (its distribution's metadata); `unknown` when it runs from a source tree that
    was never installed."""
    try:
        return metadata.version("askback")
    except metadata.PackageNotFoundError:
        return "unknown"


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Print a crash's traceback too (as ASKBACK_DEBUG=1)."),
    version: bool = typer.Option(
        False, "--version", help="Print askback's version and exit.", callback=_print_version, is_eager=True
    ),
) -> None:
    if debug:
        # The setting, for whatever reads it in this process (the error boundary, the settings object).
        os.environ["ASKBACK_DEBUG"] = "1"


# `askback --help` lists the commands in the order they are added here, then the groups (keys, db).
serve.register(app)
keys.register(app)
db.register(app)
audit.register(app)
demo.register(app)
lint.register(app)
check.register(app)
vault.register(app)
accounts.register(app)
inbox.register(app)
webhooks.register(app)
tasks.register(app)
approvals.register(app)


def main() -> None:
    """The console entry point (`askback = "askback.cli:main"`), and `python -m askback`."""
    app()
