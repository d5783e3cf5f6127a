"""`askback lint`: point at the code a server must change to move from pushed elicitation to MCP 2026-07-28.

This module only parses options, reads files through `askback.tools.lint.lint_paths` and prints; the rules live in
`askback.tools.lint`. `register(app)` adds the command to a Typer app: the `askback` command, or one a test builds.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from askback.cli.output import UsageError, reports_errors
from askback.tools.lint import lint_paths, parse_codes, render_json, render_text

__all__ = ["register"]

_FORMATS = ("text", "json")


def _codes(value: str | None, option: str) -> set[str] | None:
    if value is None:
        return None
    try:
        return parse_codes(value)
    except ValueError as exc:
        raise UsageError(f"{option}: {exc}") from None


def register(app: typer.Typer) -> None:
    """Add `lint` to `app`."""

    @app.command("lint")
    @reports_errors
    def lint(
        paths: Annotated[
            list[Path],
            typer.Argument(
                metavar="PATH",
                help="Files or directories to check (directories: every *.py, recursively).",
                show_default=False,
            ),
        ],
        select: Annotated[
            str | None, typer.Option(help="Only these rules: codes or prefixes, comma-separated (e.g. ABK101,ABK105).")
        ] = None,
        ignore: Annotated[
            str | None, typer.Option(help="Skip these rules: codes or prefixes, comma-separated.")
        ] = None,
        output_format: Annotated[
            str, typer.Option("--format", help="text (for people) or json (for machines).")
        ] = "text",
    ) -> None:
        """Find code written for pushed elicitation (MCP 2025-11-25) that must change for MCP 2026-07-28.

        \b
        ABK101 pushed elicitation (ctx.elicit, session.elicit_form, ...)
        ABK102 notifications/elicitation/complete
        ABK103 elicitationId
        ABK104 error -32042, URL elicitation required
        ABK105 a write before the first question (it reruns every round)
        ABK106 a secret in requestState
        ABK107 a secret asked in a form
        ABK100 a file that could not be parsed

        Silence a line with `# noqa` or `# noqa: ABK105`. Exit status: 0 nothing found, 1 findings, 2 usage error.
        Each rule and its fix: docs/lint.md.
        """
        if output_format not in _FORMATS:
            raise UsageError(f"--format is text or json, not {output_format!r}")
        chosen = _codes(select, "--select")
        dropped = _codes(ignore, "--ignore")
        missing = [str(p) for p in paths if not p.exists()]
        if missing:
            raise UsageError(
                f"{', '.join(missing)}: no such file or directory. Pass files or directories of Python code."
            )
        findings = lint_paths(paths, select=chosen, ignore=dropped)
        if output_format == "json":
            typer.echo(render_json(findings))
        else:
            typer.echo(render_text(findings), nl=False)
        raise typer.Exit(1 if findings else 0)
