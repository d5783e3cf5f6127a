"""How the `askback` commands report a failure: one `error: ...` line on stderr and an exit status.

This is the command line's one error boundary. A command raises an `AskbackError` (or a `UsageError` for an option
it cannot take) and `reports_errors`, which wraps every command (serve, audit, demo, lint, check, ...), prints it
and exits with the error's `exit_code`. So an error looks the same everywhere: red on a terminal, plain in a pipe,
and always one line, never wrapped at the terminal's width, so that a log collector or a `2>err.txt` keeps it whole.
Its text goes through `for_terminal`, since it may quote what a server or a file said. Anything else a command
raises is a crash: one line too (its traceback only with `askback --debug` or ASKBACK_DEBUG=1), with its own status.

Exit statuses, the same for every command (`ExitStatus`): 0 done; 1 done, and the result is a failure (the tool
reported an error, lint found problems, a check failed); 2 a usage or configuration error (click's own, an option
the command cannot take, a setting); 3 the call waits (parked); 4 no such call; 5 a call could not go on (its
server unreachable, too slow or refusing it); 70 askback crashed; 130 interrupted (Ctrl-C).
"""

from __future__ import annotations

import functools
import traceback
from collections.abc import Callable
from enum import IntEnum
from typing import ParamSpec, TypeVar

import typer
import typer.exceptions
from rich.console import Console
from rich.markup import escape

from askback.core.terminal_text import for_terminal
from askback.errors import AskbackError

__all__ = ["ExitStatus", "UsageError", "one_line", "print_error", "reports_errors"]


class ExitStatus(IntEnum):
    """Every `askback` command's exit status."""

    OK = 0
    FAILED = 1  # the command did its work, and what it found is a failure (a tool error, lint findings, ...)
    USAGE = 2  # an option, argument or setting the command cannot take; AskbackError's default
    WAITING = 3  # the call is parked, waiting for answers (or being resumed by another process)
    UNKNOWN_CALL = 4  # UnknownCallError
    CALL_FAILED = 5  # CallError: the call could not go on
    CRASHED = 70  # an error askback did not expect (sysexits' EX_SOFTWARE)
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT, as a shell reports it)


_P = ParamSpec("_P")
_R = TypeVar("_R")


class UsageError(AskbackError):
    """An option or argument the command cannot take (a port out of range, an unknown format, ...): exit status 2."""


def one_line(message: str) -> str:
    """`message` with its line breaks replaced by spaces."""
    return " ".join(part.strip() for part in message.splitlines() if part.strip())


def print_error(message: str) -> None:
    """Print `error: MESSAGE` on stderr, on one line, with what could drive the terminal made visible."""
    # soft_wrap: rich would otherwise break the line at the console width (80 columns in a pipe).
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    console.print(f"[bold red]error:[/] {escape(for_terminal(one_line(message)))}")


def _debug() -> bool:
    from askback.settings import load_settings

    try:
        return load_settings().debug
    except AskbackError:
        return False


def reports_errors(command: Callable[_P, _R]) -> Callable[_P, _R]:
    """Wrap a command so that an `AskbackError` it raises is printed by `print_error` and ends the command with the
    error's `exit_code`, never with a traceback; a Ctrl-C ends it with 130, and any other exception, a crash, with
    one line and 70 (the traceback too with `askback --debug` or ASKBACK_DEBUG=1). Every `askback` command is registered through this."""

    @functools.wraps(command)  # Typer reads the options and the help from the wrapped function
    def run(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return command(*args, **kwargs)
        except AskbackError as exc:
            print_error(str(exc))
            raise typer.Exit(exc.exit_code) from None
        except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
            raise  # Typer's own ways of ending a command, with their own statuses
        except KeyboardInterrupt:
            print_error("interrupted")
            raise typer.Exit(ExitStatus.INTERRUPTED) from None
        except Exception as exc:
            if _debug():
                traceback.print_exc()
            print_error(
                f"askback crashed: {type(exc).__name__}: {exc} (a bug in askback: please report it; run again with "
                "--debug, or ASKBACK_DEBUG=1, for the traceback)"
            )
            raise typer.Exit(ExitStatus.CRASHED) from None

    return run
