"""Every question says which server asks and for which call: the host the runtime reached and the name the server
gives itself (its `serverInfo`, kept in the store with the call: migration r002), the tool and its arguments
(shortened, escaped). Checked in the web inbox's list and question page (in process, through httpx), at the
terminal prompt, and in `askback inbox list` and `inbox show` (real processes), against the hostile server
(`tests/fixtures/hostile_server.py`, which names itself what the test says) and the project's own server.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from html import unescape
from pathlib import Path

import httpx
import pytest
from rich.console import Console
from starlette.requests import Request
from tests.fixtures.hostile_server import serving_hostile

from askback.runtime import Parked, Runtime, WebInbox
from askback.runtime.inbox import inbox_app
from askback.runtime.terminal import TerminalRenderer
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.http]

NAME = "ACME deploy tools"
# A name that is also an attack on the page and on the terminal.
HOSTILE_NAME = 'ACME <script>alert(1)</script> "tools" \u202egnp.exe'


@pytest.fixture(scope="module")
def hostile() -> Iterator[str]:
    with serving_hostile(free_port(), env={"HOSTILE_SERVER_NAME": NAME}) as url:
        yield url


@pytest.fixture(scope="module")
def hostile_named() -> Iterator[str]:
    with serving_hostile(free_port(), env={"HOSTILE_SERVER_NAME": HOSTILE_NAME}) as url:
        yield url


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    opened = await Runtime.open(url, renderers=[WebInbox()], settings=load_settings(database_url=url))
    try:
        yield opened
    finally:
        await opened.close()


def host_of(url: str) -> str:
    return url.split("//", 1)[1].split("/", 1)[0]


def inbox(runtime: Runtime) -> httpx.AsyncClient:
    def ada(_request: Request) -> str:
        return "ada"

    transport = httpx.ASGITransport(app=inbox_app(runtime, principal=ada))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765")


async def test_the_store_keeps_the_name_the_server_gave_with_the_call(hostile: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    async with await Runtime.open(database, renderers=[WebInbox()]) as first:
        parked = await first.call_tool(hostile, "plain_form", {"env": "prod"}, principal="ada")
    assert isinstance(parked, Parked)

    async with await Runtime.open(database, renderers=[WebInbox()]) as later:
        record = await later.calls.get(parked.call_id)
        [pending] = await later.inbox(principal="ada")

    assert record.server_name == NAME
    origin = pending.question.origin
    assert origin is not None
    assert (origin.server, origin.server_name, origin.host) == (hostile, NAME, host_of(hostile))
    assert origin.call() == 'tool plain_form {"env": "prod"}'


async def test_the_inbox_list_and_question_page_say_which_server_asks_for_which_tool(
    hostile: str, runtime: Runtime
) -> None:
    parked = await runtime.call_tool(hostile, "plain_form", {"env": "prod"}, principal="ada")
    assert isinstance(parked, Parked)

    async with inbox(runtime) as client:
        listing = unescape((await client.get("/")).text)
        page = unescape((await client.get(f"/q/{parked.call_id}/1/ok")).text)

    for html in (listing, page):
        assert f'Asked by the server at <strong class="server">{host_of(hostile)}</strong>' in html
        assert f'(it calls itself <q class="name">{NAME}</q>)' in html
        assert '<code class="call">tool plain_form {"env": "prod"}</code>' in html


async def test_a_hostile_server_name_and_long_arguments_are_escaped_and_shortened_on_the_page(
    hostile_named: str, runtime: Runtime
) -> None:
    arguments = {"note": "x" * 10_000, "html": "<img src=x onerror=alert(1)>"}
    parked = await runtime.call_tool(hostile_named, "plain_form", arguments, principal="ada")
    assert isinstance(parked, Parked)

    async with inbox(runtime) as client:
        html = (await client.get(f"/q/{parked.call_id}/1/ok")).text

    assert "<script>" not in html and "<img" not in html and "\u202e" not in html
    assert "ACME &lt;script&gt;alert(1)&lt;/script&gt; &quot;tools&quot; \\u202egnp.exe" in html
    call = html.split('<code class="call">', 1)[1].split("</code>", 1)[0]
    assert len(unescape(call)) <= 300 and unescape(call).endswith("…")


async def test_the_terminal_prompt_says_which_server_asks_for_which_tool(hostile_named: str, tmp_path: Path) -> None:
    console = Console(file=io.StringIO(), width=200)
    terminal = TerminalRenderer(console=console, read_line=lambda prompt: ":d")
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    async with await Runtime.open(database, renderers=[terminal]) as runtime:
        await runtime.call_tool(hostile_named, "plain_form", {"env": "prod"}, principal="ada")

    screen = console.file.getvalue()  # type: ignore[attr-defined]
    assert (
        f'asked by the server at {host_of(hostile_named)} (it calls itself "ACME <script>alert(1)</script> "tools" '
        '\\u202egnp.exe"), for the tool plain_form {"env": "prod"}'
    ) in screen
    assert "\u202e" not in screen


def askback(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", *args],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=120,
    )


def test_inbox_list_and_show_say_which_server_asks_for_which_tool(hostile: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    parked = askback("call", hostile, "plain_form", "--args", '{"env": "prod"}', "--park", "--database", database)
    assert parked.returncode == 0, parked.stderr
    call_id = parked.stdout.strip()
    asked_by = f'asked by the server at {host_of(hostile)} (it calls itself "{NAME}"), for the tool plain_form'

    listed = askback("inbox", "list", "--database", database)
    assert listed.returncode == 0, listed.stderr
    assert f'{asked_by} {{"env": "prod"}}' in listed.stdout

    shown = askback("inbox", "show", call_id, "--database", database)
    assert shown.returncode == 0, shown.stderr
    assert f'{call_id}: the tool plain_form {{"env": "prod"}}, for me' in shown.stdout
    assert f'server {hostile} (it calls itself "{NAME}")' in shown.stdout

    as_json = json.loads(askback("inbox", "list", "--json", "--database", database).stdout)
    assert [(q["server"], q["server_name"]) for q in as_json] == [(hostile, NAME)]
    assert json.loads(askback("inbox", "show", call_id, "--json", "--database", database).stdout)["server_name"] == NAME


def test_inbox_list_shortens_long_arguments_and_messages(hostile: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    arguments = json.dumps({"note": "x" * 100_000})
    parked = askback("call", hostile, "plain_form", "--args", arguments, "--park", "--database", database)
    assert parked.returncode == 0, parked.stderr

    listed = askback("inbox", "list", "--database", database)

    assert listed.returncode == 0, listed.stderr
    assert max(len(line) for line in listed.stdout.splitlines()) < 300
    assert '{"note": "xxx' in listed.stdout and "…" in listed.stdout


def test_the_projects_own_server_is_named_with_its_questions(tmp_path: Path) -> None:
    env = {
        "ASKBACK_STATE_KEYS": "asker-test-state-key-0123456789abcdefghijklmn",
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp_path / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp_path / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp_path / "page-done"),
        "RUNTIME_TEST_PAGE_URL": "https://pages.example.com/finish?order=7",
    }
    database = f"sqlite:///{tmp_path / 'agent.db'}"
    with serving("tests.fixtures.runtime_server:server", port=free_port(), workers=1, env=env, cwd=str(ROOT)) as url:
        parked = askback("call", url, "approve", "--args", '{"item": "web"}', "--park", "--database", database)
        assert parked.returncode == 0, parked.stderr
        listed = askback("inbox", "list", "--database", database)
    assert f'asked by the server at {host_of(url)} (it calls itself "runtime-test"), for the tool approve' in (
        listed.stdout
    )
