"""The audit trail is tamper-evident: rows written by real flows chain up per serving process, `askback audit verify`
passes a clean trail and names the first broken link of one edited, deleted, reordered, inserted or cut off by hand.

Every database test runs on SQLite and on PostgreSQL. The tests are plain functions: `askback audit verify` runs its
own event loop, in process through Typer's runner or as a real subprocess."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
from mcp import Client
from sqlalchemy import text as sql
from sqlalchemy.ext.asyncio import create_async_engine
from typer.testing import CliRunner

from askback import load_settings
from askback.audit import AuditEvent
from askback.audit.chain import GENESIS, ChainHead, Verifier, link, row_hash
from askback.cli import app as cli
from askback.clock import FrozenClock
from askback.db.urls import normalize_database_url
from askback.demo import build
from askback.store import RoundRecord, Store
from askback.store.audit_rows import to_rows
from askback.testing import accept, answering, decline, text
from infra import run_askback

runner = CliRunner()
_T = TypeVar("_T")


def run(fn: Callable[[], Awaitable[_T]]) -> _T:
    return anyio.run(fn)


def by_hand(url: str, *statements: str, **params: Any) -> None:
    """Run SQL on the database directly, in one transaction, as someone with write access would."""

    async def go() -> None:
        engine = create_async_engine(normalize_database_url(url))
        try:
            async with engine.begin() as conn:
                for statement in statements:
                    await conn.execute(sql(statement), params)
        finally:
            await engine.dispose()

    run(go)


def rows(url: str, query: str = "SELECT * FROM askback_audit ORDER BY id", **params: Any) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        engine = create_async_engine(normalize_database_url(url))
        try:
            async with engine.connect() as conn:
                return [dict(r._mapping) for r in (await conn.execute(sql(query), params)).all()]
        finally:
            await engine.dispose()

    return run(go)


def verify(url: str) -> tuple[int, dict[str, Any]]:
    """`askback audit verify --json`, in process: its exit status and what it printed."""
    result = runner.invoke(cli, ["audit", "verify", "--database", url, "--json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def broken(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """Every finding: the first broken link of each chain, then the rows outside any chain."""
    return [c["broken"] for c in verdict["chains"] if c["broken"]] + verdict["problems"]


def write_trail(url: str) -> None:
    """Real flows through the demo app, in both eras: a deletion confirmed, one declined, a production deploy asked
    twice over 2026-07-28 rounds. They leave one chain of about a dozen rows written in several transactions."""

    async def go() -> None:
        await (await Store.open(url, migrate=True)).close()  # PostgreSQL is migrated only when asked
        settings = load_settings(database_url=url, state_keys="k" * 43, demo_auth=True)
        app = build(settings, clock=FrozenClock(at=1_800_000_000.0))
        async with app.running():
            confirm = answering(project_name=accept(project_name="billing-legacy"))
            async with Client(app.mcp, elicitation_callback=confirm) as client:
                assert text(await client.call_tool("delete_project", {"project_id": "prj_99"})) == (
                    "Deleted billing-legacy."
                )
            refuse = answering(project_name=decline())
            async with Client(app.mcp, elicitation_callback=refuse) as client:
                await client.call_tool("delete_project", {"project_id": "prj_42"})
            both = answering(environment=accept(environment="production"), confirm=accept(confirm=True))
            async with Client(app.mcp, mode="2026-07-28", elicitation_callback=both) as client:
                assert text(await client.call_tool("deploy", {"service": "web"})) == "Deployed web to production."

    run(go)


@pytest.fixture
def trail(any_database: str) -> str:
    write_trail(any_database)
    return any_database


def chained(url: str) -> list[dict[str, Any]]:
    return rows(url, "SELECT * FROM askback_audit WHERE chain IS NOT NULL ORDER BY seq")


# A clean trail ------------------------------------------------------------------------------------------------------


@pytest.mark.http
def test_a_trail_written_by_real_flows_verifies_clean_and_prints_its_head(trail: str, tmp_path: Path) -> None:
    written = rows(trail)
    assert len(written) >= 8 and all(r["chain"] == written[0]["chain"] for r in written)
    assert [r["seq"] for r in written] == list(range(1, len(written) + 1))
    assert written[0]["prev"] == GENESIS and all(b["prev"] == a["hash"] for a, b in itertools.pairwise(written))
    [head] = rows(trail, "SELECT * FROM askback_audit_chains")
    assert (head["seq"], head["head"]) == (written[-1]["seq"], written[-1]["hash"])

    shown = run_askback("audit", "verify", "--database", trail, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert head["chain"] in shown.stdout and head["head"][:16] in shown.stdout
    assert f"1 chain(s), {len(written)} row(s): intact" in shown.stdout

    exported = run_askback("audit", "verify", "--database", trail, "--json", cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    verdict = json.loads(exported.stdout)
    assert verdict["ok"] is True and verdict["unchained"] == 0 and verdict["problems"] == []
    assert [(c["chain"], c["seq"], c["head"], c["rows"]) for c in verdict["chains"]] == [
        (head["chain"], head["seq"], head["head"], len(written))
    ]


# Tampering by hand --------------------------------------------------------------------------------------------------


@pytest.mark.http
def test_an_edited_answer_fails_verification_naming_its_seq_and_row(trail: str, tmp_path: Path) -> None:
    [answer] = rows(trail, "SELECT * FROM askback_audit WHERE content LIKE '%billing-legacy%'")
    by_hand(
        trail,
        "UPDATE askback_audit SET content = :forged WHERE id = :id",
        forged='{"project_name":"x"}',
        id=answer["id"],
    )

    shown = run_askback("audit", "verify", "--database", trail, cwd=tmp_path)
    assert shown.returncode == 1, shown.stderr
    assert f"seq {answer['seq']} (row {answer['id']}) was edited" in shown.stdout
    _, verdict = verify(trail)
    [found] = broken(verdict)
    assert (found["kind"], found["seq"], found["row_id"]) == ("edited", answer["seq"], answer["id"])


def test_an_edited_timestamp_fails_verification(trail: str) -> None:
    third = chained(trail)[2]
    by_hand(trail, "UPDATE askback_audit SET at = at - 3600 WHERE id = :id", id=third["id"])
    status, verdict = verify(trail)
    assert status == 1
    assert [(f["kind"], f["seq"]) for f in broken(verdict)] == [("edited", 3)]


def test_a_deleted_row_fails_verification_as_missing_from_its_place(trail: str) -> None:
    third = chained(trail)[2]
    by_hand(trail, "DELETE FROM askback_audit WHERE id = :id", id=third["id"])
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    assert (found["kind"], found["seq"]) == ("missing", 3)
    assert "seq 3 missing" in found["message"]


def test_rows_swapped_in_the_chain_fail_verification_as_reordered(trail: str) -> None:
    second, third = chained(trail)[1:3]
    by_hand(
        trail,
        "UPDATE askback_audit SET seq = -1 WHERE id = :a",
        "UPDATE askback_audit SET seq = 2 WHERE id = :b",
        "UPDATE askback_audit SET seq = 3 WHERE id = :a",
        a=second["id"],
        b=third["id"],
    )
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    assert (found["kind"], found["seq"]) == ("reordered", 2)
    assert "seq 2 and 3" in found["message"]


def test_events_swapped_between_two_rows_fail_verification_as_reordered(trail: str) -> None:
    first, second = chained(trail)[:2]
    fields = ("at", "event", "round", "keys", "mode", "action", "content", "outcome", "detail")
    assignments = ", ".join(f"{f} = :{f}" for f in fields)
    for row, other in ((first, second), (second, first)):
        by_hand(
            trail,
            f"UPDATE askback_audit SET {assignments} WHERE id = :id",
            id=row["id"],
            **{f: other[f] for f in fields},
        )
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    assert (found["kind"], found["seq"], found["row_id"]) == ("reordered", 1, first["id"])
    assert "hold each other's events" in found["message"]


@pytest.mark.http
def test_a_row_without_a_chain_inserted_by_hand_fails_verification(trail: str, tmp_path: Path) -> None:
    by_hand(
        trail,
        "INSERT INTO askback_audit (at, event, tool, principal, keys, action) "
        "VALUES (1800000000.5, 'answered', 'deploy', 'alice', '[\"confirm_prod\"]', 'accept')",
    )
    [forged] = rows(trail, "SELECT id FROM askback_audit WHERE chain IS NULL")
    shown = run_askback("audit", "verify", "--database", trail, cwd=tmp_path)
    assert shown.returncode == 1, shown.stderr
    assert f"the first is row {forged['id']}" in shown.stdout and "inserted by hand" in shown.stdout
    _, verdict = verify(trail)
    assert [(f["kind"], f["row_id"]) for f in broken(verdict)] == [("inserted", forged["id"])]


def forge(after: dict[str, Any] | None, *, chain: str) -> dict[str, Any]:
    """A row hashed exactly as askback would, placed after `after` (or first in `chain`)."""
    [row] = to_rows(
        [AuditEvent(event="answered", at=1_800_000_001.0, tool="deploy", keys=("confirm_prod",), action="accept")]
    )
    [placed], _, _ = link([row], chain, after["seq"] if after else 0, after["hash"] if after else GENESIS)
    return placed


def insert(url: str, row: dict[str, Any]) -> None:
    by_hand(url, f"INSERT INTO askback_audit ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})", **row)


def test_a_correctly_hashed_row_appended_by_hand_fails_verification_past_the_head(trail: str) -> None:
    last = chained(trail)[-1]
    insert(trail, forge(last, chain=last["chain"]))
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    assert (found["kind"], found["seq"]) == ("inserted", last["seq"] + 1)
    assert "past the chain's head" in found["message"]


def test_a_row_claiming_a_chain_no_process_started_fails_verification(trail: str) -> None:
    insert(trail, forge(None, chain="forger:1:00000000"))
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    assert found["kind"] == "inserted" and found["chain"] == "forger:1:00000000"
    assert "no askback process started it" in found["message"]


def test_a_tail_cut_off_fails_verification_against_the_recorded_head(trail: str) -> None:
    written = chained(trail)
    by_hand(trail, "DELETE FROM askback_audit WHERE seq >= :seq", seq=written[-2]["seq"])
    status, verdict = verify(trail)
    assert status == 1
    [found] = broken(verdict)
    last = written[-1]["seq"]
    assert (found["kind"], found["seq"]) == ("truncated", last - 1)
    assert f"its head is seq {last} but its last row is seq {last - 2}" in found["message"]


# Rows from before the chain -----------------------------------------------------------------------------------------


@pytest.mark.http
def test_rows_written_before_the_chain_existed_are_reported_unchained_and_not_as_tampering(
    any_database: str, tmp_path: Path
) -> None:
    run(lambda: close_after(Store.open(any_database, migrate=True)))
    # What an askback before revision 0003 wrote: rows with no chain, before any chained row.
    for at in (1.0, 2.0):
        by_hand(any_database, "INSERT INTO askback_audit (at, event, keys) VALUES (:at, 'asked', '[]')", at=at)
    write_trail(any_database)

    shown = run_askback("audit", "verify", "--database", any_database, cwd=tmp_path)
    assert shown.returncode == 0, shown.stdout
    assert "2 row(s) unchained, written before the chain existed" in shown.stdout
    assert verify(any_database)[1]["unchained"] == 2


async def close_after(opening: Awaitable[Store]) -> None:
    await (await opening).close()


# Chains per process -------------------------------------------------------------------------------------------------


def test_two_stores_writing_at_once_keep_two_chains_that_both_verify(any_database: str) -> None:
    """Two serving processes, as far as the database can tell: distinct chain ids, writing concurrently. Each also
    runs several writers at once, which serialize on their own chain's head only."""

    async def go() -> None:
        stores = [await Store.open(any_database, migrate=True, audit_chain=f"host:{n}:cafe") for n in (1, 2)]
        try:

            async def writer(store: Store, n: int) -> None:
                for i in range(5):
                    events = [
                        AuditEvent(event="asked", at=float(i), tool=f"w{n}"),
                        AuditEvent(event="answered", at=float(i)),
                    ]
                    if i % 2:
                        await store.audit_log.add_many(events)
                    else:
                        await store.flows.finish_flow(
                            RoundRecord(f"f{n}-{i}", float(i), tool="t", result={"i": i}, events=events)
                        )

            async with anyio.create_task_group() as tg:
                for store in stores:
                    for n in range(4):
                        tg.start_soon(writer, store, n)
        finally:
            for store in stores:
                await store.close()

    run(go)
    status, verdict = verify(any_database)
    assert status == 0, verdict
    assert sorted((c["chain"], c["seq"], c["rows"]) for c in verdict["chains"]) == [
        ("host:1:cafe", 40, 40),
        ("host:2:cafe", 40, 40),
    ]


