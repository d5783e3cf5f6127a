"""How the `askback` commands report a failure: one `error: ...` line on stderr and an exit status.

Every command (serve, audit, demo, lint, check, ...) fails through `fail`, so an error looks the same everywhere:
red on a terminal, plain in a pipe, and always one line, never wrapped at the terminal's width, so that a log
collector or a `2>err.txt` keeps it whole.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

__all__ = ["fail", "one_line"]


def one_line(message: str) -> str:
    """`message` with its line breaks replaced by spaces."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: MESSAGE` on stderr and return the `typer.Exit` to raise (`raise fail(...) from None`)."""
    # soft_wrap: rich would otherwise break the line at the console width (80 columns in a pipe).
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print(f"[bold red]error:[/] {escape(one_line(message))}")
    return typer.Exit(code)
