"""The terminal prompt (`askback.runtime.terminal`): forms field by field, a review before sending (none for a
yes/no question, which its one keystroke sends), :d and :c at any prompt, URL questions shown with their full host
and never opened.

The first tests drive `TerminalRenderer` with scripted lines and a console writing to a string. The last ones run
`askback call` and `askback inbox answer --resume` in a real pseudo-terminal (its controlling terminal, so Ctrl-C
is a real SIGINT) against `askback serve askback.demo:server --workers 3` on loopback.
"""

from __future__ import annotations

import codecs
import contextlib
import fcntl
import io
import os
import re
import secrets
import select
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from rich.console import Console

from _http import Served, served
from askback.errors import UnansweredError
from askback.runtime import Interactive, ParkedQuestion, Runtime, declared_modes
from askback.runtime.terminal import TerminalRenderer

REVIEW = "[s]end, [e]dit, [d]ecline, [c]ancel: "

PARCEL: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "description": "As written on the door.", "minLength": 2},
        "copies": {"type": "integer", "title": "Copies", "minimum": 1, "maximum": 10, "default": 1},
        "weight": {"type": "number", "title": "Weight (kg)"},
        "express": {"type": "boolean", "title": "Express delivery", "default": False},
        "region": {
            "type": "string",
            "title": "Region",
            "oneOf": [{"const": "eu", "title": "Europe"}, {"const": "us", "title": "United States"}],
        },
        "extras": {"type": "array", "title": "Extras", "items": {"enum": ["gift-wrap", "insurance", "tracking"]}},
    },
    "required": ["name", "region"],
}


class Script:
    """The person at the terminal: answers each prompt with the next scripted line, and writes the prompt and the
    line into the console's output, as a terminal would echo them, so the output reads like the screen."""

    def __init__(self, console: Console, lines: tuple[str, ...], *, eof: bool) -> None:
        self.console = console
        self.lines = list(lines)
        self.eof = eof
        self.prompts: list[str] = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if not self.lines:
            if self.eof:
                raise EOFError
            raise AssertionError(f"asked {prompt!r} after the script ended; the screen shows:\n{self.screen}")
        line = self.lines.pop(0)
        self.console.file.write(f"{prompt}{line}\n")
        return line

    @property
    def screen(self) -> str:
        file = self.console.file
        assert isinstance(file, io.StringIO)
        return file.getvalue()


def terminal(*lines: str, eof: bool = False, development: bool = False) -> tuple[TerminalRenderer, Script]:
    console = Console(file=io.StringIO(), width=120)
    script = Script(console, lines, eof=eof)
    return TerminalRenderer(console=console, read_line=script, development=development), script


def form(schema: Mapping[str, Any], message: str = "Where should the parcel go?") -> ParkedQuestion:
    return ParkedQuestion("call_t1", 1, "parcel", "elicitation/create", "form", message, schema=schema)


def link(url: str) -> ParkedQuestion:
    return ParkedQuestion("call_t1", 2, "connect.mail", "elicitation/create", "url", "Connect your mailbox.", url=url)


pytestmark = pytest.mark.anyio


# Forms ---------------------------------------------------------------------------------------------------------


