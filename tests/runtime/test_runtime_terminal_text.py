"""Text from a server never drives the terminal (`askback.core.terminal_text.for_terminal`, the one function it goes
through): every command that prints a server's words (`askback call`'s prompt and result, `inbox list`, `inbox show`,
`inbox answer`'s prompt, `inbox resume`'s result, an error quoting the server) runs in a real pseudo-terminal against
the hostile server (`tests/fixtures/hostile_server.py`), which puts every attack of `hostile_text.ATTACKS` (OSC 52,
OSC 8, `ESC[2J`, OSC 0, DCS, a `\\r` overwrite, backspaces, U+202E, U+2066, U+200B, a BOM, rich markup) in a
question's message, a field's title and description, a choice's label, an input key, its own `serverInfo` name, an
error and the tool's result. None of those bytes reaches the terminal as it is, and the person sees each escape.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_runtime_terminal import Terminal
from tests.fixtures.hostile_server import serving_hostile
from tests.fixtures.hostile_text import ATTACKS, EVERY_ATTACK, RAW_SEQUENCES

from askback.core.terminal_text import for_terminal, shorten
from askback.testing import free_port

pytestmark = pytest.mark.http


@pytest.mark.parametrize("name", list(ATTACKS))
def test_each_attack_is_written_as_its_escapes(name: str) -> None:
    raw, visible = ATTACKS[name]

    shown = for_terminal(raw)

    assert visible in shown
    assert not any(s.decode() in shown for s in RAW_SEQUENCES)


def test_line_breaks_are_kept_only_where_asked_and_a_carriage_return_never() -> None:
    assert for_terminal("one\ntwo\r\nthree\rfour", lines=True) == "one\ntwo\nthree\\rfour"
    assert for_terminal("one\ntwo\tthree") == "one\\ntwo\\tthree"


def test_ordinary_text_in_any_script_is_left_as_it_is() -> None:
    text = "Déployer en production ? 本番環境 · русский · עברית · العربية · 👍 · a\u00a0b"
    assert for_terminal(text) == text


def test_a_long_text_is_shortened_on_one_line_before_it_is_escaped() -> None:
    assert shorten("a\nb", 10) == "a b"
    assert shorten("x" * 50, 10) == "x" * 9 + "…"
    assert len(for_terminal(shorten("\x1b" * 1000, 10))) == 9 * 4 + 1


def test_a_key_is_shortened_with_its_line_breaks_kept_so_they_show_as_escapes() -> None:
    assert shorten("crlf\r\nSet-Cookie: x=1", 60, one_line=False) == "crlf\r\nSet-Cookie: x=1"
    assert for_terminal(shorten("a\r\nb", 40, one_line=False)) == "a\\r\\nb"
    assert shorten("a\nb" * 20, 10, one_line=False) == "a\nba\nba\nb…"


# In a real terminal -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving_hostile(free_port(), env={"HOSTILE_SERVER_NAME": EVERY_ATTACK}) as url:
        yield url


def askback_quietly(*args: str) -> subprocess.CompletedProcess[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", *args], capture_output=True, env=env, stdin=subprocess.DEVNULL, timeout=120
    )


def park(url: str, tool: str, database: str) -> str:
    parked = askback_quietly("call", url, tool, "--park", "--database", database, "--user", "ada")
    assert parked.returncode == 0, parked.stderr
    return parked.stdout.decode().strip()


def pick_the_first_and_send(term: Terminal) -> None:
    """Answer the `escapes` tool's question at its prompt: choice 1, then send; the server's result follows."""
    term.expect("Pick ")
    term.expect(": ")
    term.type("1")
    term.expect("[s]end")
    term.type("s")
    term.expect("answers: pick=accept")


def assert_nothing_raw(term: Terminal) -> None:
    """No byte of an attack reached the terminal as it was sent."""
    for sequence in RAW_SEQUENCES:
        assert sequence.decode() not in term.raw, (sequence, term.shown[-3000:])


def assert_shown(term: Terminal, *names: str) -> None:
    """The escapes of these attacks are on the screen (line wrapping aside)."""
    flat = term.shown.replace("\n", "")
    for name in names:
        assert ATTACKS[name][1] in flat, (name, term.shown[-3000:])


def test_askback_call_shows_every_attack_made_visible_in_its_prompt_and_its_result(
    hostile: str, tmp_path: Path
) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with Terminal("call", hostile, "escapes", "--database", database, "--user", "ada") as term:
        term.expect("1. A ")
        pick_the_first_and_send(term)
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    # The message, the title, the description, the choice's label and the server's name, then the result: each
    # carries every attack.
    assert_shown(term, *ATTACKS)
    assert term.shown.count("[bold red]Trust me[/]") >= 5  # markup shown as text, never interpreted
    assert "Result \\x1b]52;c;" in term.shown


def test_inbox_list_show_answer_and_resume_show_every_attack_made_visible(hostile: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    call_id = park(hostile, "escapes", database)
    in_key = park(hostile, "escapes_in_key", database)

    with Terminal("inbox", "list", "--database", database) as term:
        term.expect(in_key)
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, "osc52", "rlo")  # the key, the message's start and the server's name

    with Terminal("inbox", "show", call_id, "--database", database) as term:
        term.expect("[waiting]")
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, *ATTACKS)  # the whole message, and the server's whole name

    with Terminal("inbox", "show", in_key, "--database", database) as term:
        term.expect("[waiting]")
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, "osc52", "rlo")

    with Terminal("inbox", "answer", call_id, "--database", database, "--resume") as term:
        pick_the_first_and_send(term)
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, *ATTACKS)

    with Terminal("inbox", "resume", call_id, "--database", database) as term:
        term.expect("Result")
        assert term.finish() == 0, term.shown
    assert_nothing_raw(term)
    assert_shown(term, *ATTACKS)


def test_an_error_quoting_the_server_shows_every_attack_made_visible(hostile: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with Terminal("call", hostile, "escapes_in_error", "--database", database) as term:
        term.expect("error: the server refused round 1")
        assert term.finish() == 5, term.shown
    assert_nothing_raw(term)
    assert_shown(term, "osc52", "osc8", "clear", "title", "dcs", "rlo", "isolate", "zwsp", "bom", "markup")
