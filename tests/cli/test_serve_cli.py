"""`askback serve` as a person runs it: an address it cannot have (a port in use, a host that is no address, an
address not this machine's) is one `error:` line and exit status 2, with nothing announced; the URL is announced
only once the port takes connections, in one process or handed to workers; and its log lines are text for a person
at a terminal, JSON elsewhere, or what `--log-format` / `ASKBACK_LOG_FORMAT` ask for.

Every server is a real `askback serve` process on loopback, at a real pseudo-terminal where a terminal is meant."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import secrets
import select
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from askback.cli.listen import bind_failure
from askback.cli.logs import TextFormatter
from askback.testing import call_round, free_port
from infra import run_askback

pytestmark = [pytest.mark.http]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")
# A text line: local time, level, logger, message, then the record's fields as key=value.
_TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (DEBUG|INFO|WARNING|ERROR|CRITICAL) +[\w.]+ \S")


def settings(tmp_path: Path, **more: str) -> dict[str, str]:
    return {
        "ASKBACK_STATE_KEYS": secrets.token_urlsafe(48),
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'serve.db'}",
        "COLUMNS": "80",
        **more,
    }


def the_one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert "serving" not in result.stderr + result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


# -- an address that cannot be had -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_a_port_already_in_use_is_one_error_line_naming_the_address_and_exit_2(tmp_path: Path, workers: int) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_askback(
            "serve", "askback.demo:server", "--port", str(port), "--workers", str(workers),
            cwd=tmp_path, env=settings(tmp_path), timeout=120,
        )  # fmt: skip
    line = the_one_error_line(result)
    assert f"127.0.0.1:{port}" in line and "already in use" in line and "--port" in line


@pytest.mark.parametrize(
    ("host", "said"),
    [("999.1.1.1", "is not an IP address"), ("192.0.2.1", "is not an address of this machine")],
)
def test_a_host_that_is_no_address_of_this_machine_is_one_error_line_and_exit_2(
    tmp_path: Path, host: str, said: str
) -> None:
    port = free_port()
    result = run_askback(
        "serve", "askback.demo:server", "--host", host, "--port", str(port),
        cwd=tmp_path, env=settings(tmp_path), timeout=120,
    )  # fmt: skip
    line = the_one_error_line(result)
    assert f"{host}:{port}" in line and said in line and "--host" in line


def test_a_port_the_process_may_not_take_is_explained_with_what_to_do() -> None:
    # Tests run as root here, who may bind port 80: the message for it is checked as the data it is.
    line = bind_failure("0.0.0.0", 80, errno.EACCES, "Permission denied")
    assert line.startswith("cannot listen on 0.0.0.0:80: permission denied") and "--port of 1024 or more" in line
    assert bind_failure("::", 8000, errno.EADDRINUSE, "Address in use").startswith("cannot listen on [::]:8000:")


# -- a server that starts ---------------------------------------------------------------------------------------------


class Lines:
    """What a child writes to a pipe or a terminal, read line by line as it comes, with a deadline."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.raw: list[str] = []
        self._partial = b""
        self._open = True

    @property
    def lines(self) -> list[str]:
        return [_ANSI.sub("", line) for line in self.raw]

    def until(self, found: Callable[[str], bool], what: str, timeout: float = 90) -> str:
        """The first line (colours removed) for which `found` is true, once it is printed."""
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines:
                if found(line):
                    return line
            if not self._open:
                raise AssertionError(f"output ended without {what}; it was: {self.raw}")
            ready, _, _ = select.select([self.fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise AssertionError(f"{what} not printed within {timeout} s; printed: {self.raw}")
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # EIO: the terminal's other side is closed
                chunk = b""
            self._open = bool(chunk)
            *complete, self._partial = (self._partial + chunk).split(b"\n")
            self.raw += [line.decode(errors="replace").rstrip("\r") for line in complete]


@dataclass
class Serving:
    proc: subprocess.Popen[bytes]
    output: Lines
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def announced(self) -> str:
        """The serving line, once printed."""
        return self.output.until(lambda line: "askback serving" in line, "the serving line")


@contextlib.contextmanager
def serving(*args: str, cwd: Path, env: dict[str, str], terminal: bool = False) -> Iterator[Serving]:
    """`askback serve askback.demo:server ARGS` with its stderr (and stdout) a pipe, or a pseudo-terminal; stopped
    (SIGTERM, then SIGKILL) at the end."""
    port = free_port()
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ASKBACK_") and k not in ("NO_COLOR", "COLUMNS", "LINES")
    }
    command = [sys.executable, "-m", "askback", "serve", "askback.demo:server", "--port", str(port), *args]
    if terminal:
        ours, theirs = os.openpty()
    else:
        ours, theirs = os.pipe()
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
            env={**clean, "TERM": "xterm-256color", **env},
            stdin=subprocess.DEVNULL,
            stdout=theirs,
            stderr=theirs,
            start_new_session=True,
        )
    finally:
        os.close(theirs)
    try:
        yield Serving(proc, Lines(ours), port)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGCONT)  # in case a test left it stopped
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(ours)


@contextlib.contextmanager
def stopped(proc: subprocess.Popen[bytes]) -> Iterator[None]:
    """Every process of the server frozen (SIGSTOP) for the block: it does nothing more while the block looks."""
    os.killpg(proc.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGCONT)


