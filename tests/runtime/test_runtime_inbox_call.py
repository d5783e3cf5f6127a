"""A call's page in the web inbox and `askback inbox show`: who asks, said once, the call id kept on one line, and a
finished call's result.

The calls are recorded in a real SQLite store as the runtime records them after a server's first round
(`ParkedCalls.add`), with ids chosen by the test: an id is random, and only some of them hold a `-`, where a browser
may break a line. The pages are served by `inbox_app` (in process through httpx, or under uvicorn for Debian's
Chromium); `askback inbox show` runs as its own process.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request

from askback.runtime import Runtime, WebInbox
from askback.runtime.inbox import inbox_app
from askback.settings import load_settings
from infra import async_browser_context, async_chromium, serving_asgi

pytestmark = pytest.mark.anyio

SERVER = "https://tools.example.com/mcp"
# An id as `new_call_id` makes them ("call_" and 16 URL-safe characters), with the `-`s some of them hold.
HYPHENATED = "call_Xq3-vK9-pL2-mN7a"


def asking(key: str = "ok") -> dict[str, Any]:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "Approve"}}, "required": ["ok"]}
    question = {
        "method": "elicitation/create",
        "params": {"message": "Approve the expense?", "requestedSchema": schema},
    }
    return {"resultType": "input_required", "inputRequests": {key: question}, "requestState": "s1"}


def completed(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


async def record(runtime: Runtime, call_id: str, outcome: dict[str, Any], tool: str = "expenses") -> None:
    now = runtime.clock.now()
    await runtime.calls.add(
        call_id=call_id,
        run_id=None,
        principal="ada",
        server=SERVER,
        protocol="2026-07-28",
        method="tools/call",
        target=tool,
        arguments={"month": "May"},
        outcome=outcome,
        sent=None,
        deadline=now + 3600,
        now=now,
    )


@pytest.fixture
async def runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    opened = await Runtime.open(url, renderers=[WebInbox()], settings=load_settings(database_url=url))
    try:
        yield opened
    finally:
        await opened.close()


def ada(request: Request) -> str | None:
    return "ada"


class Text(HTMLParser):
    def __init__(self, html: str) -> None:
        super().__init__()
        self.chunks: list[str] = []
        self.feed(html)

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)

    @property
    def text(self) -> str:
        return " ".join("".join(self.chunks).split())


async def page_text(runtime: Runtime, path: str) -> str:
    transport = httpx.ASGITransport(app=inbox_app(runtime, principal=ada))
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as client:
        reply = await client.get(path)
    assert reply.status_code == 200, reply.text
    return Text(reply.text).text


# --- who asks -------------------------------------------------------------------------------------------------------


async def test_the_call_page_says_who_asks_once_with_a_capital_only_where_a_sentence_opens(runtime: Runtime) -> None:
    await record(runtime, "call_waiting0000000", asking())
    await record(runtime, "call_done000000000", completed("Approved 3 expenses."))

    waiting = await page_text(runtime, "/calls/call_waiting0000000")
    done = await page_text(runtime, "/calls/call_done000000000")

    assert "The tool expenses asks (round 1):" in waiting
    assert f"Call call_waiting0000000: the tool expenses on {SERVER}." in waiting
    assert "The tool expenses answered: Approved 3 expenses." in done
    assert f"Call call_done000000000: the tool expenses on {SERVER}." in done
    for text in (waiting, done):
        assert not re.search(r"\bthe the\b", text, re.IGNORECASE), text


async def test_a_tool_named_with_a_capital_or_not_keeps_its_name_as_written(runtime: Runtime) -> None:
    await record(runtime, "call_named00000000", asking(), tool="sendInvoice")

    text = await page_text(runtime, "/calls/call_named00000000")

    assert "The tool sendInvoice asks (round 1):" in text


# --- the call id on one line ----------------------------------------------------------------------------------------

# The lines a piece of text `id` takes in the page: the tops of the boxes a range over it has (one per line).
_LINES_OF = """
(id) => {
  const walker = document.createTreeWalker(document.querySelector("main"), NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode;
    const at = node.data.indexOf(id);
    if (at < 0) continue;
    const range = document.createRange();
    range.setStart(node, at);
    range.setEnd(node, at + id.length);
    const tops = new Set([...range.getClientRects()].filter((r) => r.width > 0).map((r) => Math.round(r.top)));
    return tops.size;
  }
  return 0;
}
"""


@pytest.mark.http
async def test_a_call_id_stays_on_one_line_on_its_call_and_question_pages_at_every_width(
    runtime: Runtime, listener: socket.socket
) -> None:
    await record(runtime, HYPHENATED, asking())
    pages = [f"/calls/{HYPHENATED}", f"/q/{HYPHENATED}/1/ok"]
    wrapped: list[tuple[str, int, int]] = []
    async with serving_asgi(inbox_app(runtime, principal=ada), listener) as base, async_chromium() as browser:
        page = await (await async_browser_context(browser)).new_page()
        for path in pages:
            await page.goto(f"{base}{path}")
            for width in range(240, 760, 4):
                await page.set_viewport_size({"width": width, "height": 800})
                lines = await page.evaluate(_LINES_OF, HYPHENATED)
                assert lines > 0, f"{HYPHENATED} is not on {path}"
                if lines != 1:
                    wrapped.append((path, width, lines))
    assert wrapped == []


# --- askback inbox show ---------------------------------------------------------------------------------------------


def show(database: str, call_id: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", "inbox", "show", call_id, "--database", database],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.http
async def test_inbox_show_prints_a_finished_calls_result_escaped_and_a_long_one_cut_saying_so(
    runtime: Runtime, tmp_path: Path
) -> None:
    await record(
        runtime, "call_short00000000", completed("Approved 3 expenses.\nTotal: 120 EUR \x1b]52;c;ZXZpbA==\x07")
    )
    await record(runtime, "call_failed0000000", completed("No such month.", error=True))
    long = "".join(f"line {n:05d} " + "x" * 60 + "\n" for n in range(200))
    await record(runtime, "call_long000000000", completed(long))
    database = f"sqlite:///{tmp_path / 'agent.db'}"

    short, failed, cut = (show(database, c) for c in ("call_short00000000", "call_failed0000000", "call_long000000000"))

    assert short.returncode == 0, short.stderr
    assert "status completed, round 1" in short.stdout
    assert "result:\n  Approved 3 expenses.\n  Total: 120 EUR \\x1b]52;c;ZXZpbA==\\x07\n" in short.stdout
    assert "\x1b" not in short.stdout and "\x07" not in short.stdout
    assert "result (the tool reported an error):\n  No such month.\n" in failed.stdout
    assert "line 00000" in cut.stdout and "line 00199" not in cut.stdout
    assert (
        f"  (cut: the first 1999 of its {len(long)} characters; `askback inbox show call_long000000000 --json` has it "
        "whole)"
    ) in cut.stdout
    assert len(cut.stdout) < 3000
