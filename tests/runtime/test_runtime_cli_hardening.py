"""`askback call` and `askback inbox` as a new user meets them: `--park`, the end of input, `--modes`, `--deadline`,
`inbox answer --accept`, `inbox resume --due`, long text shortened in `inbox list`, errors on their own line, one
Ctrl-C that parks the call and ends the command at once, and one scheme of exit statuses (0 done, 1 the tool reported
an error, 2 a usage error, 3 the call waits, 4 no such call, 5 the call could not go on, 70 a crash, 130 interrupted).

Every command runs in a process of its own against a server in its own process: the hostile server
(`tests/fixtures/hostile_server.py`, whose `HOSTILE_LOG` shows what reached it) or the project's own
(`tests/fixtures/runtime_server.py`); the Ctrl-C tests type it in a real pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import typer
from test_runtime_terminal import Terminal
from tests.fixtures.hostile_server import serving_hostile
from typer.testing import CliRunner

from askback.cli.output import ExitStatus, reports_errors
from askback.errors import CallError, InvalidAnswerError, UnknownCallError
from askback.runtime import Runtime
from askback.testing import free_port, serving
from infra import ROOT

pytestmark = pytest.mark.http


@dataclass(frozen=True)
class Hostile:
    url: str
    log: Path

    def calls(self, tool: str) -> list[dict[str, Any]]:
        """What reached the server for `tool`, in order: one entry per `tools/call`."""
        if not self.log.exists():
            return []
        entries = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [e for e in entries if e["tool"] == tool]


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    log = tmp_path_factory.mktemp("hostile") / "calls.jsonl"
    with serving_hostile(free_port(), env={"HOSTILE_LOG": str(log)}) as url:
        yield Hostile(url, log)


@pytest.fixture(scope="module")
def own_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("own-server")
    env = {
        "ASKBACK_STATE_KEYS": "hardening-state-key-0123456789abcdefghijklmn",
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": "https://pages.example.com/finish?order=7",
    }
    with serving("tests.fixtures.runtime_server:server", port=free_port(), workers=1, env=env, cwd=str(ROOT)) as url:
        yield url


@pytest.fixture
def database(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'agent.db'}"


def askback(*args: str, stdin: int | None = subprocess.DEVNULL) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", *args], capture_output=True, text=True, env=env, stdin=stdin, timeout=120
    )


def park(url: str, tool: str, database: str, *more: str) -> str:
    parked = askback("call", url, tool, "--park", "--database", database, *more)
    assert parked.returncode == 0, parked.stderr
    return parked.stdout.strip()


async def _status(database: str, call_id: str) -> tuple[str, float | None, float]:
    async with await Runtime.open(database) as runtime:
        record = await runtime.calls.get(call_id)
    return record.status, record.deadline, record.created_at


def status(database: str, call_id: str) -> tuple[str, float | None, float]:
    return anyio.run(_status, database, call_id)


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# --park and the end of input ---------------------------------------------------------------------------------------


def test_park_sends_the_first_round_leaves_the_call_parked_and_prints_its_id(hostile: Hostile, database: str) -> None:
    before = len(hostile.calls("plain_form"))

    result = askback("call", hostile.url, "plain_form", "--park", "--database", database)

    assert result.returncode == ExitStatus.OK, result.stderr
    call_id = result.stdout.strip()
    assert call_id.startswith("call_") and "\n" not in call_id
    assert f"askback inbox answer {call_id}" in result.stderr
    assert status(database, call_id)[0] == "parked"
    sent = hostile.calls("plain_form")[before:]
    assert [entry["inputResponses"] for entry in sent] == [None]  # round one only, nothing answered


def test_the_end_of_input_parks_the_call_says_so_and_sends_no_cancel(hostile: Hostile, database: str) -> None:
    before = len(hostile.calls("plain_form"))

    result = askback("call", hostile.url, "plain_form", "--database", database, "--user", "ada")

    assert result.returncode == ExitStatus.WAITING, result.stderr
    assert "(end of input: the question is left unanswered)" in result.stderr
    assert "left parked, not cancelled" in result.stderr
    call_id = result.stdout.split(":", 1)[0]
    assert f"{call_id}: parked on round 1, waiting for ok" in result.stdout
    assert status(database, call_id)[0] == "parked"
    sent = hostile.calls("plain_form")[before:]
    assert [entry["inputResponses"] for entry in sent] == [None]  # no round two: no cancel reached the server


# --modes and --deadline ---------------------------------------------------------------------------------------------


def test_modes_declares_only_the_modes_given(own_server: str, database: str) -> None:
    refused = askback("call", own_server, "open_page", "--modes", "form", "--database", database)
    assert refused.returncode == ExitStatus.CALL_FAILED
    assert "needs a client capability this runtime does not declare" in one_error_line(refused)

    parked = askback("call", own_server, "open_page", "--modes", "form,url", "--park", "--database", database)
    assert parked.returncode == ExitStatus.OK, parked.stderr

    bad = askback("call", own_server, "open_page", "--modes", "form,voice", "--database", database)
    assert bad.returncode == ExitStatus.USAGE and "--modes takes form, url or both" in one_error_line(bad)


@pytest.mark.parametrize(("given", "seconds"), [("2h", 7200.0), ("90", 90.0), ("15m", 900.0), ("1d", 86400.0)])
def test_deadline_sets_how_long_the_round_waits(hostile: Hostile, database: str, given: str, seconds: float) -> None:
    call_id = park(hostile.url, "plain_form", database, "--deadline", given)

    parked, deadline, created = status(database, call_id)

    assert parked == "parked" and deadline == pytest.approx(created + seconds)


def test_a_deadline_that_is_not_a_duration_is_a_usage_error(hostile: Hostile, database: str) -> None:
    result = askback("call", hostile.url, "plain_form", "--deadline", "soon", "--database", database)
    assert result.returncode == ExitStatus.USAGE
    assert "--deadline takes a duration" in one_error_line(result)


# inbox answer --accept, inbox resume --due -------------------------------------------------------------------------


def test_accept_answers_a_url_question_and_only_a_url_question(hostile: Hostile, database: str) -> None:
    link = park(hostile.url, "link_idna", database)
    form = park(hostile.url, "plain_form", database)

    on_a_form = askback("inbox", "answer", form, "ok", "--accept", "--database", database)
    assert on_a_form.returncode == ExitStatus.USAGE
    assert "--accept answers a URL question" in one_error_line(on_a_form)
    both = askback("inbox", "answer", link, "--accept", "--json", "{}", "--database", database)
    assert both.returncode == ExitStatus.USAGE and "not both" in one_error_line(both)

    accepted = askback("inbox", "answer", link, "connect", "--accept", "--resume", "--database", database)
    assert accepted.returncode == ExitStatus.OK, accepted.stderr
    assert accepted.stdout.strip() == "answers: connect=accept"


def test_resume_without_a_call_id_needs_due(hostile: Hostile, database: str) -> None:
    call_id = park(hostile.url, "plain_form", database)
    answered = askback("inbox", "decline", call_id, "--database", database)
    assert answered.returncode == ExitStatus.OK, answered.stderr

    bare = askback("inbox", "resume", "--database", database)
    assert bare.returncode == ExitStatus.USAGE and "--due" in one_error_line(bare)
    assert status(database, call_id)[0] == "parked"  # nothing was resumed

    due = askback("inbox", "resume", "--due", "--database", database)
    assert due.returncode == ExitStatus.OK, due.stderr
    assert due.stdout.strip() == "answers: ok=decline\ndone"
    assert status(database, call_id)[0] == "completed"


# Exit statuses -----------------------------------------------------------------------------------------------------


def test_a_tool_error_exits_1(hostile: Hostile, database: str) -> None:
    call_id = park(hostile.url, "tool_error", database)

    result = askback("inbox", "answer", call_id, "--json", "{}", "--resume", "--database", database)

    assert result.returncode == ExitStatus.FAILED
    assert "it broke" in result.stdout


def test_a_server_that_cannot_be_reached_exits_5_on_one_line(database: str) -> None:
    result = askback("call", "http://127.0.0.1:1/mcp", "anything", "--database", database)

    assert result.returncode == ExitStatus.CALL_FAILED
    assert "could not reach the MCP server at http://127.0.0.1:1/mcp" in one_error_line(result)


@pytest.mark.parametrize(
    "args",
    [["call", "http://127.0.0.1:1/mcp", "t", "--args", "[1]"], ["call", "http://127.0.0.1:1/mcp"], ["inbox", "nope"]],
    ids=["arguments not an object", "missing argument", "unknown command"],
)
def test_usage_errors_exit_2(database: str, args: list[str]) -> None:
    assert askback(*args).returncode == ExitStatus.USAGE


def test_the_exit_statuses_are_the_ones_the_errors_carry() -> None:
    assert CallError.exit_code == ExitStatus.CALL_FAILED
    assert UnknownCallError.exit_code == ExitStatus.UNKNOWN_CALL
    assert InvalidAnswerError.exit_code == ExitStatus.USAGE


def _crashing_app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    @reports_errors
    def crash() -> None:
        raise RuntimeError("the bug")

    return app


def test_a_crash_is_one_line_and_exit_70_and_its_traceback_only_when_debugging() -> None:
    runner = CliRunner()

    quiet = runner.invoke(_crashing_app(), [], env={"ASKBACK_DEBUG": "0"})
    loud = runner.invoke(_crashing_app(), [], env={"ASKBACK_DEBUG": "1"})

    assert quiet.exit_code == loud.exit_code == ExitStatus.CRASHED
    assert quiet.output.strip().startswith("error: askback crashed: RuntimeError: the bug")
    assert len(quiet.output.strip().splitlines()) == 1 and "Traceback" not in quiet.output
    assert "Traceback" in loud.output and 'raise RuntimeError("the bug")' in loud.output


# inbox list shortens --------------------------------------------------------------------------------------------


def test_inbox_list_shortens_a_huge_message_and_a_round_of_a_thousand_questions(
    hostile: Hostile, database: str
) -> None:
    huge = park(hostile.url, "huge_message", database)
    many = park(hostile.url, "many_questions", database)

    listed = askback("inbox", "list", "--database", database)

    assert listed.returncode == ExitStatus.OK, listed.stderr
    assert len(listed.stdout) < 10_000
    assert "ok (form): Approve? blah blah" in listed.stdout and "…" in listed.stdout
    assert "q0019 (form): Question 19?" in listed.stdout and "q0020" not in listed.stdout
    assert f"… and 980 more: `askback inbox show {many}` lists them all" in listed.stdout
    whole = json.loads(askback("inbox", "list", "--json", "--database", database).stdout)
    assert len(whole) == 1001
    assert [len(q["message"]) for q in whole if q["call_id"] == huge] == [len("Approve? " + "blah " * 1_000_000)]
    shown = askback("inbox", "show", huge, "--database", database)
    assert len(shown.stdout) > 5_000_000


def test_inbox_list_shows_the_host_each_url_question_reaches_as_a_browser_reads_it(
    hostile: Hostile, database: str
) -> None:
    idna = park(hostile.url, "link_idna", database)
    hidden = park(hostile.url, "link_zwsp", database)

    listed = askback("inbox", "list", "--database", database)

    assert listed.returncode == ExitStatus.OK, listed.stderr
    assert "connect (url): Sign in there.  -> bücher.example (xn--bcher-kva.example)" in listed.stdout
    assert (
        "connect (url): Sign in there.  -> accounts.example.com, not shown as a link "
        f"(`askback inbox show {hidden}` says why)"
    ) in listed.stdout
    assert idna in listed.stdout


# Ctrl-C at the prompt, and errors on a line of their own ------------------------------------------------------------


def interrupt_at_the_prompt(args: tuple[str, ...], prompt: str) -> tuple[Terminal, int]:
    with Terminal(*args) as term:
        term.expect(prompt)
        term.interrupt()
        # One Ctrl-C ends it: waited for with a deadline well below the 15 s a server's goodbye once took.
        return term, term.finish(timeout=10)


@pytest.mark.parametrize("attempt", range(3))
def test_one_ctrl_c_at_the_prompt_parks_the_call_and_exits_at_once(
    hostile: Hostile, database: str, attempt: int
) -> None:
    before = len(hostile.calls("plain_form"))

    term, code = interrupt_at_the_prompt(
        ("call", hostile.url, "plain_form", "--database", database, "--user", "ada"), "ok (y/n): "
    )

    assert code == ExitStatus.INTERRUPTED, term.shown
    assert "left parked on round 1, not cancelled" in term.shown
    assert "\nerror: interrupted: call call_" in term.shown  # on a line of its own, not after the prompt
    call_id = term.shown.split("interrupted: call ", 1)[1].split(" ", 1)[0]
    assert status(database, call_id)[0] == "parked"
    assert [entry["inputResponses"] for entry in hostile.calls("plain_form")[before:]] == [None]


@pytest.mark.parametrize("attempt", range(3))
def test_one_ctrl_c_at_the_prompt_of_a_call_to_the_projects_own_server_parks_it(
    own_server: str, database: str, attempt: int
) -> None:
    term, code = interrupt_at_the_prompt(
        ("call", own_server, "approve", "--args", '{"item": "web"}', "--database", database, "--user", "ada"),
        "(y/n): ",
    )

    assert code == ExitStatus.INTERRUPTED, term.shown
    assert "\nerror: interrupted: call call_" in term.shown
    call_id = term.shown.split("interrupted: call ", 1)[1].split(" ", 1)[0]
    assert status(database, call_id)[0] == "parked"


def test_askback_call_on_a_yes_or_no_question_completes_with_one_y(own_server: str, database: str) -> None:
    args = ("call", own_server, "approve", "--args", '{"item": "web"}', "--database", database, "--user", "ada")
    with Terminal(*args) as term:
        term.expect("Approve (y/n): ")
        term.type("y")  # one keystroke and its Enter: nothing more is asked
        term.expect("web: approved")
        assert term.finish() == ExitStatus.OK, term.shown
    after_yes = term.shown.split("Approve (y/n): ", 1)[1]
    assert "[s]end" not in after_yes and "Your answer" not in after_yes, term.shown


# inbox list shows a server's words escaped, and refuses keys it cannot keep ---------------------------------------


def test_inbox_list_shows_a_question_methods_escapes_visibly_and_sends_none_to_the_terminal(
    hostile: Hostile, database: str
) -> None:
    park(hostile.url, "escapes_in_method", database)

    listed = askback("inbox", "list", "--database", database)

    assert listed.returncode == ExitStatus.OK, listed.stderr
    assert "\x1b" not in listed.stdout and "\x07" not in listed.stdout
    assert "m (x\\x1b]52;c;aGFja2Vk\\x07): hi" in listed.stdout


def test_inbox_list_shows_a_keys_line_break_as_its_escape_not_as_a_space(hostile: Hostile, database: str) -> None:
    park(hostile.url, "crlf_key", database)

    listed = askback("inbox", "list", "--database", database)

    assert listed.returncode == ExitStatus.OK, listed.stderr
    assert "  a\\r\\nb (form): Approve?" in listed.stdout
    assert "a b" not in listed.stdout and "\r" not in listed.stdout


@pytest.mark.parametrize("tool", ["empty_key", "long_key"])
def test_a_round_whose_key_is_empty_or_too_long_fails_the_call_and_nothing_is_parked(
    hostile: Hostile, database: str, tool: str
) -> None:
    called = askback("call", hostile.url, tool, "--park", "--database", database)

    assert called.returncode == ExitStatus.CALL_FAILED, called
    assert "an input key is empty or longer than 255 characters" in one_error_line(called)
    assert "nothing was kept" in called.stderr
    listed = askback("inbox", "list", "--json", "--database", database)
    assert listed.returncode == ExitStatus.OK and json.loads(listed.stdout) == []
