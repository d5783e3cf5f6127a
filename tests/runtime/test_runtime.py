"""The agent runtime against a real askback server with three instances: calls park in the store and resume in any
process; deadlines cancel what nobody answered; answers reach their own call; a round is sent once however many
processes resume it; the runtime declares only what its renderers show and never fetches a link."""

from __future__ import annotations

import http.server
import json
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from askback.clock import FrozenClock
from askback.errors import (
    CallError,
    CallStateError,
    InvalidAnswerError,
    ServerRefusedError,
    UnknownCallError,
    UnsafeLinkError,
)
from askback.runtime import (
    AccountActive,
    Answer,
    Callback,
    Claimed,
    Completed,
    Parked,
    ParkedQuestion,
    Runtime,
    WebInbox,
)
from askback.settings import load_settings
from askback.testing import free_port, serving
from infra import ROOT, QuietHandler, serving_http

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SERVER = "tests.fixtures.runtime_server:server"
KEYS = "runtime-test-state-key-0123456789abcdefghij"


class _Page(QuietHandler):
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.answer(200, b"the page", "text/plain")


@dataclass
class Site:
    url: str
    counts: Path
    done: Path
    page_url: str

    def runs(self, line: str) -> int:
        """How many requests ran the handler that writes `line` (every instance appends to one file)."""
        if not self.counts.exists():
            return 0
        return self.counts.read_text().splitlines().count(line)


@pytest.fixture(scope="module")
def page() -> Iterator[str]:
    """A page on loopback that counts every request it gets."""
    with serving_http(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)) as base:
        yield f"{base}/finish?order=7"


def _site(tmp: Path, page: str, *, workers: int) -> Iterator[Site]:
    env = {
        "ASKBACK_STATE_KEYS": KEYS,
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": page,
    }
    with serving(SERVER, port=free_port(), workers=workers, env=env, cwd=str(ROOT)) as url:
        yield Site(url, tmp / "counts.txt", tmp / "page-done", page)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory, page: str) -> Iterator[Site]:
    """The fixture server with three instances sharing one SQLite database and one state key."""
    yield from _site(tmp_path_factory.mktemp("runtime-site"), page, workers=3)


@pytest.fixture
def clock() -> FrozenClock:
    return FrozenClock(1_900_000_000.0)


@pytest.fixture
async def runtime(tmp_path: Path, clock: FrozenClock) -> AsyncIterator[Runtime]:
    rt = await Runtime.open(
        f"sqlite:///{tmp_path / 'runtime.db'}",
        renderers=[WebInbox()],
        clock=clock,
        settings=load_settings(development=True, answer_wait=3600),
    )
    try:
        yield rt
    finally:
        await rt.close()


def _item(request: pytest.FixtureRequest) -> str:
    return request.node.name.replace("test_", "")[:40]


async def test_a_call_parked_by_a_process_that_exited_is_answered_and_resumed_by_another(
    site: Site, runtime: Runtime, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    item = _item(request)
    script = textwrap.dedent(
        f"""
        import anyio
        from askback.runtime import Runtime, WebInbox

        async def main():
            rt = await Runtime.open({f"sqlite:///{tmp_path / 'runtime.db'}"!r}, renderers=[WebInbox()])
            out = await rt.call_tool({site.url!r}, "approve", {{"item": {item!r}}}, principal="ada", run_id="run-1")
            print(out.call_id)
            await rt.close()

        anyio.run(main)
        """
    )
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "-c", script], check=True)
    call_id = done.stdout.decode().strip()

    [question] = await runtime.pending(principal="ada")
    assert (question.call_id, question.key, question.mode, question.message) == (
        call_id,
        "ok",
        "form",
        f"Approve {item}?",
    )
    record = await runtime.calls.get(call_id)
    assert (record.status, record.round, record.run_id, record.method, record.target) == (
        "parked", 1, "run-1", "tools/call", "approve",
    )  # fmt: skip
    assert record.pending is not None and record.pending["requestState"].startswith("v1.")

    assert await runtime.answer(call_id, "ok", Answer("accept", {"ok": True}), by="ada") == 0
    outcome = await runtime.resume(call_id)

    assert isinstance(outcome, Completed) and outcome.text == f"{item}: approved"
    assert site.runs(f"approve {item}") == 2
    rounds = await runtime.calls.rounds(call_id)
    assert [r["sent"] for r in rounds] == [{"ok": {"action": "accept", "content": {"ok": True}}}]
    # A finished call answers a resume with its result again, sending nothing.
    again = await runtime.resume(call_id)
    assert isinstance(again, Completed) and again.text == outcome.text
    assert site.runs(f"approve {item}") == 2


