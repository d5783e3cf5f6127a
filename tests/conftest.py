from __future__ import annotations

import secrets
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from _http import Served, served
from askback import Askback, load_settings
from askback.clock import FrozenClock
from askback.demo import build
from infra import Postgres, postgres


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(at=1_800_000_000.0)


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'askback.db'}"


@pytest.fixture(params=["state", "server"])
def answers_mode(request: pytest.FixtureRequest) -> str:
    """Where a flow's answers wait between rounds: in the sealed state (the default) or in the store
    (`ASKBACK_ANSWERS=server`). Every test of flows runs in both."""
    mode: str = request.param
    return mode


@pytest.fixture
def make_settings(db_url: str, answers_mode: str) -> Callable[..., Any]:
    key = secrets.token_urlsafe(32)

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


@pytest.fixture(scope="module", params=["state", "server"])
def demo_server(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Served]:
    """The demo over real HTTP (`askback serve askback.demo:server`, one worker, a SQLite file and a state key of its
    own), shared by the tests of one module: each module that uses it gets its own, once with the answers in the
    sealed state and once held on the server."""
    path = tmp_path_factory.mktemp("demo-server") / "db.sqlite"
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=1, answers=request.param) as server:
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
