"""How the `askback` command fails: a bad configuration of `askback serve` (a database that is not SQLite, an app
module that cannot be imported, a port out of range, a database that cannot be opened or reached) ends with exit
status 2 and exactly one `error: ...` line on stderr, never a traceback, never a password; and every command's
error stays one line at 80 columns."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from askback.cli.output import reports_errors
from askback.cli.targets import file_target
from askback.errors import AskbackError, ConfigurationError
from infra import run_askback

KEYS = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48)}
# Long messages must not be wrapped at the console's width, in a pipe or anywhere.
NARROW = {"COLUMNS": "80"}


def serve(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_askback("serve", *args, cwd=cwd, env={**KEYS, **NARROW, **(env or {})}, timeout=120)


def the_one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single line on stderr of a command that failed with status 2, after checking that it is one."""
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


@pytest.mark.http
def test_a_database_url_pointing_at_a_text_file_is_refused_as_not_sqlite(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("my notes, not a database\n" * 100)
    result = serve("askback.demo:server", cwd=tmp_path, env={"ASKBACK_DATABASE_URL": "sqlite:///notes.txt"})
    line = the_one_error_line(result)
    assert "notes.txt is not an SQLite database" in line and "ASKBACK_DATABASE_URL" in line
    assert (tmp_path / "notes.txt").read_text().startswith("my notes")


@pytest.mark.http
def test_an_app_module_that_raises_on_import_is_named_with_its_exception(tmp_path: Path) -> None:
    (tmp_path / "broken.py").write_text('import os\n\nraise RuntimeError("boom")\n')
    line = the_one_error_line(serve("broken:server", cwd=tmp_path))
    assert "'broken'" in line and "RuntimeError: boom" in line and "broken.py:3" in line


@pytest.mark.http
def test_an_app_module_with_a_syntax_error_is_refused_with_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "typo.py").write_text("from askback import Askback\n\nserver = Askback(\n\ndef (:\n")
    line = the_one_error_line(serve("typo:server", cwd=tmp_path))
    assert "'typo'" in line and "SyntaxError" in line and "typo.py:" in line


EXPENSES = "from askback import Askback\n\napp = Askback('expenses')\n"


@pytest.mark.parametrize(
    ("target", "suggested"),
    [
        pytest.param("expenses:app", "did you mean expenses_app:app?", id="a-close-module-name"),
        pytest.param("expenses_app.py:app", "give expenses_app:app", id="a-file-path"),
        pytest.param("expenses_app:application", "did you mean expenses_app:app?", id="an-attribute-it-lacks"),
    ],
)
@pytest.mark.http
def test_a_wrong_target_is_refused_with_the_target_that_would_work(tmp_path: Path, target: str, suggested: str) -> None:
    (tmp_path / "expenses_app.py").write_text(EXPENSES)
    (tmp_path / "notes.py").write_text("")  # not close to any of them: never suggested
    result = run_askback("serve", target, cwd=tmp_path, env={**KEYS, **NARROW}, timeout=60)
    line = the_one_error_line(result)
    assert suggested in line and "notes" not in line


def test_a_file_path_becomes_the_module_path_it_means() -> None:
    assert file_target("./ops/app.py", "server") == "ops.app:server"
    assert file_target("expenses_app.py", "app") == "expenses_app:app"
    assert file_target("askback.demo", "server") is None
    assert file_target("../elsewhere.py", "app") is None  # not importable from here: nothing to suggest


@pytest.mark.http
def test_an_attribute_of_a_module_without_a_server_says_it_defines_none(tmp_path: Path) -> None:
    (tmp_path / "helpers.py").write_text("value = 1\n")
    line = the_one_error_line(serve("helpers:app", cwd=tmp_path))
    assert "'helpers' has no 'app', and defines no Askback" in line


@pytest.mark.parametrize("port", ["70000", "-1", "0"])
@pytest.mark.http
def test_a_port_outside_1_to_65535_is_refused_before_serving(tmp_path: Path, port: str) -> None:
    line = the_one_error_line(serve("askback.demo:server", f"--port={port}", cwd=tmp_path))
    assert "--port" in line and "65535" in line


@pytest.mark.http
def test_an_unopenable_sqlite_path_prints_only_the_error_even_under_load(tmp_path: Path) -> None:
    # aiosqlite's worker thread used to report its failed open to an event loop already closed, printing "Event loop
    # is closed" tracebacks after the error; it is a race, so several servers fail at once to give it every chance.
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    env = {**clean, **KEYS, **NARROW, "ASKBACK_DATABASE_URL": "sqlite:////nonexistent-dir/sub/x.db"}
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "askback", "serve", "askback.demo:server"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode is not None
        line = the_one_error_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
        assert "/nonexistent-dir/sub/x.db" in line and "unable to open database file" in line


@pytest.mark.http
def test_an_unreachable_postgresql_database_is_refused_without_its_password(tmp_path: Path) -> None:
    with_password = "postgresql://askback:hunter2secret@127.0.0.1:1/askback"  # nothing listens on port 1
    result = serve("askback.demo:server", cwd=tmp_path, env={"ASKBACK_DATABASE_URL": with_password})
    line = the_one_error_line(result)
    assert "127.0.0.1:1" in line and "hunter2secret" not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["lint", "no/such/path/anywhere/at/all/with/a/long/name/to/make/the/line/wider/than/eighty.py"],
        ["check", "http://127.0.0.1:1/mcp", "--tool", "t", "--args", "{not json"],
        ["audit", "--event", "a-kind-of-event-that-does-not-exist-and-is-long-enough-to-wrap"],
    ],
    ids=["lint", "check", "audit"],
)
@pytest.mark.http
def test_every_command_reports_an_error_on_one_unwrapped_line(tmp_path: Path, args: list[str]) -> None:
    result = run_askback(*args, cwd=tmp_path, env=NARROW)
    assert len(the_one_error_line(result)) > 80


@pytest.mark.http
def test_an_askback_error_raised_by_a_command_is_printed_once_and_exits_with_its_exit_code(tmp_path: Path) -> None:
    # `askback db upgrade` raises the ConfigurationError of a database URL askback cannot use; the command line's one
    # error boundary prints it and exits with that error's exit_code.
    result = run_askback("db", "upgrade", cwd=tmp_path, env={**NARROW, "ASKBACK_DATABASE_URL": "mysql://db/askback"})
    assert result.returncode == ConfigurationError.exit_code
    line = the_one_error_line(result)
    assert "'mysql'" in line and "ASKBACK_DATABASE_URL" in line


def test_the_error_boundary_exits_with_the_exit_code_the_error_carries() -> None:
    class Unavailable(AskbackError):
        exit_code = 69

    app = typer.Typer()

    @app.callback()
    def root() -> None:
        """A command line of one's own, with askback's error boundary."""

    @app.command("go")
    @reports_errors
    def go() -> None:
        raise Unavailable("the thing is down;\nretry later")

    result = CliRunner().invoke(app, ["go"])
    assert result.exit_code == 69
    assert result.stderr == "error: the thing is down; retry later\n" and result.stdout == ""