async def test_each_field_is_asked_by_its_type_and_the_answer_carries_typed_values() -> None:
    renderer, script = terminal("Ada", "3", "2.5", "y", "2", "1, tracking", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.action == "accept"
    assert answer.content == {
        "name": "Ada",
        "copies": 3,
        "weight": 2.5,
        "express": True,
        "region": "us",
        "extras": ["gift-wrap", "tracking"],
    }
    assert script.prompts == [
        "Name: ",
        "Copies [1]: ",
        "Weight (kg): ",
        "Express delivery (y/n) [n]: ",
        "Region: ",
        "Extras (numbers or values, comma-separated): ",
        REVIEW,
    ]


async def test_each_field_shows_its_title_required_marker_hint_description_and_numbered_choices() -> None:
    renderer, script = terminal("Ada", "", "", "", "1", "", "s")

    await renderer.ask(form(PARCEL))

    screen = script.screen
    assert "Name (required)  string, 2-… chars\n  As written on the door.\n" in screen
    assert "Copies  integer, 1 to 10\n" in screen
    assert "Region (required)  one of: eu, us\n  1. Europe (eu)\n  2. United States (us)\n" in screen
    assert "Extras  any of: gift-wrap, insurance, tracking\n  1. gift-wrap\n  2. insurance\n  3. tracking\n" in screen
    assert "\x1b" not in screen  # no colour when the console is not a terminal


@pytest.mark.parametrize("typed", ["1", "eu", "Europe", "europe"])
async def test_a_choice_is_taken_by_its_number_its_value_or_its_title(typed: str) -> None:
    renderer, _ = terminal("Ada", "", "", "", typed, "", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.content is not None and answer.content["region"] == "eu"


async def test_enter_takes_the_default_in_brackets_and_leaves_an_optional_field_empty() -> None:
    renderer, _ = terminal("Ada", "", "", "", "2", "", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.content == {"name": "Ada", "copies": 1, "express": False, "region": "us"}


async def test_an_invalid_value_is_explained_and_asked_again() -> None:
    renderer, script = terminal("A", "Ada", "0", "three", "3", "heavy", "", "maybe", "n", "mars", "2", "4", "", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.content == {"name": "Ada", "copies": 3, "express": False, "region": "us"}
    screen = script.screen
    assert "Name: must be at least 2 characters" in screen
    assert "Copies: must be at least 1" in screen
    assert "Copies: 'three' is not an integer" in screen
    assert "Weight (kg): 'heavy' is not a number" in screen
    assert "Express delivery: answer yes or no" in screen
    assert "Region: 'mars' is not a choice: type a number from 1 to 2 or one of eu, us" in screen
    assert "Extras: '4' is not a choice: type a number from 1 to 3" in screen
    assert script.prompts.count("Copies [1]: ") == 3


async def test_a_required_field_left_empty_is_asked_again() -> None:
    renderer, script = terminal("", "Ada", "", "", "", "", "1", "", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.content is not None and answer.content["name"] == "Ada"
    assert "Name: a value is required (type :d to decline, :c to cancel)." in script.screen
    assert script.prompts[:2] == ["Name: ", "Name: "]


@pytest.mark.parametrize(("typed", "action"), [(":d", "decline"), (":c", "cancel")])
@pytest.mark.parametrize("after", [0, 4], ids=["first field", "a later field"])
async def test_colon_d_declines_and_colon_c_cancels_at_any_field(typed: str, action: str, after: int) -> None:
    renderer, script = terminal(*["Ada", "", "", ""][:after], typed)

    answer = await renderer.ask(form(PARCEL))

    assert answer.action == action and answer.content is None
    assert ("Declined." if action == "decline" else "Cancelled.") in script.screen


@pytest.mark.parametrize(("typed", "action"), [("d", "decline"), ("c", "cancel"), (":d", "decline"), (":c", "cancel")])
async def test_the_review_offers_decline_and_cancel(typed: str, action: str) -> None:
    renderer, _ = terminal("Ada", "", "", "", "1", "", typed)

    answer = await renderer.ask(form(PARCEL))

    assert answer.action == action and answer.content is None


async def test_the_hint_is_shown_once_at_the_top_and_the_panel_names_the_call_and_key() -> None:
    renderer, script = terminal("Ada", "", "", "", "1", "", "e", "", "", "", "", "", "", "s")

    await renderer.ask(form(PARCEL))

    screen = script.screen
    assert "call call_t1 · round 1 · parcel" in screen.splitlines()[0]
    assert "│ Where should the parcel go?" in screen.splitlines()[1]
    assert screen.count("type :d to decline, :c to cancel\n") == 1


async def test_the_review_shows_a_table_and_edit_asks_again_with_the_current_values_as_defaults() -> None:
    renderer, script = terminal("Ada", "3", "", "y", "2", "3", "e", "", "5", "", "", "", "", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.content == {
        "name": "Ada",
        "copies": 5,
        "express": True,
        "region": "us",
        "extras": ["tracking"],
    }
    assert script.prompts[7:13] == [
        "Name [Ada]: ",
        "Copies [3]: ",
        "Weight (kg): ",
        "Express delivery (y/n) [y]: ",
        "Region [us]: ",
        "Extras (numbers or values, comma-separated) [tracking]: ",
    ]
    first_review = script.screen.split(REVIEW)[0]
    rows = [re.sub(r"\s+", " ", line.strip("│ ")) for line in first_review.splitlines() if line.startswith("│")]
    assert rows[-6:] == [
        "Name │ Ada",
        "Copies │ 3",
        "Weight (kg) │ -",
        "Express delivery │ yes",
        "Region │ United States (us)",
        "Extras │ tracking",
    ]


async def test_an_answer_that_fails_the_form_check_is_shown_and_the_form_is_asked_again() -> None:
    # A server's default outside its own choices: Enter takes it, the check before sending refuses it.
    schema = {"type": "object", "properties": {"size": {"type": "string", "enum": ["S", "M"], "default": "XL"}}}
    renderer, script = terminal("", "s", "2", "s")

    answer = await renderer.ask(form(schema))

    assert answer.content == {"size": "M"}
    assert "the answer does not fit the form: size: must be one of S, M; the form is asked again." in script.screen
    assert script.prompts == ["size [XL]: ", REVIEW, "size [XL]: ", REVIEW]


async def test_an_unknown_review_choice_is_asked_again() -> None:
    renderer, script = terminal("Ada", "", "", "", "1", "", "send it", "s")

    answer = await renderer.ask(form(PARCEL))

    assert answer.action == "accept"
    assert "Type s, e, d or c." in script.screen


async def test_the_end_of_input_leaves_the_question_unanswered() -> None:
    renderer, script = terminal("Ada", eof=True)

    with pytest.raises(UnansweredError):
        await renderer.ask(form(PARCEL))

    assert "(end of input: the question is left unanswered)" in script.screen
    assert "Cancelled." not in script.screen


async def test_server_text_is_shown_as_text_never_as_markup_or_terminal_controls() -> None:
    message = "[bold red]Trust me[/] \x1b[2J\u202eevil"
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "[link=https://x.example]OK[/]"}}}
    renderer, script = terminal("y")

    await renderer.ask(form(schema, message))

    assert "[bold red]Trust me[/] \\x1b[2J\\u202eevil" in script.screen
    assert "[link=https://x.example]OK[/] (y/n): " in script.prompts
    assert "\x1b" not in script.screen and "\u202e" not in script.screen


# A yes/no question --------------------------------------------------------------------------------------------------

YES_OR_NO: Mapping[str, Any] = {
    "type": "object",
    "properties": {"confirm": {"type": "boolean", "title": "Confirm"}},
    "required": ["confirm"],
}


@pytest.mark.parametrize(("typed", "value"), [("y", True), ("n", False), ("yes", True), ("No", False)])
async def test_a_yes_or_no_question_is_answered_by_its_one_keystroke_with_no_review(typed: str, value: bool) -> None:
    renderer, script = terminal(typed)

    answer = await renderer.ask(form(YES_OR_NO, "Delete the project?"))

    assert answer.action == "accept" and answer.content == {"confirm": value}
    assert script.prompts == ["Confirm (y/n): "]
    assert "Your answer" not in script.screen


async def test_enter_taking_a_yes_or_no_default_goes_to_the_review_so_a_stray_enter_sends_nothing() -> None:
    schema = {"type": "object", "properties": {"confirm": {"type": "boolean", "title": "Confirm", "default": True}}}
    renderer, script = terminal("", "s")

    answer = await renderer.ask(form(schema))

    assert answer.content == {"confirm": True}
    assert script.prompts == ["Confirm (y/n) [y]: ", REVIEW]


async def test_a_yes_or_no_question_still_takes_colon_d_and_an_invalid_reply_is_asked_again() -> None:
    renderer, script = terminal("maybe", ":d")

    answer = await renderer.ask(form(YES_OR_NO))

    assert answer.action == "decline"
    assert script.prompts == ["Confirm (y/n): ", "Confirm (y/n): "]
    assert "Confirm: answer yes or no" in script.screen


@pytest.mark.parametrize(
    "schema",
    [
        pytest.param({"type": "object", "properties": {"confirm": {"type": "string", "title": "Confirm"}}}, id="typed"),
        pytest.param(
            {
                "type": "object",
                "properties": {"ok": {"type": "boolean", "title": "OK"}, "why": {"type": "string", "title": "Why"}},
            },
            id="two fields",
        ),
    ],
)
async def test_a_typed_confirmation_and_a_form_of_several_fields_keep_their_review(schema: Mapping[str, Any]) -> None:
    renderer, script = terminal("y", "", "s") if len(schema["properties"]) > 1 else terminal("y", "s")

    answer = await renderer.ask(form(schema))

    assert answer.action == "accept"
    assert script.prompts[-1] == REVIEW


# URL questions ----------------------------------------------------------------------------------------------------


async def test_a_url_question_shows_the_full_host_and_the_link_as_plain_text_and_accepts_when_finished() -> None:
    url = "https://accounts.mail.example.com/connect?flow=" + "x" * 150
    renderer, script = terminal("a")

    answer = await renderer.ask(link(url))

    assert answer.action == "accept" and answer.content is None
    lines = script.screen.splitlines()
    assert "This link goes to: accounts.mail.example.com" in lines
    assert url in lines  # one line, whole, to copy: not wrapped at the console's width
    assert script.prompts == ["[a] I have finished, [d]ecline, [c]ancel: "]


@pytest.mark.parametrize(("typed", "action"), [("d", "decline"), ("c", "cancel"), (":d", "decline"), (":c", "cancel")])
async def test_a_url_question_can_be_declined_or_cancelled(typed: str, action: str) -> None:
    renderer, _ = terminal(typed)

    answer = await renderer.ask(link("https://accounts.mail.example.com/connect"))

    assert answer.action == action


async def test_a_plain_http_link_to_another_host_is_refused_and_only_decline_or_cancel_is_offered() -> None:
    url = "http://accounts.mail.example.com/connect"
    renderer, script = terminal("a", "d", development=True)

    answer = await renderer.ask(link(url))

    assert answer.action == "decline"
    assert "the link to accounts.mail.example.com uses http: only https links are shown" in script.screen
    assert "This question can only be declined or cancelled here." in script.screen
    assert "Type d or c." in script.screen
    assert url not in script.screen and "This link goes to" not in script.screen
    assert script.prompts == ["[d]ecline, [c]ancel: ", "[d]ecline, [c]ancel: "]


@pytest.mark.parametrize(("development", "shown"), [(True, True), (False, False)])
async def test_a_loopback_http_link_is_shown_in_development_mode_only(development: bool, shown: bool) -> None:
    renderer, script = terminal("a" if shown else "c", development=development)

    answer = await renderer.ask(link("http://127.0.0.1:8765/connect"))

    assert answer.action == ("accept" if shown else "cancel")
    assert ("This link goes to: 127.0.0.1" in script.screen) is shown


async def test_a_link_whose_host_has_an_invisible_character_is_refused() -> None:
    renderer, script = terminal("c")

    await renderer.ask(link("https://bücher.example\u200b.com/connect"))

    assert "invisible or direction-changing character (U+200B)" in script.screen
    assert "This link goes to" not in script.screen and "\u200b" not in script.screen


async def test_an_internationalised_host_is_also_shown_in_its_ascii_form() -> None:
    renderer, script = terminal("c")

    await renderer.ask(link("https://bücher.example/connect"))

    assert "This link goes to: bücher.example (xn--bcher-kva.example)" in script.screen


# Other questions and the renderer itself --------------------------------------------------------------------------


async def test_a_question_no_person_can_answer_is_cancelled_with_a_note() -> None:
    renderer, script = terminal()
    question = ParkedQuestion("call_t1", 1, "summary", "sampling/createMessage", None, "Summarize this.")

    answer = await renderer.ask(question)

    assert answer.action == "cancel"
    assert "This question (sampling/createMessage) cannot be answered at the terminal: it is cancelled." in (
        script.screen
    )
    assert script.prompts == []


async def test_it_is_an_interactive_renderer_declaring_the_modes_it_is_given() -> None:
    forms_only = TerminalRenderer(modes=frozenset({"form"}))

    assert isinstance(forms_only, Interactive)
    assert declared_modes([forms_only]) == {"form"}
    assert declared_modes([TerminalRenderer()]) == {"form", "url"}


async def test_the_event_loop_goes_on_while_the_person_types() -> None:
    reading, typed = threading.Event(), threading.Event()
    console = Console(file=io.StringIO(), width=120)
    lines = iter(["y"])

    def read_line(prompt: str) -> str:
        reading.set()
        # Set by the event loop below: if reading blocked the loop, this would never be set.
        assert typed.wait(timeout=30), "the event loop was blocked while a line was read"
        return next(lines)

    renderer = TerminalRenderer(console=console, read_line=read_line)
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            answers = []

            async def person() -> None:
                answers.append(await renderer.ask(form(schema)))

            tg.start_soon(person)
            await anyio.to_thread.run_sync(reading.wait)
            typed.set()
    assert answers[0].content == {"ok": True}


# At a real terminal -------------------------------------------------------------------------------------------------

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
# Started in a session of its own (start_new_session), the command makes the pty its controlling terminal, as a
# login shell would, then becomes the command: Ctrl-C typed there is a SIGINT to it.
_CONTROLLING = (
    "import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); os.execv(sys.executable, sys.argv[1:])"
)


class Terminal:
    """A command in a real pseudo-terminal, 120 columns wide: `expect` what it shows (colours removed), `type` a
    line as a person would, `interrupt` with Ctrl-C."""

    def __init__(self, *args: str) -> None:
        self.fd, follower = os.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        # The pseudo-terminal's size rules: COLUMNS and LINES (set by pytest-xdist's workers, say) would override it.
        dropped = ("NO_COLOR", "COLUMNS", "LINES")
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_") and k not in dropped}
        env["TERM"] = "xterm-256color"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _CONTROLLING, sys.executable, "-m", "askback", *args],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            start_new_session=True,
        )
        os.close(follower)
        self.raw = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._cursor = 0
        self._open = True

    @property
    def shown(self) -> str:
        return _ANSI.sub("", self.raw).replace("\r", "")

    def _read(self, deadline: float) -> None:
        ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"the terminal showed nothing more in time; it shows:\n{self.shown[-4000:]}")
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: every process has left the terminal
            chunk = b""
        self.raw += self._decoder.decode(chunk, final=not chunk)
        self._open = bool(chunk)

    def expect(self, text: str, timeout: float = 60) -> None:
        """Wait until `text` is shown after what the previous `expect` found."""
        deadline = time.monotonic() + timeout
        while (found := self.shown.find(text, self._cursor)) < 0:
            if not self._open:
                raise AssertionError(f"the command ended before showing {text!r}; it shows:\n{self.shown[-4000:]}")
            self._read(deadline)
        self._cursor = found + len(text)

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")  # Enter, as a terminal sends it

    def interrupt(self) -> None:
        os.write(self.fd, b"\x03")

    def finish(self, timeout: float = 60) -> int:
        """Read until the command has left the terminal; its exit status."""
        deadline = time.monotonic() + timeout
        while self._open:
            self._read(deadline)
        return self.proc.wait(timeout=max(deadline - time.monotonic(), 1))

    def __enter__(self) -> Terminal:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:  # a failed test: end what it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.fd)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path = tmp_path_factory.mktemp("terminal-demo") / "server.db"
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=3) as server:
        yield server


