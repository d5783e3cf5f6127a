"""`askback inbox list|show|answer|decline|cancel|resume` on calls parked against a real server: what each prints,
what each records, and the exit status (0 completed, 3 still parked, 4 an unknown call)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from askback.runtime import Parked, Runtime, WebInbox
from askback.testing import free_port, serving
from infra import ROOT

pytestmark = pytest.mark.http


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("cli-site")
    env = {
        "ASKBACK_STATE_KEYS": "cli-test-state-key-0123456789abcdefghijklmn",
        "ASKBACK_DATABASE_URL": f"sqlite:///{tmp / 'server.db'}",
        "RUNTIME_TEST_COUNTS": str(tmp / "counts.txt"),
        "RUNTIME_TEST_PAGE_DONE": str(tmp / "page-done"),
        "RUNTIME_TEST_PAGE_URL": "https://pages.example.com/finish?order=7",
    }
    with serving("tests.fixtures.runtime_server:server", port=free_port(), workers=1, env=env, cwd=str(ROOT)) as found:
        yield found


def park(database: str, url: str, tool: str, arguments: dict[str, str], principal: str = "ada") -> Parked:
    async def run() -> Parked:
        async with await Runtime.open(database, renderers=[WebInbox()]) as rt:
            out = await rt.call_tool(url, tool, arguments, principal=principal)
            assert isinstance(out, Parked)
            return out

    return anyio.run(run)


def askback(database: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    return subprocess.run(
        [sys.executable, "-m", "askback", *args, "--database", database],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_inbox_list_and_show_say_who_answers_what_and_where_a_link_goes(url: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'rt.db'}"
    approve = park(db, url, "approve", {"item": "listed"})
    link = park(db, url, "open_page", {}, principal="bob")

    listed = askback(db, "inbox", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["call_id"]: row for row in json.loads(listed.stdout)}
    assert rows[approve.call_id]["key"] == "ok" and rows[approve.call_id]["principal"] == "ada"
    assert rows[approve.call_id]["target"] == "approve" and rows[approve.call_id]["message"] == "Approve listed?"
    assert rows[link.call_id]["mode"] == "url" and rows[link.call_id]["host"] == "pages.example.com"

    only_bob = askback(db, "inbox", "list", "--user", "bob")
    assert only_bob.returncode == 0 and link.call_id in only_bob.stdout and approve.call_id not in only_bob.stdout
    assert "-> pages.example.com" in only_bob.stdout

    shown = askback(db, "inbox", "show", approve.call_id, "--json")
    assert shown.returncode == 0, shown.stderr
    call = json.loads(shown.stdout)
    assert (call["status"], call["round"], call["target"], call["arguments"]) == (
        "parked",
        1,
        "approve",
        {"item": "listed"},
    )
    assert [q["key"] for q in call["questions"]] == ["ok"] and call["answers"] == {}

    missing = askback(db, "inbox", "show", "call_nope")
    assert missing.returncode == 4 and missing.stderr.startswith("error: no call 'call_nope'")


def test_answer_with_json_then_resume_completes_the_call(url: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'rt.db'}"
    parked = park(db, url, "approve", {"item": "by-json"})

    bad = askback(db, "inbox", "answer", parked.call_id, "ok", "--json", '{"ok": "sure"}')
    assert bad.returncode == 2 and "Approve: must be true or false" in bad.stderr

    answered = askback(db, "inbox", "answer", parked.call_id, "ok", "--json", '{"ok": true}')
    assert answered.returncode == 0 and "0 question(s) of round 1 still waiting" in answered.stdout

    again = askback(db, "inbox", "answer", parked.call_id, "ok", "--json", '{"ok": false}')
    assert again.returncode == 2 and "no unanswered question 'ok'" in again.stderr

    done = askback(db, "inbox", "resume", parked.call_id)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "by-json: approved"


def test_decline_and_cancel_record_those_answers_and_resume_returns_the_servers_reply(url: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'rt.db'}"
    declined = park(db, url, "approve", {"item": "declined"})
    cancelled = park(db, url, "approve", {"item": "cancelled"})

    first = askback(db, "inbox", "decline", declined.call_id, "--resume")
    second = askback(db, "inbox", "cancel", cancelled.call_id, "--resume", "--user", "carol")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.strip() and second.stdout.strip()
    for call_id, action in [(declined.call_id, "decline"), (cancelled.call_id, "cancel")]:
        shown = json.loads(askback(db, "inbox", "show", call_id, "--json").stdout)
        assert shown["status"] == "completed"
        assert shown["rounds"][0]["sent"] == {"ok": {"action": action}}
    assert answered_by(db, declined.call_id) == "ada" and answered_by(db, cancelled.call_id) == "carol"


def answered_by(database: str, call_id: str) -> str | None:
    """Who the store recorded as answering round 1's question `ok`."""

    async def run() -> str | None:
        from sqlalchemy import text

        async with await Runtime.open(database) as rt, rt.store.database.engine.connect() as conn:
            found = await conn.scalar(
                text("SELECT answered_by FROM askback_runtime_answers WHERE call_id = :c AND key = 'ok'"),
                {"c": call_id},
            )
            return None if found is None else str(found)

    return anyio.run(run)


def test_resume_of_a_call_still_waiting_exits_3_and_says_what_it_waits_for(url: str, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'rt.db'}"
    parked = park(db, url, "approve", {"item": "waiting"})
    waiting = askback(db, "inbox", "resume", parked.call_id)
    assert waiting.returncode == 3
    assert f"{parked.call_id}: parked on round 1, waiting for ok" in waiting.stdout
    nothing = askback(db, "inbox", "resume", "--due")
    assert nothing.returncode == 0 and nothing.stdout.strip() == "no call can be resumed now"