async def test_an_unanswered_question_is_cancelled_at_its_deadline_and_the_servers_message_is_returned(
    site: Site, runtime: Runtime, clock: FrozenClock, request: pytest.FixtureRequest
) -> None:
    item = _item(request)
    parked = await runtime.call_tool(site.url, "approve", {"item": item}, principal="ada")
    assert isinstance(parked, Parked) and parked.deadline == clock.now() + 3600

    clock.advance(3599)
    early = await runtime.resume(parked.call_id)
    assert isinstance(early, Parked) and early.missing == ("ok",)
    assert await runtime.resume_due() == []
    assert site.runs(f"approve {item}") == 1

    clock.advance(1)
    [late] = await runtime.resume_due()

    # What the server says to a person who cancels, asked of the same tool by hand.
    by_hand = await runtime.call_tool(site.url, "approve", {"item": item}, principal="ada")
    assert isinstance(by_hand, Parked)
    await runtime.answer(by_hand.call_id, "ok", Answer("cancel"))
    cancelled = await runtime.resume(by_hand.call_id)
    assert isinstance(late, Completed) and isinstance(cancelled, Completed)
    assert late.text == cancelled.text and late.text
    assert [r["sent"] for r in await runtime.calls.rounds(parked.call_id)] == [{"ok": {"action": "cancel"}}]


async def test_parallel_calls_asking_under_the_same_key_each_get_their_own_answer(site: Site, runtime: Runtime) -> None:
    items = ["parallel-a", "parallel-b", "parallel-c", "parallel-d"]
    parked: dict[str, Parked] = {}

    async def start(item: str) -> None:
        out = await runtime.call_tool(site.url, "approve", {"item": item}, principal="ada")
        assert isinstance(out, Parked)
        parked[item] = out

    async with anyio.create_task_group() as tg:
        for item in items:
            tg.start_soon(start, item)
    assert {p.questions[0].key for p in parked.values()} == {"ok"}

    wanted = {"parallel-a": True, "parallel-b": False, "parallel-c": False, "parallel-d": True}
    for item, yes in wanted.items():
        await runtime.answer(parked[item].call_id, "ok", Answer("accept", {"ok": yes}))
    results: dict[str, str] = {}

    async def finish(item: str) -> None:
        out = await runtime.resume(parked[item].call_id)
        assert isinstance(out, Completed)
        results[item] = out.text

    async with anyio.create_task_group() as tg:
        for item in items:
            tg.start_soon(finish, item)
    assert results == {item: f"{item}: {'approved' if yes else 'rejected'}" for item, yes in wanted.items()}


