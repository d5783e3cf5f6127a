"""The `askback` command: the demo end to end and the audit question after it, keys, refusals at start-up, what
`askback serve` says when it starts, and help that fits 80 columns."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from askback.cli import app
from askback.testing import free_port
from infra import run_askback

runner = CliRunner()


def askback(
    *args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    return run_askback(*args, cwd=cwd, env=env, timeout=timeout)


def test_keys_new_prints_a_fresh_key_long_enough_to_seal() -> None:
    first = runner.invoke(app, ["keys", "new"])
    second = runner.invoke(app, ["keys", "new"])
    assert first.exit_code == 0 and len(first.stdout.strip()) >= 32
    assert first.stdout != second.stdout


@pytest.mark.http
def test_several_workers_without_a_key_ring_are_refused_with_the_fix(tmp_path: Path) -> None:
    result = askback("serve", "askback.demo:server", "--workers", "3", "--port", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "askback keys new" in result.stderr and "ASKBACK_STATE_KEYS" in result.stderr


@pytest.mark.http
def test_a_short_state_key_is_refused_naming_the_variable(tmp_path: Path) -> None:
    result = askback("serve", "askback.demo:server", cwd=tmp_path, env={"ASKBACK_STATE_KEYS": "short"})
    assert result.returncode == 2
    assert "ASKBACK_" in result.stderr and "askback keys new" in result.stderr


@pytest.mark.http
def test_an_unknown_target_is_refused_clearly(tmp_path: Path) -> None:
    result = askback("serve", "nowhere.module:server", cwd=tmp_path)
    assert result.returncode == 2 and "cannot import 'nowhere.module'" in result.stderr


@pytest.mark.http
def test_the_demo_runs_and_audit_answers_who_confirmed_the_deletion(tmp_path: Path) -> None:
    demo = askback("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Deleted billing-legacy." in demo.stdout, demo.stdout
    assert "Deployed web-frontend to production." in demo.stdout
    assert "served by worker" in demo.stdout
    # The workers are named as HOST:PID, and why rounds may land on fewer of them than were started is said.
    assert "3 worker processes sharing 127.0.0.1:" in demo.stdout and "as served by worker HOST:PID" in demo.stdout
    assert re.search(r"Rounds were served by (all 3|[12] of the 3) worker processes \(HOST:PID\): ", demo.stdout)
    assert "Any worker may take any round, as a load balancer may send any round to any instance" in demo.stdout

    who = askback(
        "audit",
        "--database",
        "sqlite:///askback-demo.db",
        "--tool",
        "delete_project",
        "--event",
        "answered",
        "--contains",
        "billing-legacy",
        "--json",
        cwd=tmp_path,
    )
    assert who.returncode == 0, who.stderr
    rows = [json.loads(line) for line in who.stdout.splitlines()]
    assert len(rows) == 1
    assert rows[0]["principal"] == "alice"
    assert rows[0]["content"] == {"project_name": "billing-legacy"}
    assert rows[0]["action"] == "accept" and rows[0]["time"].startswith("20")

    table = askback("audit", "--database", "sqlite:///askback-demo.db", "--user", "bob", "--wide", cwd=tmp_path)
    assert table.returncode == 0 and "deploy" in table.stdout and "delete_project" not in table.stdout

    narrow = askback("audit", "--database", "sqlite:///askback-demo.db", cwd=tmp_path, env={"COLUMNS": "80"})
    assert narrow.returncode == 0, narrow.stderr
    lines = narrow.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), narrow.stdout
    assert "…" not in narrow.stdout  # nothing cut short
    # The demo's trail also holds its approval's rows, whose event names ("approval.requested") leave a question's
    # key too little room at 80 columns to stay whole: alice's rows alone show hers whole.
    alices = askback(
        "audit", "--database", "sqlite:///askback-demo.db", "--user", "alice", cwd=tmp_path, env={"COLUMNS": "80"}
    )
    assert alices.returncode == 0 and all(len(line) <= 80 for line in alices.stdout.splitlines()), alices.stdout
    words = alices.stdout.split()
    assert "alice" in words and "confirm_project" in words and "accept" in words, alices.stdout
    assert any("billing-legacy" in word for word in words), alices.stdout  # the answer, readable in full

    # No round of the demo is replayed but the one it sends again on purpose: the drop's final round, which answers
    # the first outcome and drops nothing more.
    replayed = askback(
        "audit", "--database", "sqlite:///askback-demo.db", "--event", "replayed", "--json", cwd=tmp_path
    )
    assert replayed.returncode == 0, replayed.stderr
    rows = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert [(row["tool"], row["principal"]) for row in rows] == [("drop_database", "bob")], replayed.stdout

    again = askback("demo", cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Deleted billing-legacy." in again.stdout  # a fresh database: the project is there to delete again
    who_again = askback(
        "audit",
        "--database",
        "sqlite:///askback-demo.db",
        "--event",
        "answered",
        "--contains",
        "billing",
        "--json",
        cwd=tmp_path,
    )
    assert len(who_again.stdout.splitlines()) == 1


@pytest.mark.http
def test_the_demo_refuses_a_database_it_did_not_make_and_leaves_it_alone(tmp_path: Path) -> None:
    mine = tmp_path / "mine.db"
    with contextlib.closing(sqlite3.connect(mine)) as conn, conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    before = mine.read_bytes()
    result = askback("demo", "--database", f"sqlite:///{mine}", cwd=tmp_path, env={"COLUMNS": "80"})
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: ")
    assert str(mine) in result.stderr and "delete" in result.stderr and "--database" in result.stderr
    assert mine.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.db"]


@pytest.mark.http
def test_the_demo_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("not a database")
    result = askback("demo", "--database", "sqlite:///notes.txt", cwd=tmp_path)
    assert result.returncode == 2 and "notes.txt already exists" in result.stderr
    assert (tmp_path / "notes.txt").read_text() == "not a database"


@pytest.mark.http
def test_audit_on_a_missing_database_says_what_to_do(tmp_path: Path) -> None:
    result = askback("audit", "--database", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert result.returncode == 2 and "error" in result.stderr


@pytest.mark.parametrize("bad", ["--since=yesterday", "--event=maybe"])
def test_audit_refuses_bad_filters(tmp_path: Path, bad: str) -> None:
    result = runner.invoke(app, ["audit", "--database", f"sqlite:///{tmp_path / 'x.db'}", bad])
    assert result.exit_code == 2


@pytest.mark.http
def test_the_interactive_demo_asks_the_person_at_the_terminal(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    demo = subprocess.run(
        [sys.executable, "-m", "askback", "demo", "--interactive", "--workers", "2"],
        cwd=tmp_path,
        env={**env, "COLUMNS": "200"},
        input="\nstaging\n",  # decline the deletion (empty name), then pick staging (no confirmation needed)
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "answers decline" in demo.stdout
    assert "Cancelled: you declined to delete the project." in demo.stdout
    assert "Deployed web-frontend to staging." in demo.stdout
    assert "confirm_prod" not in demo.stdout


# --- what `askback serve` says when it starts -------------------------------------------------------------------


class Output:
    """Lines a child process writes to a pipe, read as they come, with a deadline and no sleeping."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stderr is not None
        self.fd = proc.stderr.fileno()
        self.lines: list[str] = []
        self._partial = b""

    def until(self, text: str, timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if text in line:
                    return line
            remaining = deadline - time.monotonic()
            ready, _, _ = select.select([self.fd], [], [], max(remaining, 0))
            if not ready:
                raise AssertionError(f"{text!r} not printed within {timeout} s; printed: {self.lines}")
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise AssertionError(f"output ended without {text!r}; printed: {self.lines}")
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            self.lines += [line.decode(errors="replace") for line in complete]


@contextlib.contextmanager
def started(*args: str, cwd: Path, env: dict[str, str]) -> Iterator[Output]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "askback", "serve", *args],
        cwd=cwd,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield Output(proc)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        assert proc.stderr is not None
        proc.stderr.close()


