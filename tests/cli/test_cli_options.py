"""The options several `askback` commands share mean the same thing everywhere: the same flag, the same help, on
every command where it applies. The command tree is walked as click builds it, so a command added later is held
to the same words."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer

from askback.cli import app
from askback.cli.options import DATABASE_HELP

# Each shared option, with the one help every command gives it.
SHARED_HELP = {
    "--database": DATABASE_HELP,
    "--args": "The tool's arguments, a JSON object.",
}
# A command whose option of that name means something of its own, and why.
OWN_MEANING = {
    ("demo", "--database"): "the demo's own SQLite file, made fresh and replaced on every run",
}
# Every command that opens the app's database takes `--database` (beside ASKBACK_DATABASE_URL).
OPENS_THE_DATABASE = {
    "serve",
    "audit",
    "audit verify",
    "db upgrade",
    "vault rotate",
    "accounts list",
    "tasks list",
    "approvals list",
    "webhooks deliveries",
    "call",
    "inbox list",
    "inbox serve",
}


def commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    """Every command and group under `command`, by its name as typed (`audit verify`); a group's own options are
    those of the group's callback (`askback audit --tool x`)."""
    if path:
        yield " ".join(path), command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def options() -> dict[str, dict[str, str]]:
    """flag -> {command -> help} for every option of every command."""
    found: dict[str, dict[str, str]] = {}
    for name, command in commands(typer.main.get_command(app)):
        for param in command.params:
            if param.param_type_name != "option":
                continue
            for flag in param.opts:
                found.setdefault(flag, {})[name] = param.help or ""
    return found


def test_a_shared_option_has_the_same_help_on_every_command_that_takes_it() -> None:
    every = options()
    different = {
        (command, flag): help_
        for flag, canonical in SHARED_HELP.items()
        for command, help_ in every.get(flag, {}).items()
        if help_ != canonical and (command, flag) not in OWN_MEANING
    }
    assert different == {}


def test_every_command_that_opens_the_database_takes_database() -> None:
    taking = set(options()["--database"])
    assert OPENS_THE_DATABASE - taking == set()


def test_the_exceptions_still_name_commands_that_exist() -> None:
    every = options()
    assert all(command in every.get(flag, {}) for command, flag in OWN_MEANING)
