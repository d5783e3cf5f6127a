from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from _http import Served, served
from askback import Askback, load_settings
from askback.audit.emit import configure as configure_audit_log
from askback.clock import FrozenClock
from askback.demo import build
from infra import Postgres, postgres


@pytest.fixture(autouse=True)
def default_audit_log() -> Iterator[None]:
    """The audit log's shape and level are the process's (each `Askback(...)` applies its settings): every test starts
    from the defaults, whatever a test before it in this process built."""
    configure_audit_log()
    yield
    configure_audit_log()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(at=1_800_000_000.0)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'askback.db'}"


# Where a flow's answers wait between rounds: in the sealed state (the default) or in the store
# (`ASKBACK_ANSWERS=server`). A module where that matters runs its tests in both (`infra.BOTH_ANSWER_MODES`).
@pytest.fixture(params=["state", "server"])
def answers_mode(request: pytest.FixtureRequest) -> str:
    """Both places answers wait in, for a module marked `BOTH_ANSWER_MODES`."""
    mode: str = request.param
    return mode


@pytest.fixture
def make_settings(db_url: str, request: pytest.FixtureRequest) -> Callable[..., Any]:
    key = secrets.token_urlsafe(32)
    answers_mode = request.getfixturevalue("answers_mode") if "answers_mode" in request.fixturenames else "state"

    def make(**overrides: Any) -> Any:
        values: dict[str, Any] = {"database_url": db_url, "state_keys": key, "demo_auth": True, "answers": answers_mode}
        values.update(overrides)
        return load_settings(**values)

    return make


@pytest.fixture
async def demo(make_settings: Callable[..., Any], clock: FrozenClock) -> AsyncIterator[Askback]:
    app = build(make_settings(), clock=clock)
    async with app.running():
        yield app


@pytest.fixture(scope="module")
def demo_server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Served]:
    """The demo over real HTTP (`askback serve askback.demo:server`, one worker, a SQLite file and a state key of its
    own), shared by the tests of one module: each module that uses it gets its own (two, one per place answers wait
    in, for a module marked `BOTH_ANSWER_MODES`)."""
    path = tmp_path_factory.mktemp("demo-server") / "db.sqlite"
    answers = getattr(request, "param", "state")
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=1, answers=answers) as server:
        yield server


@pytest.fixture(scope="module")
def demo_url(demo_server: Served) -> str:
    """The /mcp URL of the module's `demo_server`."""
    return demo_server.url


# Property tests: a few examples with the suite, 10,000 in the documented deep run (`--hypothesis-profile=deep`).
settings.register_profile("default", max_examples=40, deadline=None)
settings.register_profile("deep", max_examples=10_000, deadline=None)
settings.load_profile("default")


# --- databases and sockets shared by the modules that need them ---------------------------------------------------


@pytest.fixture(scope="session")
def pg() -> Iterator[Postgres]:
    """One real PostgreSQL for the session; each test that needs it makes a database of its own."""
    with postgres() as cluster:
        yield cluster


@pytest.fixture
def fresh_pg_url(pg: Postgres) -> str:
    """The URL of a new, empty PostgreSQL database."""
    name = f"t{secrets.token_hex(6)}"
    pg.create_database(name)
    return pg.url(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def any_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The same test on a new SQLite file and on a new PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'askback.db'}"
    url: str = request.getfixturevalue("fresh_pg_url")
    return url


@pytest.fixture(scope="module")
def listener() -> Iterator[socket.socket]:
    """A loopback socket already listening, for a server the module starts on it: its port is known before the
    server starts (an OAuth provider can be told the callback URL), and nothing waits for the server to bind."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    try:
        yield sock
    finally:
        sock.close()


# A test that starts a process or listens on a socket is marked `http`, so that `pytest -m "not http"` (the inner
# loop, docs/testing.md) stays fast: an unmarked test doing either fails, naming what it started.
class _StartsWhatItMayNot(Exception):
    pass


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*_: Any, **__: Any) -> Any:
        raise _StartsWhatItMayNot(f"this test {what}: mark it `http` (pytest.mark.http)")

    return refused


@contextlib.contextmanager
def _unmarked_guard(item: pytest.Item) -> Iterator[None]:
    if item.get_closest_marker("http") is not None:
        yield
        return
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(subprocess.Popen, "_execute_child", _refuse("starts a process"))
        for fork in ("fork", "forkpty", "posix_spawn", "posix_spawnp"):
            patch.setattr(os, fork, _refuse("starts a process"))
        patch.setattr(socket.socket, "listen", _refuse("listens on a socket"))
        yield


# Fixtures that start a server (PostgreSQL, `askback serve`, a listening socket): a test using one is `http` without
# saying so itself. Whatever else starts one is caught by the guard above.
_SERVER_FIXTURES = frozenset({"pg", "fresh_pg_url", "demo_server", "demo_url", "listener"})


# The test files that take longest, run first: `.ci/run` hands whole files to its processes in the order collected, so
# a long file collected last keeps one process busy after the others have finished.
_LONGEST_FIRST = (
    "tests/runtime/test_runtime_cli_hardening.py",
    "tests/runtime/test_runtime_cli_tokens.py",
    "tests/test_benchmark_smoke.py",
    "tests/server/test_scaleout.py",
    "tests/cli/test_cli.py",
    "tests/runtime/test_runtime_hostile.py",
    "tests/interop/test_runtime_conformance.py",
    "tests/runtime/test_runtime_asker.py",
    "tests/cli/test_readme_setup.py",
    "tests/runtime/test_runtime_cli.py",
)


def _rank(item: pytest.Item) -> int:
    path = item.nodeid.partition("::")[0]
    return _LONGEST_FIRST.index(path) if path in _LONGEST_FIRST else len(_LONGEST_FIRST)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        uses = set(getattr(item, "fixturenames", ()))
        if uses & _SERVER_FIXTURES or params.get("any_database") == "postgresql":
            item.add_marker(pytest.mark.http)
    items.sort(key=_rank)  # stable: the order within a file, and of every other file, is kept


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    with _unmarked_guard(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    with _unmarked_guard(item):
        return (yield)
