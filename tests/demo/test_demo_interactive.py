"""`askback demo --interactive` at a real terminal (a pty that is the demo's controlling terminal): what a person
is shown before typing, and one Ctrl-C stopping the demo, its server and every worker."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from askback.testing import free_port

DEMO_SERVER = b"askback.demo:server"


class Terminal:
    """The demo running in a pty: what it shows, and what the person types, including Ctrl-C."""

    def __init__(self, *args: str, cwd: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
        env.update({"TERM": "dumb", "COLUMNS": "120", "LINES": "40"})
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the pty is its controlling terminal, it is the foreground process group
            try:
                os.chdir(cwd)
                os.execve(sys.executable, [sys.executable, "-m", "askback", *args], env)
            finally:
                os._exit(127)
        self.shown = b""
        self._cursor = 0
        self.status: int | None = None

    def read(self, deadline: float) -> bool:
        """Read what the terminal shows next; False once the other side is closed (every process left it)."""
        ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            raise AssertionError(f"the terminal showed nothing more in time; it shows: {self.text[-3000:]}")
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # EIO: the slave side is closed
            chunk = b""
        self.shown += chunk
        return bool(chunk)

    def wait_for(self, text: str, timeout: float = 120) -> None:
        """Wait until `text` is shown after what earlier waits found."""
        deadline = time.monotonic() + timeout
        while (found := self.shown.find(text.encode(), self._cursor)) < 0:
            if not self.read(deadline):
                raise AssertionError(f"the demo ended before showing {text!r}: {self.text[-3000:]}")
        self._cursor = found + len(text.encode())

    def type(self, keys: str) -> None:
        os.write(self.fd, keys.encode())

    def wait_for_exit(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while self.read(deadline):
            pass
        _, status = os.waitpid(self.pid, 0)
        self.status = os.waitstatus_to_exitcode(status)
        return self.status

    @property
    def text(self) -> str:
        return self.shown.decode(errors="replace")

    def close(self, port: int) -> None:
        """Kill what a failed test left running: the demo, and its server's whole session."""
        if self.status is None:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        os.close(self.fd)
        for session in demo_server_sessions(port):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(session, signal.SIGKILL)


@pytest.fixture
def demo_at() -> Iterator[Callable[..., tuple[Terminal, int]]]:
    """Start `askback demo --interactive` in a terminal, on a port of its own; whatever is left is killed after."""
    started: list[tuple[Terminal, int]] = []

    def start(cwd: Path, *args: str) -> tuple[Terminal, int]:
        port = free_port()
        terminal = Terminal("demo", "--interactive", "--port", str(port), *args, cwd=cwd)
        started.append((terminal, port))
        return terminal, port

    yield start
    for terminal, port in started:
        terminal.close(port)


def _processes() -> Iterator[tuple[int, bytes, list[str]]]:
    """(pid, command line, fields of /proc/PID/stat after the command name) of every process now."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        yield int(entry), cmdline, stat.rsplit(")", 1)[1].split()


def demo_server_sessions(port: int) -> list[int]:
    """The session of the demo server on `port` (it starts one of its own, which its workers share), if running."""
    option = b"\0--port\0" + str(port).encode() + b"\0"
    return [int(fields[3]) for _, cmdline, fields in _processes() if DEMO_SERVER in cmdline and option in cmdline]


def live_processes_in_session(session: int) -> list[int]:
    # Fields after the name: state, ppid, pgrp, session. A zombie (Z) has ended; only its parent has not reaped it.
    return [pid for pid, _, fields in _processes() if int(fields[3]) == session and fields[0] != "Z"]


@pytest.mark.http
def test_one_ctrl_c_at_a_prompt_stops_the_demo_its_server_and_every_worker(
    tmp_path: Path, demo_at: Callable[..., tuple[Terminal, int]]
) -> None:
    demo, port = demo_at(tmp_path, "--workers", "3")
    demo.wait_for("(empty to decline)")
    [session] = demo_server_sessions(port)
    assert len(live_processes_in_session(session)) >= 4  # the server and its three workers

    demo.type("\x03")
    assert demo.wait_for_exit(timeout=60) == 130, demo.text
    assert "interrupted" in demo.text and "Traceback" not in demo.text

    # The demo waited for the server to exit; its workers may take a moment more to be gone from /proc.
    deadline = time.monotonic() + 30
    while (left := live_processes_in_session(session)) and time.monotonic() < deadline:
        select.select([], [], [], 0.05)
    assert left == [], f"still running after the demo exited: {left}"


@pytest.mark.http
def test_the_interactive_demo_shows_what_to_type_without_empty_default_brackets(
    tmp_path: Path, demo_at: Callable[..., tuple[Terminal, int]]
) -> None:
    demo, _ = demo_at(tmp_path, "--workers", "1")
    demo.wait_for("(empty to decline)")
    asked = demo.text
    assert "Type the project name to delete prj_99." in asked
    assert "prj_99 is billing-legacy" in asked  # the name to type is on screen
    assert "Project name" in asked and "()" not in asked

    demo.type("billing-legacy\r")
    demo.wait_for("Deleted billing-legacy.")
    demo.wait_for("[dev/staging/production] (empty to decline)")
    demo.type("\r")  # no environment: decline
    demo.wait_for("Cancelled: no environment was chosen; nothing was deployed.")
    demo.wait_for("/accounts/start?t=")  # the link to open in a browser
    demo.wait_for("Press Enter once the page says Connected (n to decline): ")
    demo.type("n\r")
    demo.wait_for("Cancelled: you did not connect your demo-mail account.")
    assert demo.wait_for_exit() == 0, demo.text
    assert "()" not in demo.text
