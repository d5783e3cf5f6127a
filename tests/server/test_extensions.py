"""Extensions: what a product adds to an app (migrations, start and close hooks, mounts, ports), given to
`Askback(..., extensions=[...])` and wired by the app alone."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from mcp import Client
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from askback import Askback, ConfigurationError, Flow, load_settings
from askback.db.migrate import Component
from askback.extension import Extension, ExtensionContext, Mounted, Open, Ports
from askback.server import build_app
from askback.testing import text

pytestmark = pytest.mark.anyio

SRC = Path(__file__).resolve().parents[2] / "src" / "askback"


@dataclass
class Account:
    label: str = ""
    status: str = "ACTIVE"


@dataclass
class NotesPort:
    """The accounts of one caller, as a tiny product would provide them: one ACTIVE account on `notes`."""

    principal: str | None
    closed: list[str]

    async def accounts(self, connection: str) -> Sequence[Account]:
        return [Account()] if connection == "notes" else []

    async def link(self, connection: str, label: str, flow_id: str) -> str:
        return "https://example.com/connect"

    async def recover(self, account: Any) -> Any:
        return account

    def handle(self, account: Any) -> str:
        return f"the notes account of {self.principal or 'nobody'}"

    async def aclose(self) -> None:
        self.closed.append("port")


@dataclass
class Recording:
    """An extension built inline: records its start and close in `log`; fails its start with `fail`."""

    name: str
    log: list[str]
    fail: BaseException | None = None
    ports: Ports = field(default_factory=Ports)
    mounts: Sequence[Mounted] = ()
    migrations: Sequence[Component] = ()
    context: ExtensionContext | None = None

    async def start(self, context: ExtensionContext) -> None:
        if self.fail is not None:
            raise self.fail
        self.context = context
        self.log.append(f"start {self.name}")

    async def close(self) -> None:
        self.log.append(f"close {self.name}")


def settings_for(tmp_path: Path) -> Any:
    return load_settings(database_url=f"sqlite:///{tmp_path / 'askback.db'}", state_keys=secrets.token_urlsafe(32))


def hello_pages() -> Starlette:
    async def hello(request: Request) -> JSONResponse:
        return JSONResponse({"hello": "from the extension"})

    return Starlette(routes=[Route("/hello", hello)])


async def test_extensions_start_in_order_with_the_open_store_and_close_in_reverse(tmp_path: Path) -> None:
    log: list[str] = []
    first, second = Recording("first", log), Recording("second", log)
    app = Askback("notes", settings=settings_for(tmp_path), extensions=[first, second])

    @app.on_start
    async def own_set_up(store: Any) -> None:
        log.append("app on_start")

    @app.on_close
    async def own_clean_up() -> None:
        log.append("app on_close")

    async with app.running():
        assert log == ["start first", "start second", "app on_start"]
        assert first.context is not None and first.context.store is await app.store()
        assert (first.context.settings, first.context.clock) == (app.settings, app.clock)
    assert log == ["start first", "start second", "app on_start", "app on_close", "close second", "close first"]


async def test_a_failing_start_closes_the_extensions_started_before_it_and_raises_an_askback_error(
    tmp_path: Path,
) -> None:
    log: list[str] = []
    broken = Recording("broken", log, fail=OSError("the queue is not there"))
    app = Askback("notes", settings=settings_for(tmp_path), extensions=[Recording("first", log), broken])
    with pytest.raises(ConfigurationError, match="'broken' could not start") as refused:
        async with app.running():
            pytest.fail("the app started")
    assert isinstance(refused.value.__cause__, OSError)
    assert log == ["start first", "close first"]


async def test_an_askback_error_from_a_start_is_raised_as_it_is(tmp_path: Path) -> None:
    log: list[str] = []
    refusing = Recording("refusing", log, fail=ConfigurationError("set ASKBACK_SOMETHING"))
    app = Askback("notes", settings=settings_for(tmp_path), extensions=[refusing])
    with pytest.raises(ConfigurationError, match=r"^set ASKBACK_SOMETHING$"):
        await app.store()
    assert log == []


def test_an_extensions_mount_is_served_by_build_app_and_the_app_opened_by_its_lifespan(tmp_path: Path) -> None:
    log: list[str] = []
    pages = Recording("pages", log, mounts=(Mounted("/pages", hello_pages(), auth=Open()),))
    app = Askback("notes", settings=settings_for(tmp_path), extensions=[pages])
    assert app.mounts == pages.mounts
    with TestClient(build_app(app), base_url="http://127.0.0.1") as http:
        assert log == ["start pages"]
        assert http.get("/pages/hello").json() == {"hello": "from the extension"}
        # Given again to build_app, as a mount made by hand would be: served once, not refused as a clash.
        assert (
            TestClient(build_app(app, mounts=pages.mounts), base_url="http://127.0.0.1").get("/pages/hello").status_code
            == 200
        )
    assert log == ["start pages", "close pages"]


def test_the_apps_own_mounts_come_with_its_construction(tmp_path: Path) -> None:
    own = Mounted("/own", hello_pages(), auth=Open())
    app = Askback("notes", settings=settings_for(tmp_path), mounts=[own])
    assert app.mounts == (own,)
    assert TestClient(build_app(app), base_url="http://127.0.0.1").get("/own/hello").json() == {
        "hello": "from the extension"
    }


async def test_flow_connect_reaches_the_port_an_extension_provides(tmp_path: Path) -> None:
    log: list[str] = []
    closed: list[str] = []
    notes = Recording("notes", log, ports=Ports(accounts=lambda principal: NotesPort(principal, closed)))
    app = Askback("notes", settings=settings_for(tmp_path), extensions=[notes])

    @app.tool()
    async def read_notes(flow: Flow) -> str:
        return str(await flow.connect("notes"))

    async with app.running(), Client(app.mcp) as client:
        result = await client.call_tool("read_notes", {})
    assert text(result) == "the notes account of nobody"
    assert closed == ["port"]


def test_two_extensions_providing_the_same_port_are_refused_when_the_app_is_made(tmp_path: Path) -> None:
    def port(principal: str | None) -> NotesPort:
        return NotesPort(principal, [])

    one, other = Recording("one", [], ports=Ports(accounts=port)), Recording("other", [], ports=Ports(accounts=port))
    with pytest.raises(ConfigurationError, match="'one' and 'other' both provide the 'accounts' port"):
        Askback("notes", settings=settings_for(tmp_path), extensions=[one, other])


async def test_an_extension_added_after_the_app_started_is_refused(tmp_path: Path) -> None:
    app = Askback("notes", settings=settings_for(tmp_path))
    async with app.running():
        with pytest.raises(ConfigurationError, match="came after the app 'notes' started"):
            app.extend(Recording("late", []))


def test_the_inline_extension_is_an_extension() -> None:
    # Structural: nothing to inherit. (mypy checks the assignment; this keeps the test honest at run time.)
    extension: Extension = Recording("typed", [])
    assert extension.name == "typed"


@pytest.mark.http
def test_importing_the_extension_vocabulary_loads_no_product() -> None:
    # Every product builds these values, so importing them must not pull in one product for another.
    code = "import sys, askback.extension; print('\\n'.join(sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert not [m for m in loaded if m.startswith(("askback.server", "askback.accounts", "askback.runtime"))]
    assert not {m.split(".")[0] for m in loaded} & {"mcp", "sqlalchemy", "httpx", "uvicorn"}


def test_nothing_outside_the_app_sets_an_attribute_on_it() -> None:
    # The smell this replaces: a product wiring itself in with `app.components = ...`, `app.accounts_port = ...`.
    for path in SRC.rglob("*.py"):
        if path == SRC / "server" / "app.py":
            continue
        source = path.read_text()
        for assigned in ("app.components =", "app.accounts_port =", "app.mounts.append", "app._"):
            assert assigned not in source, f"{path} has {assigned!r}"
