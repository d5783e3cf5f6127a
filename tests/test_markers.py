"""The inner loop (`pytest -m "not http"`, docs/testing.md) stays fast because a test that starts a process or
listens on a socket must be marked `http`: unmarked, it fails, in its setup as in its body, naming the marker."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest


def test_an_unmarked_test_that_starts_a_process_fails_naming_the_marker() -> None:
    with pytest.raises(Exception, match=r"starts a process: mark it `http`"):
        subprocess.run([sys.executable, "-c", "pass"], check=False)


def test_an_unmarked_test_that_listens_fails_naming_the_marker() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        with pytest.raises(Exception, match=r"listens on a socket: mark it `http`"):
            sock.listen()


@pytest.fixture
def listen_attempt() -> Iterator[Exception | None]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        try:
            sock.listen()
        except Exception as refused:
            yield refused
        else:
            yield None


def test_an_unmarked_tests_fixture_may_not_listen_either(listen_attempt: Exception | None) -> None:
    assert listen_attempt is not None
    assert "mark it `http`" in str(listen_attempt)


@pytest.mark.http
def test_a_marked_test_may_start_a_process_and_listen() -> None:
    assert subprocess.run([sys.executable, "-c", "pass"], check=False).returncode == 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()


def test_a_test_on_postgresql_is_marked_http_by_its_fixture_and_on_sqlite_is_not(
    any_database: str, request: pytest.FixtureRequest
) -> None:
    marked = request.node.get_closest_marker("http") is not None
    assert marked == any_database.startswith("postgresql"), any_database
