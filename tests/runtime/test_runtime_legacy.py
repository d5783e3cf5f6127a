"""The agent runtime against a server on the 2025-11-25 handshake: pushed questions go through the same renderers;
with no interactive renderer they wait in this process's memory only (the connection must stay open), and are
cancelled at their deadline."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest

from askback.clock import FrozenClock
from askback.runtime import Answer, Callback, Completed, ParkedQuestion, Runtime, WebInbox
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import ROOT

pytestmark = [pytest.mark.anyio, pytest.mark.http]


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("legacy-site")
    env = {
        "ASKBACK_STATE_KEYS": "legacy-test-state-key-0123456789abcdefghij",
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": "https://pages.example.com/finish",
    }
    with serving("tests.fixtures.runtime_server:server", port=free_port(), workers=1, env=env, cwd=str(ROOT)) as found:
        yield found


async def test_a_pushed_question_goes_through_an_interactive_renderer(url: str, tmp_path: Path) -> None:
    asked: list[ParkedQuestion] = []

    async def answer(question: ParkedQuestion) -> Answer:
        asked.append(question)
        return Answer("accept", {"ok": True})

    async with await Runtime.open(f"sqlite:///{tmp_path / 'rt.db'}", renderers=[Callback(answer)], era="legacy") as rt:
        done = await rt.call_tool(url, "approve", {"item": "pushed"}, principal="ada")
        assert await rt.calls.listing(status=("parked", "completed")) == []  # nothing durable: it cannot resume
    assert isinstance(done, Completed) and done.text == "pushed: approved"
    assert [(q.mode, q.message) for q in asked] == [("form", "Approve pushed?")]


@asynccontextmanager
async def held_call(url: str, database: Path, item: str) -> AsyncIterator[tuple[Runtime, FrozenClock, list[Completed]]]:
    """A runtime with only the inbox calling `approve(item)` on the 2025-11-25 handshake, inside the block once the
    pushed question waits in memory (on the runtime's frozen clock); the call's outcome is in the list after it."""
    clock = FrozenClock(1_900_000_000.0)
    settings = load_settings(answer_wait=600)
    async with await Runtime.open(
        f"sqlite:///{database}", renderers=[WebInbox()], era="legacy", clock=clock, settings=settings
    ) as rt:
        outcome: list[Completed] = []

        async def call() -> None:
            result = await rt.call_tool(url, "approve", {"item": item}, principal="ada")
            assert isinstance(result, Completed)
            outcome.append(result)

        async with anyio.create_task_group() as tg:
            tg.start_soon(call)
            with anyio.fail_after(30):
                await clock.until_sleeping()
            yield rt, clock, outcome


async def test_with_only_the_inbox_a_pushed_question_waits_in_memory_until_answered_here(
    url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with held_call(url, tmp_path / "rt.db", "held") as (rt, _, outcome):
        [held] = await rt.pending(principal="ada")
        assert held.call_id.startswith("mem_") and held.message == "Approve held?"
        assert await rt.pending(principal="bob") == []
        await rt.answer(held.call_id, held.key, Answer("accept", {"ok": False}))
    assert outcome[0].text == "held: rejected"
    assert rt.held == {}
    said = [r for r in caplog.records if r.name == "askback.runtime" and r.levelname == "WARNING"]
    assert len(said) == 1 and "held in this process's memory only" in said[0].getMessage()


async def test_a_pushed_question_nobody_answers_is_cancelled_at_its_deadline(url: str, tmp_path: Path) -> None:
    async with held_call(url, tmp_path / "rt.db", "late") as (_, clock, outcome):
        clock.advance(600)
    async with await Runtime.open(
        f"sqlite:///{tmp_path / 'rt2.db'}", renderers=[Callback(_cancel)], era="legacy"
    ) as rt:
        by_hand = await rt.call_tool(url, "approve", {"item": "late"}, principal="ada")
    assert isinstance(by_hand, Completed)
    assert outcome[0].text == by_hand.text and by_hand.text != "late: rejected"


async def _cancel(question: ParkedQuestion) -> Answer:
    return Answer("cancel")
