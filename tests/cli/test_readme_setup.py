"""The README's set-up command, run exactly as written in a fresh copy of this repository: once with the Python on
PATH (as in a python:3.11 image), once with Debian's own /usr/bin/python3 (which refuses `pip install` outside a
virtual environment, PEP 668). Each run installs askback and its dependencies from PyPI into the virtual
environment the command creates, then runs the demo: a minute or two per interpreter.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra import ROOT

pytestmark = pytest.mark.http  # the demo serves on loopback with three worker processes

REPO = ROOT
DEBIAN_PYTHON = Path("/usr/bin/python3")
# Installing from PyPI and the demo take one to two minutes; a hung install or demo fails the test after this.
TIMEOUT_SECONDS = 900


def set_up_commands(readme: str) -> list[str]:
    """The commands of the README's "## Set up" code block, as written (comment lines left out)."""
    _, found, rest = readme.partition("\n## Set up\n")
    assert found, 'README.md has no "## Set up" section'
    block = re.search(r"^```sh\n(.*?)^```", rest.split("\n## ", 1)[0], re.DOTALL | re.MULTILINE)
    assert block is not None, 'the "## Set up" section of README.md has no ```sh code block'
    return [line for line in block.group(1).splitlines() if line.strip() and not line.lstrip().startswith("#")]


def fresh_copy(into: Path) -> Path:
    """The repository as a clone would hold it once the working tree is committed: tracked files and new ones that
    are not ignored, so no .venv, build output or databases."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():  # not a file deleted in the working tree
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def environment_outside_this_virtualenv(first_on_path: Path | None) -> dict[str, str]:
    """This process's environment without the virtual environment the tests run in (the README's command must make
    its own) and without askback's settings, as a newcomer's shell would be."""
    active = {sys.prefix} if sys.prefix != sys.base_prefix else set()
    if "VIRTUAL_ENV" in os.environ:
        active.add(os.environ["VIRTUAL_ENV"])
    venv_bins = {os.path.realpath(os.path.join(prefix, "bin")) for prefix in active}
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"VIRTUAL_ENV", "VIRTUAL_ENV_PROMPT", "PYTHONHOME", "PYTHONPATH"}
        and not name.startswith("ASKBACK_")
    }
    path = [
        entry for entry in env.get("PATH", "").split(os.pathsep) if entry and os.path.realpath(entry) not in venv_bins
    ]
    if first_on_path is not None:
        path.insert(0, str(first_on_path))
    env["PATH"] = os.pathsep.join(path)
    # Should the README ever install outside a virtual environment again, pip refuses here rather than installing
    # into the Python that runs these tests.
    env["PIP_REQUIRE_VIRTUALENV"] = "true"
    return env


def run_in_its_own_session(command: str, *, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """`bash -c command`, its output, and its exit status; on timeout the command and everything it started (the
    demo's server and workers) are killed."""
    process = subprocess.Popen(
        ["bash", "-c", command],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"the README's set-up command did not finish in {TIMEOUT_SECONDS} s:\n{output[-6000:]}")
    return process.returncode, output


@pytest.mark.parametrize(
    "python_dir",
    [
        pytest.param(None, id="python3-on-path"),
        pytest.param(
            DEBIAN_PYTHON.parent,
            id="debian-python3",
            marks=pytest.mark.skipif(
                not DEBIAN_PYTHON.exists(), reason="no /usr/bin/python3: this machine has no Debian system Python"
            ),
        ),
    ],
)
def test_the_readme_set_up_command_makes_its_own_virtualenv_installs_askback_and_runs_the_demo(
    python_dir: Path | None, tmp_path: Path
) -> None:
    commands = set_up_commands((REPO / "README.md").read_text(encoding="utf-8"))
    assert len(commands) == 2 and commands[1].startswith("bash .ci/run"), commands
    clone = fresh_copy(tmp_path / "askback")

    status, output = run_in_its_own_session(commands[0], cwd=clone, env=environment_outside_this_virtualenv(python_dir))

    assert status == 0, f"`{commands[0]}` exited with {status}:\n{output[-6000:]}"
    assert "Deleted billing-legacy." in output, output[-6000:]
    if python_dir is not None:
        # The virtual environment was made by Debian's python3, not by another one earlier on PATH.
        assert f"home = {python_dir}\n" in (clone / ".venv" / "pyvenv.cfg").read_text()
