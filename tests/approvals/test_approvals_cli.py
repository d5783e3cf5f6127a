"""`askback approvals list|show` from the command line, on a real database file: what operators see (never argument
values, answers or summaries), statuses as they truly are, text made safe for a terminal, and the exit statuses."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from _approvals import BOB, CAROL, ONE_OF_THREE, TWO_OF_THREE, ask, service_on
from askback.clock import FrozenClock
from askback.core.approving import Approval
from askback.db.migrate import all_components
from askback.store import Store
from infra import run_askback

pytestmark = [pytest.mark.http, pytest.mark.anyio]

SECRET = "iban-canary-DE89370400440532013000"
SUMMARY = "summary-canary: pay 5 EUR"


async def seeded(tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    store = await Store.open(url, migrate=True, components=all_components())
    now = time.time()
    try:
        service = service_on(store, FrozenClock(at=now))
        masked = Approval(key="pay", title="Pay an invoice", principals=frozenset({"bob"}), hidden=frozenset({"iban"}))
        pending = await service.request(
            "alice", ["agent-7"], ask(masked, arguments={"iban": SECRET, "amount": 5}, summary=SUMMARY)
        )
        approved = await service.request("alice", [], ask(TWO_OF_THREE, answers={"notes": {"text": SECRET}}))
        await service.decide(BOB, approved.id, "approve", "line one\nline two", digest=approved.digest)
        await service.decide(CAROL, approved.id, "approve", "", digest=approved.digest)
        # Text the service refuses at the door, as a row edited by hand (or written by an older release) holds it.
        async with store.database.engine.begin() as conn:
            edited = sa.text("UPDATE askback_approval_votes SET reason = :reason WHERE approver = 'carol'")
            await conn.execute(edited, {"reason": "\x1b[2J\u202eevil"})
        # Made two hours ago with an hour to live, and read by nobody since: pending in the store, past its time.
        old = service_on(store, FrozenClock(at=now - 7200))
        stale = await old.request("erin", [], ask(ONE_OF_THREE, requester="erin"))
    finally:
        await store.close()
    return {"ASKBACK_DATABASE_URL": url}, {"pending": pending.id, "approved": approved.id, "stale": stale.id}


async def test_list_shows_each_request_newest_first_and_as_json(tmp_path: Path) -> None:
    env, ids = await seeded(tmp_path)

    listed = run_askback("approvals", "list", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert {r["id"]: r["status"] for r in rows} == {
        ids["pending"]: "pending",
        ids["approved"]: "approved",
        ids["stale"]: "expired",
    }
    assert rows[-1]["id"] == ids["stale"]
    approved = next(r for r in rows if r["id"] == ids["approved"])
    assert (approved["approvals"], approved["required"], approved["requester"]) == (2, 2, "alice")

    expired = json.loads(run_askback("approvals", "list", "--status", "expired", "--json", env=env).stdout)
    assert [r["id"] for r in expired] == [ids["stale"]]
    pending = json.loads(run_askback("approvals", "list", "--status", "pending", "--json", env=env).stdout)
    assert [r["id"] for r in pending] == [ids["pending"]]

    text = run_askback("approvals", "list", env=env)
    assert text.returncode == 0 and ids["approved"] in text.stdout and "2/2 approved" in text.stdout


async def test_show_gives_the_votes_and_the_names_of_the_arguments_never_their_values(tmp_path: Path) -> None:
    env, ids = await seeded(tmp_path)

    shown = run_askback("approvals", "show", ids["approved"], "--json", env=env)
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)
    assert [(v["approver"], v["decision"], v["method"]) for v in detail["votes"]] == [
        ("bob", "approve", "development"),
        ("carol", "approve", "development"),
    ]
    assert detail["answers"] == ["notes"] and detail["status"] == "approved"

    masked = json.loads(run_askback("approvals", "show", ids["pending"], "--json", env=env).stdout)
    assert masked["arguments"] == ["amount", "iban (hidden)"] and masked["actors"] == ["agent-7"]

    for args in (("show", ids["approved"]), ("show", ids["pending"]), ("list",)):
        out = (
            run_askback("approvals", *args, env=env).stdout + run_askback("approvals", *args, "--json", env=env).stdout
        )
        assert SECRET not in out and SUMMARY not in out


async def test_text_from_a_decision_cannot_drive_the_terminal(tmp_path: Path) -> None:
    env, ids = await seeded(tmp_path)

    shown = run_askback("approvals", "show", ids["approved"], env=env)
    assert shown.returncode == 0, shown.stderr
    assert "\u202e" not in shown.stdout and "\x1b" not in shown.stdout
    assert "line one\\nline two" in shown.stdout and "\\x1b[2J\\u202eevil" in shown.stdout


async def test_an_unknown_id_is_not_found_and_an_unknown_status_a_usage_error(tmp_path: Path) -> None:
    env, _ = await seeded(tmp_path)

    unknown = run_askback("approvals", "show", "apr_nope", env=env)
    assert unknown.returncode == 4 and "no approval request 'apr_nope'" in unknown.stderr
    bad = run_askback("approvals", "list", "--status", "maybe", env=env)
    assert bad.returncode == 2 and "--status is one of" in bad.stderr


async def test_reading_from_the_command_line_writes_nothing(tmp_path: Path) -> None:
    env, ids = await seeded(tmp_path)
    run_askback("approvals", "list", env=env)
    run_askback("approvals", "show", ids["stale"], env=env)

    store = await Store.open(env["ASKBACK_DATABASE_URL"], components=all_components())
    try:
        service = service_on(store, FrozenClock(at=time.time()))
        stale = await service.get(ids["stale"], expire=False)
        assert stale is not None and stale.status == "pending"
        assert [e.type for e in await store.events.events_after(0)].count("approval.expired") == 0
    finally:
        await store.close()


async def test_the_audit_trail_with_approval_rows_verifies_and_lists_them_by_kind(tmp_path: Path) -> None:
    env, _ = await seeded(tmp_path)

    verified = run_askback("audit", "verify", env=env)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    approved = run_askback("audit", "--event", "approval.approved", "--json", env=env)
    assert approved.returncode == 0, approved.stderr
    assert approved.stdout.count("approval.approved") == 2 and SECRET not in approved.stdout
