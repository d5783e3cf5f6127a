"""`askback call`: one tool call run to completion at the terminal, answering its questions at the terminal prompt
round after round (`--park` only sends the first round and leaves the call parked for `askback inbox`).

The call is kept in the runtime's store meanwhile, so the end of input or a Ctrl-C leaves it parked, never
cancelled. Exit statuses are the command line's one scheme (`askback.cli.output.ExitStatus`).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Annotated

import typer

from askback.cli._runtime import (
    AS_JSON,
    DATABASE,
    DEFAULT_TIMEOUT,
    TIMEOUT,
    TOKEN,
    TOKEN_SERVER,
    bearer,
    print_outcome,
    terminal_renderer,
    when,
    with_runtime,
)
from askback.cli.output import ExitStatus, UsageError, print_error

if TYPE_CHECKING:
    from askback.runtime import Runtime
    from askback.runtime.questions import Mode
    from askback.runtime.renderers import Renderer

__all__ = ["call"]

_MODES = ("form", "url")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd]?)")
_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def _modes(text: str) -> frozenset[Mode]:
    """`--modes form,url`: the modes the call declares (none: an empty value)."""
    words = [w.strip() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in _MODES]
    if unknown:
        raise UsageError(f"--modes takes form, url or both (form,url), not {', '.join(unknown)}")
    return frozenset(w for w in _MODES if w in words)  # type: ignore[misc]


def _duration(text: str) -> float:
    """`--deadline 90`, `90s`, `15m`, `2h` or `1d`: seconds."""
    found = _DURATION.fullmatch(text.strip())
    if found is None or float(found.group(1)) <= 0:
        raise UsageError(f"--deadline takes a duration such as 90s, 15m, 2h or 1d, not {text!r}")
    return float(found.group(1)) * _SECONDS[found.group(2)]


def call(
    server: Annotated[str, typer.Argument(help="The MCP server's URL.")],
    tool: Annotated[str, typer.Argument(help="The tool to call.")],
    arguments: Annotated[str, typer.Option("--args", help="The tool's arguments, a JSON object.")] = "{}",
    user: Annotated[str, typer.Option("--user", help="Who answers (recorded with each answer).")] = "me",
    token: Annotated[str | None, TOKEN] = None,
    token_server: Annotated[str | None, TOKEN_SERVER] = None,
    park: Annotated[
        bool,
        typer.Option("--park", help="Send the first round and leave the call parked: print its id and exit."),
    ] = False,
    modes: Annotated[
        str,
        typer.Option("--modes", help="The question modes to declare: form, url or form,url (empty: none)."),
    ] = "form,url",
    deadline: Annotated[
        str | None,
        typer.Option(
            "--deadline", help="How long each round waits for answers (90s, 15m, 2h, 1d; ASKBACK_ANSWER_WAIT)."
        ),
    ] = None,
    timeout: Annotated[float, TIMEOUT] = DEFAULT_TIMEOUT,
    database: Annotated[str | None, DATABASE] = None,
    as_json: Annotated[bool, AS_JSON] = False,
) -> None:
    """Call a tool and answer its questions at the terminal, round after round, until it completes. The call is
    kept in the runtime's store meanwhile: at the end of input, or at a Ctrl-C, it stays parked (never cancelled)
    and `askback inbox` has it. With --park, the first round is sent and the call left parked at once: its id is
    printed (exit status 0). Exit status 0 completed, 1 the tool reported an error, 3 parked, 130 interrupted."""
    from askback.runtime import Parked, WebInbox

    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as exc:
        raise UsageError(f"--args is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(args, dict):
        raise UsageError('--args must be a JSON object, e.g. {"service": "web"}')
    headers = bearer(token, token_server, one_server=True)
    declared = _modes(modes)
    given = {} if deadline is None else {"answer_wait": _duration(deadline)}
    terminal = None if park else terminal_renderer(declared)

    async def work(runtime: Runtime) -> int:
        outcome = await runtime.call_tool(server, tool, args, principal=user)
        if park and isinstance(outcome, Parked):
            if as_json:
                print_outcome(outcome, True)
            else:
                typer.echo(outcome.call_id)
                typer.echo(
                    f"parked on round {outcome.round}: answer with `askback inbox answer {outcome.call_id}` or in "
                    f"the web inbox, by {when(outcome.deadline)}",
                    err=True,
                )
            return ExitStatus.OK
        if isinstance(outcome, Parked) and not as_json:
            typer.echo(
                f"{outcome.call_id}: left parked, not cancelled (nothing more to read at the terminal)", err=True
            )
        return print_outcome(outcome, as_json)

    renderers: tuple[Renderer, ...] = (WebInbox(modes=declared),) if terminal is None else (terminal,)
    try:
        code = with_runtime(database, work, renderers=renderers, timeout=timeout, settings_given=given, headers=headers)
    except KeyboardInterrupt:
        asking = None if terminal is None else terminal.asking
        if asking is None:
            print_error(
                f"interrupted: a call that asked waits in the store; `askback inbox list --user {user}` shows it"
            )
        elif asking.call_id.startswith("mem_"):
            print_error("interrupted: the question a 2025-11-25 server pushed ends with its connection")
        else:
            print_error(
                f"interrupted: call {asking.call_id} is left parked on round {asking.round}, not cancelled; answer "
                f"it with `askback inbox answer {asking.call_id}` (`askback inbox list --user {user}` lists it)"
            )
        raise typer.Exit(ExitStatus.INTERRUPTED) from None
    if code:
        raise typer.Exit(code)
