"""`askback demo` walks the META loop after its direct flows: erin, who has no account, reaches `summarize_inbox`
through the meta-tools of the demo server (served in both exposures) from a client that declares no elicitation:
search_tools shows the tool needing a connection, execute_tool answers not_connected, connect_account gives her link
and its host, the scripted person connects through it, check_readiness says ready, and execute_tool answers the
summary. Her account is then ACTIVE in the demo's database. With `--interactive`, at a real terminal, the person
opens erin's link (here with the scripted person's plain HTTP) and presses Enter, and the walk goes on (to the
approval after it, which the person withdraws here: tests/demo/test_demo_approvals.py approves it)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.demo.test_demo_interactive import Terminal

from askback.demo.person import connect_account
from askback.testing import free_port
from infra import run_askback

pytestmark = pytest.mark.http


def test_the_demo_walks_erin_through_the_meta_loop_from_not_connected_to_the_summary(tmp_path: Path) -> None:
    demo = run_askback("demo", "--workers", "2", cwd=tmp_path)
    assert demo.returncode == 0, demo.stdout + demo.stderr
    out = demo.stdout
    start = out.index("erin reaches summarize_inbox through the META exposure (no elicitation)")
    assert out.index("carol calls summarize_inbox") < start  # after the existing flows
    steps = [
        "search_tools(query='inbox') -> summarize_inbox needs demo-mail needs_connection",
        """execute_tool(name='summarize_inbox') -> {"status": "not_connected", "connection": "demo-mail"}""",
        "connect_account(connection='demo-mail') -> a link to demo-mail at 127.0.0.1",
        "link http://127.0.0.1:",
        "they sign in as erin and are sent back to the link",
        "Your demo-mail account is connected.",
        "check_readiness(name='summarize_inbox') -> ready: demo-mail ready",
        "execute_tool(name='summarize_inbox') -> complete '3 messages for erin, 2 unread; the latest is",
    ]
    found = [out.find(step, start) for step in steps]
    assert -1 not in found and found == sorted(found), (dict(zip(steps, found, strict=True)), out[start:])
    link = re.search(r"link (http://127\.0\.0\.1:\d+/accounts/start\?t=\S+)", out[start:])
    assert link is not None and link.group(1) not in out[:start]  # erin's own link, not carol's

    listed = run_askback("accounts", "list", "--database", "sqlite:///askback-demo.db", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    accounts = {(a["principal"], a["connection"], a["status"]) for a in json.loads(listed.stdout)}
    assert ("erin", "demo-mail", "ACTIVE") in accounts, accounts


def test_the_interactive_demo_waits_for_the_person_to_open_erins_link_and_press_enter(tmp_path: Path) -> None:
    port = free_port()
    demo = Terminal("demo", "--interactive", "--workers", "1", "--port", str(port), cwd=tmp_path)

    def open_the_link_and_press_enter(user: str) -> None:
        demo.wait_for("Press Enter once the page says Connected (n to decline): ")
        *_, link = re.findall(r"link (http://127\.0\.0\.1:\d+/accounts/start\?t=[\w-]+)", demo.text)
        assert connect_account(link, user=user, say=lambda _: None)
        demo.type("\r")

    try:
        demo.wait_for("(empty to decline)")
        demo.type("billing-legacy\r")
        demo.wait_for("[dev/staging/production] (empty to decline)")
        demo.type("staging\r")
        open_the_link_and_press_enter("carol")
        demo.wait_for("the grant landed: account.connected; the call resumed by itself")
        demo.wait_for("erin reaches summarize_inbox through the META exposure")
        demo.wait_for("connect_account(connection='demo-mail') -> a link to demo-mail at 127.0.0.1")
        demo.wait_for("sign in as erin when the demo server asks")
        open_the_link_and_press_enter("erin")
        demo.wait_for("check_readiness(name='summarize_inbox') -> ready: demo-mail ready")
        demo.wait_for("execute_tool(name='summarize_inbox') -> complete '3 messages for erin, 2 unread;")
        demo.wait_for("Press Enter once erin has decided (a: the demo approves as erin, n: withdraw): ")
        demo.type("n\r")  # bob withdraws his request to drop a database: nothing is dropped
        demo.wait_for("Withdrawn: the approval request for Drop a database was withdrawn")
        demo.wait_for("dropped: none")
        assert demo.wait_for_exit() == 0, demo.text
    finally:
        demo.close(port)