def answer_deploy_to_production(term: Terminal) -> None:
    """The demo's deploy, answered as a person would: production, sent at its review, then yes, which one keystroke
    sends (a yes/no question has nothing to review)."""
    term.expect("Which environment should I deploy to?")
    term.expect("3. production")
    term.expect("Environment: ")
    term.type("3")
    term.expect("│ Environment │ production │")
    term.expect(REVIEW)
    term.type("s")
    term.expect("Deploy to production? This affects every user.")
    term.expect("Yes, deploy to production (y/n): ")
    term.type("y")


async def pending_keys(database_url: str, principal: str) -> list[str]:
    async with await Runtime.open(database_url) as runtime:
        return [q.key for q in await runtime.pending(principal=principal)]


async def call_status(database_url: str, call_id: str) -> str:
    async with await Runtime.open(database_url) as runtime:
        return (await runtime.calls.get(call_id)).status


@pytest.mark.http
def test_askback_call_asks_each_round_at_the_terminal_and_prints_the_result(demo: Served, tmp_path: Path) -> None:
    agent = f"sqlite:///{tmp_path / 'agent.db'}"
    args = ("call", demo.url, "deploy", "--args", '{"service": "web"}', "--database", agent, "--user", "ada")
    with Terminal(*args) as term:
        answer_deploy_to_production(term)
        term.expect("Deployed web to production.")
        assert term.finish() == 0, term.shown
    # The demo's deploy runs as a task (the runtime declares the extension): its questions come in rounds 2 and 4,
    # under the server's task keys.
    assert (
        "call call_" in term.shown and "round 2 · pick_env.1" in term.shown and "round 4 · confirm_prod.2" in term.shown
    )
    assert "\x1b[" in term.raw  # colour, on a terminal