_WRITER = """
import sys, anyio
from askback.audit import AuditEvent
from askback.store import Store

async def main() -> None:
    store = await Store.open(sys.argv[1], migrate=False)
    try:
        for i in range(30):
            await store.audit_log.add_many([AuditEvent(event="asked", at=float(i)), AuditEvent(event="answered", at=float(i))])
    finally:
        await store.close()

anyio.run(main)
"""


@pytest.mark.http
def test_two_processes_writing_at_once_each_keep_a_chain_of_their_own(any_database: str) -> None:
    run(lambda: close_after(Store.open(any_database, migrate=True)))
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ASKBACK_")}
    writers = [
        subprocess.Popen([sys.executable, "-c", _WRITER, any_database], env=clean, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    status, verdict = verify(any_database)
    assert status == 0, verdict
    pids = sorted(str(w.pid) for w in writers)
    assert sorted(c["chain"].split(":")[1] for c in verdict["chains"]) == pids
    assert [(c["seq"], c["rows"]) for c in verdict["chains"]] == [(60, 60), (60, 60)]


def test_a_write_that_fails_after_moving_the_head_leaves_no_gap(any_database: str) -> None:
    async def go() -> None:
        store = await Store.open(any_database, migrate=True, audit_chain="host:1:beef")
        try:
            await store.audit_log.add_many([AuditEvent(event="asked", at=1.0)])
            # A round number no INTEGER column holds: the INSERT fails after the head was moved, so both roll back.
            with pytest.raises(Exception, match=r"(?i)int|range"):
                await store.audit_log.add_many([AuditEvent(event="asked", at=2.0, round=2**70)])
            await store.audit_log.add_many([AuditEvent(event="answered", at=3.0)])
        finally:
            await store.close()

    run(go)
    assert [(r["seq"], r["event"]) for r in chained(any_database)] == [(1, "asked"), (2, "answered")]
    assert verify(any_database)[0] == 0


def test_a_chain_another_store_of_the_process_appended_to_is_continued_not_forked(any_database: str) -> None:
    async def go() -> None:
        first = await Store.open(any_database, migrate=True, audit_chain="host:1:f00d")
        second = await Store.open(any_database, audit_chain="host:1:f00d", migrate=True)
        try:
            for store in (first, second, first, second):
                await store.audit_log.add_many(
                    [AuditEvent(event="asked", at=1.0), AuditEvent(event="answered", at=1.0)]
                )
        finally:
            await first.close()
            await second.close()

    run(go)
    assert [r["seq"] for r in chained(any_database)] == list(range(1, 9))
    assert verify(any_database)[0] == 0


# The verifier alone, on rows as data ----------------------------------------------------------------------------------


def chain_of(n: int, *, chain: str = "h:1:aa") -> tuple[list[dict[str, Any]], ChainHead]:
    events = [AuditEvent(event="asked", at=float(i), tool="t", keys=(f"q{i}",)) for i in range(n)]
    linked, seq, head = link(to_rows(events), chain, 0, GENESIS)
    return [{**row, "id": i + 1} for i, row in enumerate(linked)], ChainHead(chain, seq, head, 0.0)


def judged(feed: Sequence[dict[str, Any]], heads: Sequence[ChainHead]) -> list[tuple[str, int | None]]:
    verifier = Verifier(heads)
    for row in feed:
        verifier.add(row)
    verdict = verifier.finish()
    return [(c.broken.kind, c.broken.seq) for c in verdict.chains if c.broken] + [
        (p.kind, p.seq) for p in verdict.problems
    ]


def test_the_verifier_finds_nothing_in_an_intact_chain() -> None:
    feed, head = chain_of(5)
    assert judged(feed, [head]) == []


def test_the_verifier_names_a_duplicate_seq_as_inserted() -> None:
    feed, head = chain_of(4)
    copy = {**feed[1], "id": 99}
    assert judged([*feed[:2], copy, *feed[2:]], [head]) == [("inserted", 2)]


def test_the_verifier_names_rows_stored_out_of_order_as_reordered() -> None:
    feed, head = chain_of(4)
    feed[1], feed[2] = {**feed[1], "id": feed[2]["id"]}, {**feed[2], "id": feed[1]["id"]}
    assert judged(feed, [head]) == [("reordered", 3)]


def test_the_verifier_names_a_wrong_hash_as_edited() -> None:
    feed, head = chain_of(3)
    feed[1] = {**feed[1], "hash": row_hash({**feed[1], "tool": "other"})}
    assert judged(feed, [head]) == [("edited", 2)]


def test_the_verifier_names_a_chain_whose_rows_are_all_gone_as_truncated() -> None:
    _, head = chain_of(3)
    assert judged([], [head]) == [("truncated", 1)]


def test_the_same_event_hashes_alike_whether_its_time_reads_back_as_an_int_or_a_float() -> None:
    feed, _ = chain_of(2)
    assert row_hash({**feed[1], "at": 1}) == row_hash({**feed[1], "at": 1.0}) == feed[1]["hash"]
