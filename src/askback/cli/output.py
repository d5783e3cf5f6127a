"""How the `askback` commands report a failure: one `error: ...` line on stderr and an exit status.

This is the command line's one error boundary. A command raises an `AskbackError` (or a `UsageError` for an option
it cannot take) and `reports_errors`, which wraps every command (serve, audit, demo, lint, check, ...), prints it
and exits with the error's `exit_code`. So an error looks the same everywhere: red on a terminal, plain in a pipe,
and always one line, never wrapped at the terminal's width, so that a log collector or a `2>err.txt` keeps it whole.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from askback.errors import AskbackError

__all__ = ["UsageError", "one_line", "print_error", "reports_errors"]

_P = ParamSpec("_P")
_R = TypeVar("_R")


class UsageError(AskbackError):
    """An option or argument the command cannot take (a port out of range, an unknown format, ...): exit status 2."""


def one_line(message: str) -> str:
    """`message` with its line breaks replaced by spaces."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def print_error(message: str) -> None:
    """Print `error: MESSAGE` on stderr, on one line."""
    # soft_wrap: rich would otherwise break the line at the console width (80 columns in a pipe).
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print(f"[bold red]error:[/] {escape(one_line(message))}")


def reports_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Wrap a command so that an `AskbackError` it raises is printed by `print_error` and ends the command with the
    error's `exit_code`, never with a traceback. Every `askback` command is registered through this."""

    @functools.wraps(command)  # Typer reads the options and the help from the wrapped function
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except AskbackError as exc:
            print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None

    return run
