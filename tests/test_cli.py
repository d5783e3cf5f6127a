"""The `askback` command: the demo end to end, the audit question after it, keys, and refusals at start-up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from askback.cli import app
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


def test_several_workers_without_a_key_ring_are_refused_with_the_fix(tmp_path: Path) -> None:
    result = askback("serve", "askback.demo:server", "--workers", "3", "--port", "1", cwd=tmp_path)
    assert result.returncode == 2
    assert "askback keys new" in result.stderr and "ASKBACK_STATE_KEYS" in result.stderr


def test_a_short_state_key_is_refused_naming_the_variable(tmp_path: Path) -> None:
    result = askback("serve", "askback.demo:server", cwd=tmp_path, env={"ASKBACK_STATE_KEYS": "short"})
    assert result.returncode == 2
    assert "ASKBACK_" in result.stderr and "askback keys new" in result.stderr


def test_an_unknown_target_is_refused_clearly(tmp_path: Path) -> None:
    result = askback("serve", "nowhere.module:server", cwd=tmp_path)
    assert result.returncode == 2 and "cannot import 'nowhere.module'" in result.stderr


def test_the_demo_runs_and_audit_answers_who_confirmed_the_deletion(tmp_path: Path) -> None:
    demo = askback("demo", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    assert "Deleted billing-legacy." in demo.stdout, demo.stdout
    assert "Deployed web-frontend to production." in demo.stdout
    assert "served by worker" in demo.stdout

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

    table = askback("audit", "--database", "sqlite:///askback-demo.db", "--user", "bob", cwd=tmp_path)
    assert table.returncode == 0 and "deploy" in table.stdout and "delete_project" not in table.stdout


def test_audit_on_a_missing_database_says_what_to_do(tmp_path: Path) -> None:
    result = askback("audit", "--database", f"sqlite:///{tmp_path / 'none.db'}", cwd=tmp_path)
    assert result.returncode == 2 and "error" in result.stderr


@pytest.mark.parametrize("bad", ["--since=yesterday", "--event=maybe"])
def test_audit_refuses_bad_filters(tmp_path: Path, bad: str) -> None:
    result = runner.invoke(app, ["audit", "--database", f"sqlite:///{tmp_path / 'x.db'}", bad])
    assert result.exit_code == 2


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