async def test_two_runtimes_resuming_the_same_round_at_once_send_it_once(
    site: Site, runtime: Runtime, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    item = _item(request)
    parked = await runtime.call_tool(site.url, "approve", {"item": item}, principal="ada")
    assert isinstance(parked, Parked)
    await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": True}))
    others = [await Runtime.open(f"sqlite:///{tmp_path / 'runtime.db'}", renderers=[WebInbox()]) for _ in range(3)]
    outcomes: list[Any] = []
    try:

        async def resume(rt: Runtime) -> None:
            outcomes.append(await rt.resume(parked.call_id))

        async with anyio.create_task_group() as tg:
            for rt in [runtime, *others]:
                tg.start_soon(resume, rt)
    finally:
        for rt in others:
            await rt.close()

    completed = [o for o in outcomes if isinstance(o, Completed)]
    assert len(completed) + len([o for o in outcomes if isinstance(o, Claimed)]) == 4
    assert completed and all(o.text == f"{item}: approved" for o in completed)
    # One first round and one resume reached the server, whoever won.
    assert site.runs(f"approve {item}") == 2
    assert len([r for r in await runtime.calls.rounds(parked.call_id) if r["sent"] is not None]) == 1


@pytest.mark.parametrize(
    ("modes", "tool", "needs"),
    [
        pytest.param({"form"}, "open_page", "url", id="form only, asked a link"),
        pytest.param({"url"}, "approve", "form", id="url only, asked a form"),
        pytest.param(set(), "approve", "form", id="no renderer, asked a form"),
    ],
)
async def test_a_runtime_declares_only_the_modes_its_renderers_show_and_surfaces_the_servers_refusal(
    site: Site, tmp_path: Path, modes: set[str], tool: str, needs: str
) -> None:
    renderers = [WebInbox(modes=frozenset(modes))] if modes else []  # type: ignore[arg-type]
    async with await Runtime.open(f"sqlite:///{tmp_path / 'rt.db'}", renderers=renderers) as rt:
        assert rt.modes == frozenset(modes)
        with pytest.raises(ServerRefusedError) as caught:
            await rt.call_tool(site.url, tool, {"item": "x"} if tool == "approve" else {}, principal="ada")
        assert caught.value.server_code == -32021
        assert needs in json.dumps(caught.value.data)
        assert "does not declare" in str(caught.value)
        assert await rt.pending() == [] and await rt.calls.listing() == []


async def test_a_form_only_runtime_parks_the_form_and_reports_the_link_round_it_cannot_show(
    site: Site, tmp_path: Path
) -> None:
    async with await Runtime.open(
        f"sqlite:///{tmp_path / 'rt.db'}", renderers=[WebInbox(modes=frozenset({"form"}))]
    ) as rt:
        parked = await rt.call_tool(site.url, "two_steps", {}, principal="ada")
        assert isinstance(parked, Parked) and [q.mode for q in parked.questions] == ["form"]
        await rt.answer(parked.call_id, "ok", Answer("accept", {"ok": True}))
        with pytest.raises(ServerRefusedError, match="url"):
            await rt.resume(parked.call_id)
        record = await rt.calls.get(parked.call_id)
        assert record.status == "failed" and record.error is not None and "-32021" in record.error


async def test_a_url_question_shows_its_host_and_the_runtime_never_fetches_the_link(
    site: Site, runtime: Runtime
) -> None:
    before = _Page.hits
    parked = await runtime.call_tool(site.url, "open_page", {}, principal="ada")
    assert isinstance(parked, Parked)
    [question] = parked.questions
    assert (question.mode, question.url, question.host) == ("url", site.page_url, "127.0.0.1")
    assert runtime.link_host(question) == "127.0.0.1"

    await runtime.answer(parked.call_id, "page", Answer("accept"))
    again = await runtime.resume(parked.call_id)
    assert isinstance(again, Parked) and again.round == 2  # accepting a link proves nothing: asked again
    site.done.touch()
    try:
        await runtime.answer(again.call_id, "page", Answer("accept"))
        done = await runtime.resume(again.call_id)
    finally:
        site.done.unlink()
    assert isinstance(done, Completed) and done.text == "The page is done."
    assert _Page.hits == before


def test_links_are_shown_only_when_https_or_loopback_http_in_development() -> None:
    from askback.runtime import safe_link

    assert safe_link("https://accounts.example.com/connect?x=1") == "accounts.example.com"
    assert safe_link("http://127.0.0.1:8000/x", development=True) == "127.0.0.1"
    for url, development in [
        ("http://127.0.0.1:8000/x", False),
        ("http://accounts.example.com/connect", True),
        ("javascript:alert(1)", True),
        ("https://user:pw@accounts.example.com/", False),
        ("https://", False),
    ]:
        with pytest.raises(UnsafeLinkError):
            safe_link(url, development=development)


async def test_answers_are_checked_against_the_question_before_they_are_kept(site: Site, runtime: Runtime) -> None:
    parked = await runtime.call_tool(site.url, "approve", {"item": "checked"}, principal="ada")
    assert isinstance(parked, Parked)
    with pytest.raises(InvalidAnswerError, match="Approve: must be true or false"):
        await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": "yes"}))
    with pytest.raises(InvalidAnswerError, match="Approve: required"):
        await runtime.answer(parked.call_id, "ok", Answer("accept", {}))
    with pytest.raises(InvalidAnswerError, match="does not ask for it"):
        await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": True, "extra": 1}))
    with pytest.raises(CallStateError, match="asks no question 'nope'"):
        await runtime.answer(parked.call_id, "nope", Answer("accept", {"ok": True}))
    with pytest.raises(CallStateError, match="round 1, not 2"):
        await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": True}), round_=2)
    with pytest.raises(UnknownCallError):
        await runtime.answer("call_missing", "ok", Answer("cancel"))
    await runtime.answer(parked.call_id, "ok", Answer("decline"))
    with pytest.raises(CallStateError, match="already answered"):
        await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": True}))
    assert (await runtime.calls.answers(parked.call_id, 1))["ok"] == Answer("decline")


async def test_interactive_renderers_answer_every_round_while_the_call_waits(site: Site, tmp_path: Path) -> None:
    asked: list[ParkedQuestion] = []

    async def answer(question: ParkedQuestion) -> Answer:
        asked.append(question)
        if question.mode == "url":
            site.done.touch()
            return Answer("accept")
        return Answer("accept", {"ok": True})

    settings = load_settings(development=True)
    try:
        async with await Runtime.open(
            f"sqlite:///{tmp_path / 'rt.db'}", renderers=[Callback(answer)], settings=settings
        ) as rt:
            done = await rt.call_tool(site.url, "two_steps", {}, principal="ada")
    finally:
        site.done.unlink(missing_ok=True)
    assert isinstance(done, Completed) and done.text == "Both steps done." and done.rounds == 3
    assert [(q.key, q.round) for q in asked] == [("ok", 1), ("page", 2)]


async def test_a_call_past_the_round_cap_fails_with_the_cap_named(site: Site, tmp_path: Path) -> None:
    settings = load_settings(call_max_rounds=1)
    async with await Runtime.open(f"sqlite:///{tmp_path / 'rt.db'}", renderers=[WebInbox()], settings=settings) as rt:
        parked = await rt.call_tool(site.url, "two_steps", {}, principal="ada")
        assert isinstance(parked, Parked)
        await rt.answer(parked.call_id, "ok", Answer("accept", {"ok": True}))
        with pytest.raises(ServerRefusedError, match="ASKBACK_CALL_MAX_ROUNDS"):
            await rt.resume(parked.call_id)
        assert (await rt.calls.get(parked.call_id)).status == "failed"


async def test_an_accounts_active_event_resumes_the_call_waiting_to_connect_that_account(
    site: Site, runtime: Runtime
) -> None:
    parked = await runtime.call_tool(site.url, "connect_mail", {}, principal="ada")
    assert isinstance(parked, Parked) and parked.questions[0].key == "connect.mail"
    seen: list[AccountActive] = []

    async def hook(event: AccountActive) -> None:
        seen.append(event)

    runtime.on_account_active(hook)
    assert await runtime.account_active(AccountActive("bob", "mail")) == []
    site.done.touch()
    try:
        [outcome] = await runtime.account_active(AccountActive("ada", "mail"))
    finally:
        site.done.unlink()
    assert isinstance(outcome, Completed) and outcome.text == "Mail is connected."
    assert seen == [AccountActive("bob", "mail"), AccountActive("ada", "mail")]


async def test_a_server_that_cannot_be_reached_leaves_the_call_parked(
    tmp_path: Path, page: str, runtime: Runtime
) -> None:
    with serving(SERVER, port=free_port(), workers=1, env=_env(tmp_path, page), cwd=str(ROOT)) as url:
        parked = await runtime.call_tool(url, "approve", {"item": "unreachable"}, principal="ada")
    assert isinstance(parked, Parked)
    await runtime.answer(parked.call_id, "ok", Answer("accept", {"ok": True}))
    with pytest.raises(CallError, match="could not reach"):
        await runtime.resume(parked.call_id)
    record = await runtime.calls.get(parked.call_id)
    assert (record.status, record.round) == ("parked", 1)
    assert (await runtime.calls.answers(parked.call_id, 1))["ok"] == Answer("accept", {"ok": True})


def _env(tmp: Path, page: str) -> dict[str, str]:
    return {
        "ASKBACK_STATE_KEYS": KEYS,
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": page,
    }


async def test_a_call_parked_in_one_runtime_resumes_in_another_on_either_database(
    site: Site, any_database: str, request: pytest.FixtureRequest
) -> None:
    item = f"{_item(request)}-{any_database.split(':')[0]}"
    async with await Runtime.open(any_database, migrate=True, renderers=[WebInbox()]) as first:
        parked = await first.call_tool(site.url, "approve", {"item": item}, principal="ada")
        assert isinstance(parked, Parked)
    async with await Runtime.open(any_database, renderers=[WebInbox()]) as second:
        [question] = await second.pending(principal="ada")
        await second.answer(question.call_id, question.key, Answer("accept", {"ok": True}))
        done = await second.resume(parked.call_id)
    assert isinstance(done, Completed) and done.text == f"{item}: approved"