@pytest.mark.http
def test_serve_says_at_start_up_where_it_serves_with_how_many_workers_and_which_database(tmp_path: Path) -> None:
    port = free_port()
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48), "ASKBACK_DATABASE_URL": "sqlite:///served.db"}
    with started("askback.demo:server", "--port", str(port), "--workers", "2", cwd=tmp_path, env=env) as output:
        line = output.until(f"http://127.0.0.1:{port}/mcp")
    record = json.loads(line)
    assert record["level"] == "info" and record["url"] == f"http://127.0.0.1:{port}/mcp"
    assert record["workers"] == 2 and record["database"].endswith("served.db")
    assert f"http://127.0.0.1:{port}/mcp" in record["message"] and "2 workers" in record["message"]
    # The demo server authenticates (demo tokens), so there is nothing to warn about.
    assert not any("token-verifier" in seen for seen in output.lines)


@pytest.mark.http
def test_serve_without_a_token_verifier_warns_that_state_binds_to_no_user(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text('from askback import Askback\n\napp = Askback("mine")\n')
    env = {"ASKBACK_STATE_KEYS": secrets.token_urlsafe(48), "ASKBACK_DATABASE_URL": "sqlite:///mine.db"}
    port = free_port()
    with started("mine:app", "--port", str(port), "--log-format", "text", cwd=tmp_path, env=env) as output:
        output.until(f"http://127.0.0.1:{port}/mcp")
        warning = output.until("--token-verifier")
    assert " WARNING " in warning and not warning.startswith("{") and "state then binds to no user" in warning


# --- help ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["audit", "lint", "check", "demo", "serve"])
@pytest.mark.http
def test_help_in_a_pipe_shows_flags_without_a_value_and_fits_80_columns(tmp_path: Path, command: str) -> None:
    result = askback(command, "--help", cwd=tmp_path, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    assert "<bool>" not in result.stdout and "BOOLEAN" not in result.stdout
    assert all(len(line) <= 80 for line in result.stdout.splitlines()), result.stdout
    flag = {"audit": "--json", "lint": "--format", "check": "--json", "demo": "--interactive", "serve": "--port"}
    assert flag[command] in result.stdout


@pytest.mark.http
def test_askback_version_prints_the_installed_version_and_exits_0() -> None:
    shown = run_askback("--version")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == f"askback {metadata.version('askback')}"
