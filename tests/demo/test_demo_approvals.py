"""`askback demo` walks an approval after its other flows: bob asks to drop billing-legacy and gets the link to his
request's status page; the approvals' pages tell him he cannot approve his own request and offer him no form; erin,
in sre, signs in on the same pages and approves with a reason; the retry drops the database, the final round sent
again drops nothing more, and `askback audit` names bob as the requester and erin as the approver. With
`--interactive`, the person opens the request's page themselves (here the demo's own scripted browser, signed in as
erin) and presses Enter."""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from pathlib import Path

import pytest
from tests.demo.test_demo_interactive import Terminal

from askback.demo.approval_walk import REASON, ApproverBrowser
from askback.demo.person import connect_account
from askback.testing import free_port
from infra import run_askback

pytestmark = pytest.mark.http


def drops(database: Path) -> list[tuple[str, str, str]]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return [tuple(row) for row in db.execute("SELECT name, by, approved_by FROM demo_drops")]


def test_the_demo_drops_the_database_once_after_erin_approves_bobs_request(tmp_path: Path) -> None:
    demo = run_askback("demo", "--workers", "2", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    start = out.index("bob calls drop_database {'name': 'billing-legacy'} (someone else in sre must approve)")
    assert out.index("erin reaches summarize_inbox through the META exposure") < start  # after the existing flows
    steps = [
        "round 1: input_required",
        "asks askback.approval.drop_database: Approval needed: Drop a database. It needs 1 more approval before",
        "link http://127.0.0.1:",
        "bob opens it and signs in on the approvals' pages: Your request is still waiting for approval.",
        "bob opens the request to approve it himself: You cannot approve your own request: someone else allowed to "
        "must decide it.",
        f"erin (sre) signs in on the same pages, opens the request and approves it ({REASON}): You approved the "
        "request: it has every approval it needs, and the call goes on.",
        "answers accept",
        "round 2: complete 'Dropped the database billing-legacy, approved by erin.'",
        "the final round sent again: 'Dropped the database billing-legacy, approved by erin.'",
        "databases left: web-frontend; dropped: billing-legacy by bob, approved by erin",
        "askback audit --database sqlite:///askback-demo.db --tool drop_database",
    ]
    found = [out.find(step, start) for step in steps]
    assert -1 not in found and found == sorted(found), (dict(zip(steps, found, strict=True)), out[start:])
    assert re.search(r"link http://127\.0\.0\.1:\d+/approvals/requests/\S+/status", out[start:]), out[start:]
    assert "(a form!)" not in out
    assert drops(tmp_path / "askback-demo.db") == [("billing-legacy", "bob", "erin")]

    audit = run_askback(
        "audit", "--database", "sqlite:///askback-demo.db", "--tool", "drop_database", "--json", cwd=tmp_path
    )
    assert audit.returncode == 0, audit.stderr
    rows = [json.loads(line) for line in audit.stdout.splitlines()]
    by_event = {row["event"]: row for row in rows}
    assert by_event["approval.requested"]["principal"] == "bob"
    assert by_event["approval.approved"]["principal"] == "erin"
    assert by_event["approval.approved"]["content"]["requester"] == "bob"
    assert by_event["approval.approved"]["content"]["method"] == "development"
    assert by_event["approval.approved"]["detail"] == REASON
    assert [row["event"] for row in rows].count("approval.consumed") == 1
    table = run_askback("audit", "--database", "sqlite:///askback-demo.db", "--tool", "drop_database", cwd=tmp_path)
    lines = table.stdout.splitlines()
    assert any("approval.requested" in line and "bob" in line.split() for line in lines), table.stdout
    assert any("approval.approved" in line and "erin" in line.split() for line in lines), table.stdout


def test_the_interactive_demo_gives_the_request_page_to_open_as_erin_then_drops_once(tmp_path: Path) -> None:
    port = free_port()
    demo = Terminal("demo", "--interactive", "--workers", "1", "--port", str(port), cwd=tmp_path)
    try:
        demo.wait_for("(empty to decline)")
        demo.type("\r")  # decline the deletion
        demo.wait_for("[dev/staging/production] (empty to decline)")
        demo.type("staging\r")
        for user in ("carol", "erin"):
            demo.wait_for("Press Enter once the page says Connected (n to decline): ")
            *_, link = re.findall(r"link (http://127\.0\.0\.1:\d+/accounts/start\?t=[\w-]+)", demo.text)
            assert connect_account(link, user=user, say=lambda _: None)
            demo.type("\r")
        demo.wait_for("bob calls drop_database")
        demo.wait_for("Press Enter once erin has decided (a: the demo approves as erin, n: withdraw): ")
        [page] = re.findall(r"open (http://127\.0\.0\.1:\d+/approvals/requests/[\w-]+) in your browser", demo.text)
        with ApproverBrowser("erin") as erin:
            assert "the call goes on" in erin.decide(page, "approve", "fine by me")
        demo.type("\r")
        demo.wait_for("round 2: complete 'Dropped the database billing-legacy, approved by erin.'")
        assert demo.wait_for_exit() == 0, demo.text
    finally:
        demo.close(port)
    assert drops(tmp_path / "askback-demo.db") == [("billing-legacy", "bob", "erin")]
