"""`askback demo`: the demo server with several workers, and a walk through a deletion, a production deploy and a
tool that needs the caller's mail account at a development OAuth provider."""

from __future__ import annotations

from typing import Annotated

import typer

from askback.cli.output import UsageError, reports_errors

__all__ = ["register"]


@reports_errors
def demo(
    interactive: Annotated[bool, typer.Option("--interactive", help="Ask the person at this terminal.")] = False,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes for the demo server.")] = 3,
    port: Annotated[
        int,
        typer.Option(
            help="The demo server's port on 127.0.0.1; Demo Mail listens on the next one and the webhook receiver on "
            "the one after, and the demo opens no other. 0 picks free ones."
        ),
    ] = 0,
    database: Annotated[
        str,
        typer.Option(
            "--database",
            help="SQLite database for the demo. The demo creates it, marked as the demo's (a table askback_demo), "
            "and replaces it on the next run; an existing file without that mark is refused, never deleted.",
        ),
    ] = "sqlite:///askback-demo.db",
) -> None:
    """Start the demo server with several workers and walk through a deletion, a production deploy, a tool that
    needs your mail account at Demo Mail, a development OAuth provider the demo starts on loopback, and a database
    drop that someone else in sre must approve first."""
    from askback.demo.run import run_demo

    if not 0 <= port <= 65533:
        raise UsageError(
            f"--port is a TCP port, 1 to 65533 (the demo opens it and the next two), or 0 for free ones, not {port}"
        )
    try:
        code = run_demo(interactive=interactive, workers=workers, port=port, database=database)
    except KeyboardInterrupt:
        # The demo server and its workers are stopped by now (demo_run.serving).
        typer.echo("\ninterrupted: the demo server and its workers are stopped", err=True)
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add `demo` to `app`."""
    app.command("demo")(demo)