# Parks the call in one process (as an agent would, with only the web inbox to show questions), then exits.
PARK = """
import sys

import anyio

from askback.runtime import Parked, Runtime, WebInbox


async def main(database: str, server: str) -> None:
    async with await Runtime.open(database, renderers=[WebInbox()]) as runtime:
        outcome = await runtime.call_tool(server, "deploy", {"service": "web"}, principal="ada")
    assert isinstance(outcome, Parked), outcome
    print(outcome.call_id)


anyio.run(main, sys.argv[1], sys.argv[2])
"""


@pytest.mark.http
def test_a_call_parked_in_one_process_is_answered_at_the_terminal_in_another_and_resumed(
    demo: Served, tmp_path: Path
) -> None:
    agent = f"sqlite:///{tmp_path / 'agent.db'}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    parked = subprocess.run(
        [sys.executable, "-c", PARK, agent, demo.url], capture_output=True, text=True, env=env, timeout=120
    )
    assert parked.returncode == 0, parked.stderr
    call_id = parked.stdout.strip()
    assert anyio.run(pending_keys, agent, "ada") == ["pick_env.1"]

    with Terminal("inbox", "answer", call_id, "--database", agent, "--resume") as term:
        term.expect(f"call {call_id} · round 2 · pick_env.1")
        answer_deploy_to_production(term)
        term.expect("Deployed web to production.")
        assert term.finish() == 0, term.shown
    assert anyio.run(call_status, agent, call_id) == "completed"
    assert anyio.run(pending_keys, agent, "ada") == []


@pytest.mark.http
def test_ctrl_c_at_a_prompt_ends_the_command_at_once_and_the_call_stays_parked(demo: Served, tmp_path: Path) -> None:
    agent = f"sqlite:///{tmp_path / 'agent.db'}"
    args = ("call", demo.url, "deploy", "--args", '{"service": "web"}', "--database", agent, "--user", "ada")
    with Terminal(*args) as term:
        term.expect("Environment: ")
        term.interrupt()
        # Not waiting for Enter: the line being read is abandoned with the call's task.
        assert term.finish(timeout=30) != 0, term.shown
    assert anyio.run(pending_keys, agent, "ada") == ["pick_env.1"]