@pytest.mark.parametrize("workers", [1, 2])
def test_the_serving_line_is_printed_only_once_the_port_takes_connections(tmp_path: Path, workers: int) -> None:
    with serving("--workers", str(workers), cwd=tmp_path, env=settings(tmp_path)) as server:
        line = server.announced()
        # Frozen the moment the line is seen: whatever accepts the connection now was there before the line.
        with stopped(server.proc):
            conn = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        with conn:
            # The connection made while frozen is served once the server goes on, by the workers given the socket.
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            conn.settimeout(60)
            reply = b""
            while chunk := conn.recv(65536):
                reply += chunk
    assert reply.startswith(b"HTTP/1.1 200"), reply
    record = json.loads(line)  # a pipe: JSON
    assert record["url"] == server.url and record["workers"] == workers


# -- log lines for a person, or for a pipeline --------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("terminal", "args", "env", "expected"),
    [
        pytest.param(True, ("--workers", "2"), {}, "text", id="terminal"),
        pytest.param(True, (), {"ASKBACK_LOG_FORMAT": "json"}, "json", id="terminal-setting-json"),
        pytest.param(True, ("--log-format", "json"), {}, "json", id="terminal-flag-json"),
        pytest.param(False, (), {}, "json", id="pipe"),
        pytest.param(False, ("--log-format", "text"), {}, "text", id="pipe-flag-text"),
        pytest.param(False, ("--workers", "2"), {"ASKBACK_LOG_FORMAT": "text"}, "text", id="pipe-setting-text"),
    ],
)
async def test_log_lines_are_text_at_a_terminal_and_json_elsewhere_unless_asked(
    tmp_path: Path, terminal: bool, args: tuple[str, ...], env: dict[str, str], expected: str
) -> None:
    with serving(*args, cwd=tmp_path, env=settings(tmp_path, **env), terminal=terminal) as server:
        announced = server.announced()
        assert_format(expected, announced)
        await call_round(server.url, "deploy", {"service": "shown"}, token="demo-ada")
        asked = server.output.until(lambda line: "askback asked" in line, "the audit line")
        raw = "\n".join(server.output.raw)
    if expected == "json":
        record = json.loads(announced)
        assert record["logger"] == "askback.serve" and record["url"] == server.url
        audit = json.loads(asked)
        assert audit["askback_event"] == "asked" and audit["keys"] == ["pick_env"] and audit["principal"] == "ada"
    else:
        assert " INFO " in announced and " askback.serve askback serving askback.demo:server at " in announced
        assert f"  url={server.url} " in announced and "workers=" in announced and "database=sqlite" in announced
        assert_format(expected, asked)
        assert " askback.audit askback asked " in asked
        assert "askback_event=asked" in asked and 'keys=["pick_env"]' in asked and "principal=ada" in asked
    # Colours at a terminal only, and only in text.
    assert ("\x1b[32mINFO" in raw) == (terminal and expected == "text")
    assert "\x1b[" not in raw or terminal


def assert_format(expected: str, line: str) -> None:
    if expected == "json":
        assert isinstance(json.loads(line), dict), line
    else:
        assert not line.startswith("{") and _TEXT_LINE.match(line), line


def test_a_text_line_shows_control_and_bidirectional_characters_as_escapes_and_stays_one_line() -> None:
    hostile = "deploy\x1b]52;c;cGF3bmVk\x07\x1b[2J\u202egnp.exe\u200b\r\nforged line"
    record = logging.LogRecord("askback.audit", logging.INFO, __file__, 1, "askback asked tool=%s", (hostile,), None)
    record.tool = hostile
    line = TextFormatter(colour=False).format(record)
    assert "\n" not in line and "\r" not in line and "\x1b" not in line and "\x07" not in line
    assert "\u202e" not in line and "\u200b" not in line
    assert "\\x1b]52;c;cGF3bmVk\\x07" in line and "\\u202egnp.exe\\u200b" in line
    assert line.count("forged line") == 2  # in the message, and in the field, both on this one line


# -- the database ---------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_database_sets_the_database_of_every_worker(tmp_path: Path) -> None:
    given = tmp_path / "given.db"
    env = {k: v for k, v in settings(tmp_path).items() if k != "ASKBACK_DATABASE_URL"}
    deployed: dict[str, str] = {}
    with serving("--workers", "2", "--database", f"sqlite:///{given}", cwd=tmp_path, env=env) as server:
        assert json.loads(server.announced())["database"].endswith(f":///{given}")
        # Rounds on fresh connections until both workers have served some (each deploy is one round).
        for number in range(60):
            rnd = await call_round(
                server.url, "deploy", {"service": f"s{number}", "environment": "dev"}, token="demo-ada"
            )
            assert rnd.result is not None and not getattr(rnd.result, "is_error", False), rnd
            deployed[f"s{number}"] = rnd.instance or "?"
            if len(set(deployed.values())) == 2:
                break
    assert len(set(deployed.values())) == 2, deployed
    with contextlib.closing(sqlite3.connect(given)) as conn:
        rows = {service for (service,) in conn.execute("SELECT service FROM demo_deployments")}
    assert rows == set(deployed)
    assert not (tmp_path / "askback.db").exists()  # the default database, which no worker opened
