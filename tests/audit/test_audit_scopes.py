"""The audit trail records the caller's token scopes with each event: stored sorted and space-separated, read back as
given, listed by `askback audit`, logged, and covered by each row's hash; rows without scopes (written before
revision 0005, or for a caller with no token scopes recorded) hash and verify exactly as before.

Every database test runs on SQLite and on PostgreSQL. The tests are plain functions: `askback audit` runs its own
event loop, in process through Typer's runner."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

import anyio
import pytest
from alembic import command
from sqlalchemy import text as sql
from sqlalchemy.ext.asyncio import create_async_engine
from typer.testing import CliRunner

from askback.audit import AuditEvent, AuditFilter
from askback.audit.chain import GENESIS, canonical, link, row_hash
from askback.audit.emit import emit
from askback.cli import app as cli
from askback.db.urls import normalize_database_url
from askback.store import MIGRATIONS, Store
from askback.store.audit_rows import to_rows

runner = CliRunner()
_T = TypeVar("_T")
CHAIN = "host:1:5c09e5"

GRANTED = AuditEvent(
    event="answered",
    at=1_800_000_001.0,
    tool="delete_project",
    principal="alice",
    keys=("confirm_project",),
    action="accept",
    scopes=("projects:delete", "mcp", "projects:delete"),
)
UNSCOPED = AuditEvent(event="asked", at=1_800_000_000.0, tool="delete_project", principal="bob", keys=("confirm",))
NONE_GRANTED = AuditEvent(event="completed", at=1_800_000_002.0, tool="delete_project", outcome="completed", scopes=())


def run(fn: Callable[[], Awaitable[_T]]) -> _T:
    return anyio.run(fn)


def by_hand(url: str, statement: str, **params: Any) -> None:
    """Run SQL on the database directly, as someone with write access would."""

    async def go() -> None:
        engine = create_async_engine(normalize_database_url(url))
        try:
            async with engine.begin() as conn:
                await conn.execute(sql(statement), params)
        finally:
            await engine.dispose()

    run(go)


def rows(url: str) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        engine = create_async_engine(normalize_database_url(url))
        try:
            async with engine.connect() as conn:
                found = await conn.execute(sql("SELECT * FROM askback_audit ORDER BY id"))
                return [dict(r._mapping) for r in found.all()]
        finally:
            await engine.dispose()

    return run(go)


def write(url: str, events: Sequence[AuditEvent]) -> None:
    async def go() -> None:
        store = await Store.open(url, migrate=True, audit_chain=CHAIN)
        try:
            await store.audit_log.add_many(events)
        finally:
            await store.close()

    run(go)


def read(url: str) -> list[AuditEvent]:
    async def go() -> list[AuditEvent]:
        store = await Store.open(url, migrate=False)
        try:
            return await store.audit_log.query(AuditFilter())
        finally:
            await store.close()

    return run(go)


def verify(url: str) -> tuple[int, list[dict[str, Any]]]:
    """`askback audit verify --json`: its exit status and every finding."""
    result = runner.invoke(cli, ["audit", "verify", "--database", url, "--json"])
    assert result.exit_code in (0, 1), result.output
    verdict = json.loads(result.stdout)
    return result.exit_code, [c["broken"] for c in verdict["chains"] if c["broken"]] + verdict["problems"]


# Stored and read back -----------------------------------------------------------------------------------------------


def test_scopes_are_stored_sorted_and_space_separated_and_read_back_as_a_tuple(any_database: str) -> None:
    write(any_database, [UNSCOPED, GRANTED, NONE_GRANTED])
    assert [r["scopes"] for r in rows(any_database)] == [None, "mcp projects:delete", ""]
    assert [e.scopes for e in read(any_database)] == [None, ("mcp", "projects:delete"), ()]
    assert verify(any_database) == (0, [])


# Tamper evidence ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "forged"),
    [
        pytest.param(1, "admin mcp projects:delete", id="scopes-widened"),
        pytest.param(1, None, id="scopes-removed"),
        pytest.param(0, "admin", id="scopes-added-to-a-row-without"),
    ],
)
def test_a_row_whose_scopes_were_edited_fails_verification_as_edited(
    any_database: str, row: int, forged: str | None
) -> None:
    write(any_database, [UNSCOPED, GRANTED, NONE_GRANTED])
    target = rows(any_database)[row]
    by_hand(any_database, "UPDATE askback_audit SET scopes = :forged WHERE id = :id", forged=forged, id=target["id"])
    status, found = verify(any_database)
    assert status == 1
    assert [(f["kind"], f["seq"], f["row_id"]) for f in found] == [("edited", target["seq"], target["id"])]


def test_a_row_without_scopes_hashes_exactly_as_before_scopes_were_recorded() -> None:
    event = AuditEvent(
        event="answered",
        at=1_800_000_000.0,
        tool="delete_project",
        flow_id="f1",
        principal="alice",
        round=1,
        keys=("confirm_project",),
        mode="form",
        action="accept",
        content={"project_name": "billing-legacy"},
        instance="vm:1",
    )
    [row], _, head = link(to_rows([event]), "vm:1:cafe", 0, GENESIS)
    # The hash this row had when every row was "askback.audit/1", before the scopes column existed.
    assert head == row_hash({k: v for k, v in row.items() if k != "scopes"})
    assert head == "48c8a751755d7edbd8f630c101d7f430558460a6a4abdef2570cf7665c61fbda"
    scoped = {**row, "scopes": "mcp"}
    assert canonical(scoped).startswith(b'["askback.audit/2",') and canonical(scoped).endswith(b',"mcp"]')
    assert row_hash(scoped) != head != row_hash({**row, "scopes": ""})


def at_revision(url: str, revision: str) -> None:
    """The database migrated to `revision` only, as an askback of that release left it."""

    async def go() -> None:
        engine = create_async_engine(normalize_database_url(url))
        try:
            async with engine.begin() as conn:
                await conn.run_sync(lambda sync: command.upgrade(MIGRATIONS.config(sync), revision))
        finally:
            await engine.dispose()

    run(go)


def test_a_chain_written_before_revision_0005_verifies_after_the_upgrade_and_goes_on_with_scopes(
    any_database: str,
) -> None:
    at_revision(any_database, "0004")
    # What an askback at revision 0004 wrote: chained rows without a scopes column, and the chain's head.
    old = [{k: v for k, v in r.items() if k != "scopes"} for r in to_rows([UNSCOPED, UNSCOPED])]
    linked, seq, head = link(old, CHAIN, 0, GENESIS)
    for placed in linked:
        by_hand(
            any_database, f"INSERT INTO askback_audit ({', '.join(placed)}) VALUES (:{', :'.join(placed)})", **placed
        )
    by_hand(
        any_database,
        "INSERT INTO askback_audit_chains (chain, seq, head, started_at) VALUES (:chain, :seq, :head, :at)",
        chain=CHAIN,
        seq=seq,
        head=head,
        at=UNSCOPED.at,
    )

    write(any_database, [GRANTED, UNSCOPED, NONE_GRANTED])  # upgrades to 0005, then continues the same chain
    written = rows(any_database)
    assert [(r["chain"], r["seq"], r["scopes"]) for r in written] == [
        (CHAIN, 1, None),
        (CHAIN, 2, None),
        (CHAIN, 3, "mcp projects:delete"),
        (CHAIN, 4, None),
        (CHAIN, 5, ""),
    ]
    assert verify(any_database) == (0, [])


# Shown ----------------------------------------------------------------------------------------------------------------


def test_askback_audit_lists_the_scopes_in_its_json_and_its_table(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    write(url, [UNSCOPED, GRANTED, NONE_GRANTED])
    listed = runner.invoke(cli, ["audit", "--database", url, "--json"])
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line).get("scopes") for line in listed.stdout.splitlines()] == [
        None,
        ["mcp", "projects:delete"],
        [],
    ]
    table = runner.invoke(cli, ["audit", "--database", url], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output
    header, _, granted, _ = table.stdout.splitlines()
    assert header.split()[:5] == ["time", "(UTC)", "event", "user", "scopes"]
    assert "alice  mcp projects:delete" in granted


def test_askback_audit_has_no_scopes_column_when_no_event_listed_has_scopes(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'askback.db'}"
    write(url, [UNSCOPED, GRANTED])
    table = runner.invoke(cli, ["audit", "--database", url, "--user", "bob"], env={"COLUMNS": "160"})
    assert table.exit_code == 0, table.output
    assert "scopes" not in table.stdout and "bob" in table.stdout


def test_the_log_line_names_the_scopes_only_when_they_were_recorded(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="askback.audit"):
        for event in (GRANTED, UNSCOPED):
            emit(event)
    granted, unscoped = caplog.records
    assert "principal=alice scopes=mcp,projects:delete" in granted.getMessage()
    assert granted.__dict__["scopes"] == ["mcp", "projects:delete"]
    assert "scopes" not in unscoped.getMessage() and "scopes" not in unscoped.__dict__
