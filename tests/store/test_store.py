"""The storage layer against a real SQLite file: URLs, migrations, the effects ledger, completions, audit."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import create_async_engine

import askback.store
from _store import completion, count_effects, record_completion
from askback.audit import AuditEvent, AuditFilter
from askback.db.urls import normalize_database_url
from askback.errors import ConfigurationError, StoreUnavailableError
from askback.store import EffectClaim, Store
from askback.store.models import VERSION_TABLE, Base


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'askback.db'}"


@pytest.fixture
async def store(db_url: str, anyio_backend: str) -> AsyncIterator[Store]:
    opened = await Store.open(db_url)
    yield opened
    await opened.close()


def test_store_exports_exactly_its_interface() -> None:
    assert set(askback.store.__all__) == {
        "MIGRATIONS",
        "AuditLog",
        "Completion",
        "Database",
        "EventLog",
        "Flows",
        "EffectClaim",
        "HeldAnswers",
        "RoundClaim",
        "RoundRecord",
        "Store",
        "StoredEvent",
        "append_event",
        "chosen_types",
        "hold_lock",
    }


# Database URLs ----------------------------------------------------------------------------------------------


def test_sqlite_url_gets_the_aiosqlite_driver() -> None:
    assert normalize_database_url("sqlite:///var/askback.db") == "sqlite+aiosqlite:///var/askback.db"
    assert normalize_database_url("sqlite:////abs/askback.db") == "sqlite+aiosqlite:////abs/askback.db"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg2"])
def test_postgres_urls_get_the_asyncpg_driver(scheme: str) -> None:
    url = f"{scheme}://ask:p%40ss@db.internal:5433/askback"
    assert normalize_database_url(url) == "postgresql+asyncpg://ask:p%40ss@db.internal:5433/askback"


@pytest.mark.parametrize("url", ["sqlite+aiosqlite:///askback.db", "postgresql+asyncpg://ask:secret@localhost/askback"])
def test_async_urls_pass_through_unchanged(url: str) -> None:
    assert normalize_database_url(url) == url


def test_unknown_scheme_is_refused_without_showing_the_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        normalize_database_url("mysql://ask:hunter2@db.internal/askback")
    message = str(caught.value)
    assert "hunter2" not in message
    assert "'mysql'" in message
    assert "sqlite:///PATH" in message
    assert "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE" in message


def test_text_without_a_scheme_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigurationError) as caught:
        normalize_database_url("ask:hunter2@db.internal/askback")
    assert "hunter2" not in str(caught.value)
    assert "sqlite:///PATH" in str(caught.value)


def test_sqlite_url_with_two_slashes_is_refused_rather_than_kept_in_memory() -> None:
    with pytest.raises(ConfigurationError, match="three slashes"):
        normalize_database_url("sqlite://askback.db")


def test_unparseable_url_is_refused_without_showing_the_password() -> None:
    with pytest.raises(ConfigurationError) as caught:
        normalize_database_url("postgresql://ask:hunter2@db.internal:notaport/askback")
    assert "hunter2" not in str(caught.value)
    assert "could not be parsed" in str(caught.value)


# Opening and migrating --------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_open_creates_the_sqlite_file_and_migrates_it_to_head(tmp_path: Path, db_url: str) -> None:
    store = await Store.open(db_url)
    try:
        assert (tmp_path / "askback.db").exists()
        assert await store.current_revision() == Store.head_revision() == "0010"
        await store.database.ping()
    finally:
        await store.close()


@pytest.mark.anyio
async def test_open_puts_the_sqlite_file_in_wal_mode(tmp_path: Path, db_url: str) -> None:
    store = await Store.open(db_url)
    await store.close()
    with sqlite3.connect(tmp_path / "askback.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


@pytest.mark.anyio
async def test_opening_a_migrated_file_again_leaves_it_at_head(db_url: str) -> None:
    await (await Store.open(db_url)).close()
    store = await Store.open(db_url, migrate=True)
    try:
        assert await store.current_revision() == Store.head_revision()
    finally:
        await store.close()


@pytest.mark.anyio
async def test_two_stores_opening_a_new_file_at_once_both_find_it_at_head(db_url: str) -> None:
    opened: list[Store] = []

    async def open_one() -> None:
        opened.append(await Store.open(db_url))

    try:
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(open_one)
        for store in opened:
            assert await store.current_revision() == Store.head_revision()
    finally:
        for store in opened:
            await store.close()


@pytest.mark.anyio
async def test_open_without_migrating_refuses_an_unmigrated_file(tmp_path: Path, db_url: str) -> None:
    sqlite3.connect(tmp_path / "askback.db").close()
    with pytest.raises(ConfigurationError, match=r"no askback tables yet\. Run `askback db upgrade`"):
        await Store.open(db_url, migrate=False)


@pytest.mark.anyio
async def test_open_without_migrating_refuses_a_missing_file_and_does_not_create_it(
    tmp_path: Path, db_url: str
) -> None:
    with pytest.raises(ConfigurationError, match="askback db upgrade"):
        await Store.open(db_url, migrate=False)
    assert not (tmp_path / "askback.db").exists()


@pytest.mark.anyio
async def test_open_without_migrating_accepts_a_migrated_file(db_url: str) -> None:
    await (await Store.open(db_url)).close()
    store = await Store.open(db_url, migrate=False)
    await store.close()


@pytest.mark.anyio
async def test_open_refuses_a_database_upgraded_by_a_newer_askback(tmp_path: Path, db_url: str) -> None:
    await (await Store.open(db_url)).close()
    with sqlite3.connect(tmp_path / "askback.db") as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = 'from-the-future'")
    with pytest.raises(ConfigurationError, match="newer askback"):
        await Store.open(db_url, migrate=False)


@pytest.mark.anyio
async def test_the_migration_creates_exactly_the_tables_the_models_describe(db_url: str) -> None:
    await (await Store.open(db_url)).close()

    def differences(connection: Connection) -> list[Any]:
        return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

    engine = create_async_engine(normalize_database_url(db_url))
    try:
        async with engine.connect() as conn:
            found = await conn.run_sync(differences)
    finally:
        await engine.dispose()
    # Alembic's own version table is not one of the models.
    assert [d for d in found if not (d[0] == "remove_table" and d[1].name == VERSION_TABLE)] == []


@pytest.mark.anyio
async def test_an_unreachable_database_is_reported_without_the_password() -> None:
    # Nothing listens on port 1 of loopback, so the connection is refused at once.
    with pytest.raises(StoreUnavailableError) as caught:
        await Store.open("postgresql://ask:hunter2@127.0.0.1:1/askback")
    assert "hunter2" not in str(caught.value)
    assert "127.0.0.1:1" in str(caught.value)
    assert caught.value.__cause__ is not None


@pytest.mark.anyio
async def test_a_sqlite_file_in_a_missing_folder_is_reported_as_unavailable(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailableError, match="unable to open database file"):
        await Store.open(f"sqlite:///{tmp_path / 'no-such-folder' / 'askback.db'}")


# Effects ledger ---------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_first_claim_wins(store: Store) -> None:
    assert await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0) == EffectClaim("won")
    assert await store.flows.effect("flow-1", "deploy") == EffectClaim("running")


@pytest.mark.anyio
async def test_second_claim_sees_the_first_one_still_running(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    assert await store.flows.claim_effect("flow-1", "deploy", instance="b:2", at=11.0) == EffectClaim("running")


@pytest.mark.anyio
async def test_second_claim_sees_the_first_ones_outcome(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    await store.flows.finish_effect("flow-1", "deploy", {"deployment": 7, "url": "https://x.test/7"}, at=12.0)
    claim = await store.flows.claim_effect("flow-1", "deploy", instance="b:2", at=13.0)
    assert claim == EffectClaim("done", {"deployment": 7, "url": "https://x.test/7"})


@pytest.mark.anyio
async def test_an_effect_may_finish_with_no_outcome(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "notify", instance="a:1", at=10.0)
    await store.flows.finish_effect("flow-1", "notify", None, at=11.0)
    assert await store.flows.effect("flow-1", "notify") == EffectClaim("done", None)


@pytest.mark.anyio
async def test_effects_are_claimed_per_flow_and_per_name(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    assert await store.flows.claim_effect("flow-2", "deploy", instance="a:1", at=10.0) == EffectClaim("won")
    assert await store.flows.claim_effect("flow-1", "notify", instance="a:1", at=10.0) == EffectClaim("won")


@pytest.mark.anyio
async def test_a_released_effect_can_be_claimed_again(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    await store.flows.release_effect("flow-1", "deploy")
    assert await store.flows.effect("flow-1", "deploy") is None
    assert await store.flows.claim_effect("flow-1", "deploy", instance="b:2", at=11.0) == EffectClaim("won")


@pytest.mark.anyio
async def test_releasing_a_finished_effect_keeps_its_outcome(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    await store.flows.finish_effect("flow-1", "deploy", [1, 2], at=11.0)
    await store.flows.release_effect("flow-1", "deploy")
    assert await store.flows.claim_effect("flow-1", "deploy", instance="b:2", at=12.0) == EffectClaim("done", [1, 2])


@pytest.mark.anyio
async def test_finishing_an_unclaimed_effect_is_refused(store: Store) -> None:
    with pytest.raises(RuntimeError, match="no running claim"):
        await store.flows.finish_effect("flow-1", "deploy", "ok", at=10.0)


@pytest.mark.anyio
async def test_an_outcome_once_recorded_is_never_replaced(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    await store.flows.finish_effect("flow-1", "deploy", "first", at=11.0)
    with pytest.raises(RuntimeError, match="never replaced"):
        await store.flows.finish_effect("flow-1", "deploy", "second", at=12.0)
    assert await store.flows.effect("flow-1", "deploy") == EffectClaim("done", "first")


@pytest.mark.anyio
async def test_an_outcome_that_is_not_json_is_refused_and_the_claim_stays_running(store: Store) -> None:
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    with pytest.raises(TypeError, match="JSON-serialisable"):
        await store.flows.finish_effect("flow-1", "deploy", object(), at=11.0)
    assert await store.flows.effect("flow-1", "deploy") == EffectClaim("running")


@pytest.mark.anyio
async def test_effect_of_an_unknown_flow_is_none(store: Store) -> None:
    assert await store.flows.effect("nobody", "deploy") is None


@pytest.mark.anyio
async def test_count_effects_counts_claimed_effects_in_all_or_by_name(store: Store) -> None:
    assert await count_effects(store) == 0
    await store.flows.claim_effect("flow-1", "deploy", instance="a:1", at=10.0)
    await store.flows.claim_effect("flow-2", "deploy", instance="a:1", at=10.0)
    await store.flows.finish_effect("flow-2", "deploy", "ok", at=11.0)
    await store.flows.claim_effect("flow-1", "notify", instance="a:1", at=10.0)
    assert await count_effects(store) == 3
    assert await count_effects(store, "deploy") == 2
    assert await count_effects(store, "rollback") == 0


async def _claim_many(stores: list[Store], attempts: int) -> list[EffectClaim]:
    claims: list[EffectClaim] = []

    async def claim(store: Store, n: int) -> None:
        claims.append(await store.flows.claim_effect("flow-1", "deploy", instance=f"host:{n}", at=10.0))

    async with anyio.create_task_group() as tg:
        for n in range(attempts):
            tg.start_soon(claim, stores[n % len(stores)], n)
    return claims


@pytest.mark.anyio
async def test_concurrent_claims_in_one_process_yield_exactly_one_winner(store: Store) -> None:
    claims = await _claim_many([store], attempts=12)
    assert sorted(c.status for c in claims) == ["running"] * 11 + ["won"]
    assert await count_effects(store, "deploy") == 1


@pytest.mark.anyio
async def test_concurrent_claims_from_two_stores_on_one_file_yield_exactly_one_winner(db_url: str) -> None:
    # Two Store objects have two engines and two connection pools, as two server processes would.
    first, second = await Store.open(db_url), await Store.open(db_url)
    try:
        claims = await _claim_many([first, second], attempts=12)
        assert sorted(c.status for c in claims) == ["running"] * 11 + ["won"]
        await first.flows.finish_effect("flow-1", "deploy", {"deployment": 1}, at=11.0)
        assert await second.flows.claim_effect("flow-1", "deploy", instance="c:3", at=12.0) == EffectClaim(
            "done", {"deployment": 1}
        )
    finally:
        await first.close()
        await second.close()


# Flow completions -------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_flow_has_no_completion_before_it_completes(store: Store) -> None:
    assert await completion(store, "flow-1") is None


@pytest.mark.anyio
async def test_the_first_completion_wins_and_replays_read_it_back(store: Store) -> None:
    first = await record_completion(store, "flow-1", tool="deploy", principal="alice", result={"ok": 1}, at=10.0)
    second = await record_completion(store, "flow-1", tool="deploy", principal="alice", result={"ok": 2}, at=11.0)
    assert first.result == second.result == {"ok": 1}
    assert first.first and not second.first
    assert await completion(store, "flow-1") == {"ok": 1}


@pytest.mark.anyio
async def test_a_completion_reads_back_as_json(store: Store) -> None:
    stored = await record_completion(store, "flow-1", tool="t", principal=None, result=("a", 1), at=10.0)
    assert stored.result == ["a", 1]
    assert await completion(store, "flow-1") == ["a", 1]


@pytest.mark.anyio
async def test_concurrent_completions_from_two_stores_agree_on_one_result(db_url: str) -> None:
    first, second = await Store.open(db_url), await Store.open(db_url)
    results: list[Any] = []

    async def complete(store: Store, n: int) -> None:
        results.append(await record_completion(store, "flow-1", tool="t", principal=None, result={"n": n}, at=1.0))

    try:
        async with anyio.create_task_group() as tg:
            for n in range(8):
                tg.start_soon(complete, (first, second)[n % 2], n)
        assert len(results) == 8
        assert all(r.result == results[0].result for r in results)
        assert sum(r.first for r in results) == 1
        assert await completion(second, "flow-1") == results[0].result
    finally:
        await first.close()
        await second.close()


# Audit ------------------------------------------------------------------------------------------------------


@pytest.mark.anyio
async def test_an_audit_event_reads_back_with_every_field(store: Store) -> None:
    event = AuditEvent(
        event="answered",
        at=100.5,
        tool="deploy",
        flow_id="flow-1",
        principal="alice",
        round=2,
        keys=("region", "confirm"),
        mode="form,url",
        action="accept",
        content={"region": "eu-west", "confirm": True},
        outcome=None,
        detail="answered in the browser",
        instance="web-1:4242",
    )
    await store.audit_log.add_many([event])
    [read] = await store.audit_log.query()
    assert read.id is not None
    assert read == AuditEvent(**{**event.__dict__, "id": read.id})


@pytest.mark.anyio
async def test_audit_lists_events_oldest_first(store: Store) -> None:
    for at in (30.0, 10.0, 20.0):
        await store.audit_log.add_many([AuditEvent(event="asked", at=at)])
    assert [e.at for e in await store.audit_log.query()] == [10.0, 20.0, 30.0]


_EVENTS = [
    AuditEvent(event="asked", at=10.0, tool="deploy", flow_id="f1", principal="alice", round=1, keys=("region",)),
    AuditEvent(event="answered", at=20.0, tool="deploy", flow_id="f1", principal="alice", action="accept"),
    AuditEvent(event="completed", at=30.0, tool="deploy", flow_id="f1", principal="alice", outcome="deployed"),
    AuditEvent(event="asked", at=40.0, tool="rollback", flow_id="f2", principal="bob", round=1),
    AuditEvent(event="rejected", at=50.0, tool="rollback", principal="carol", outcome="missing_capability"),
]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (AuditFilter(tool="rollback"), [40.0, 50.0]),
        (AuditFilter(principal="alice"), [10.0, 20.0, 30.0]),
        (AuditFilter(flow_id="f2"), [40.0]),
        (AuditFilter(event="asked"), [10.0, 40.0]),
        (AuditFilter(since=30.0), [30.0, 40.0, 50.0]),
        (AuditFilter(until=30.0), [10.0, 20.0]),
        (AuditFilter(since=20.0, until=40.0), [20.0, 30.0]),
        (AuditFilter(tool="deploy", event="asked"), [10.0]),
        (AuditFilter(principal="nobody"), []),
    ],
    ids=["tool", "principal", "flow_id", "event", "since", "until", "window", "combined", "none"],
)
async def test_audit_filters_by_each_field(store: Store, flt: AuditFilter, expected: list[float]) -> None:
    for event in _EVENTS:
        await store.audit_log.add_many([event])
    assert [e.at for e in await store.audit_log.query(flt)] == expected


@pytest.mark.anyio
async def test_audit_contains_searches_content_outcome_and_detail_ignoring_case(store: Store) -> None:
    await store.audit_log.add_many([AuditEvent(event="answered", at=1.0, content={"region": "EU-West"})])
    await store.audit_log.add_many([AuditEvent(event="completed", at=2.0, outcome="deployed eu-west")])
    await store.audit_log.add_many([AuditEvent(event="rejected", at=3.0, detail="no eu-west quota")])
    await store.audit_log.add_many([AuditEvent(event="asked", at=4.0, tool="eu-west")])
    found = await store.audit_log.query(AuditFilter(contains="eu-WEST"))
    assert [e.at for e in found] == [1.0, 2.0, 3.0]


@pytest.mark.anyio
async def test_audit_contains_takes_percent_and_underscore_literally(store: Store) -> None:
    await store.audit_log.add_many([AuditEvent(event="completed", at=1.0, outcome="100% done")])
    await store.audit_log.add_many([AuditEvent(event="completed", at=2.0, outcome="100 done")])
    await store.audit_log.add_many([AuditEvent(event="completed", at=3.0, detail="a_b")])
    await store.audit_log.add_many([AuditEvent(event="completed", at=4.0, detail="axb")])
    assert [e.at for e in await store.audit_log.query(AuditFilter(contains="100%"))] == [1.0]
    assert [e.at for e in await store.audit_log.query(AuditFilter(contains="a_b"))] == [3.0]


@pytest.mark.anyio
async def test_audit_contains_finds_accented_text_in_content(store: Store) -> None:
    await store.audit_log.add_many([AuditEvent(event="answered", at=1.0, content={"city": "Zürich"})])
    assert len(await store.audit_log.query(AuditFilter(contains="Zürich"))) == 1


@pytest.mark.anyio
async def test_audit_limit_keeps_the_newest_events_oldest_first(store: Store) -> None:
    for at in range(1, 6):
        await store.audit_log.add_many([AuditEvent(event="asked", at=float(at))])
    assert [e.at for e in await store.audit_log.query(AuditFilter(limit=2))] == [4.0, 5.0]


def test_audit_filter_refuses_a_limit_below_one() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AuditFilter(limit=0)


@pytest.mark.anyio
async def test_a_write_lock_held_elsewhere_is_waited_for_off_the_event_loop(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "locked.db"
    store = await Store.open(f"sqlite:///{path}")
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")  # another process is writing
        done = anyio.Event()

        async def write() -> None:
            await store.audit_log.add_many([AuditEvent(event="asked", at=1.0, tool="waited")])
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(write)
            await anyio.wait_all_tasks_blocked()
            assert not done.is_set()  # it did not fail, and the loop is free (this line runs)
            other.execute("COMMIT")
        assert [e.tool for e in await store.audit_log.query(AuditFilter(tool="waited"))] == ["waited"]
    finally:
        other.close()
        await store.close()


def test_a_libpq_sslmode_becomes_asyncpg_ssl() -> None:
    assert normalize_database_url("postgresql://u:p@db:5432/x?sslmode=require") == (
        "postgresql+asyncpg://u:p@db:5432/x?ssl=require"
    )


@pytest.mark.anyio
async def test_a_newer_schema_is_not_behind_an_older_one_is(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "schema.db"
    store = await Store.open(f"sqlite:///{path}")
    try:
        assert not await store.database.schema_behind()
        db = sqlite3.connect(path, isolation_level=None)
        db.execute("UPDATE askback_alembic_version SET version_num = '9999_later'")  # a later release upgraded it
        assert not await store.database.schema_behind()
        db.execute("DELETE FROM askback_alembic_version")  # never migrated
        assert await store.database.schema_behind()
        db.close()
    finally:
        await store.close()


@pytest.mark.anyio
async def test_what_the_store_did_itself_still_answers_through_its_parts_with_a_deprecation_warning(
    store: Store,
) -> None:
    with pytest.warns(DeprecationWarning, match=r"Store\.transaction is deprecated: use Store\.database\.transaction"):
        assert await store.transaction(lambda conn: 1, doing="count") == 1
    with pytest.warns(DeprecationWarning, match=r"Store\.engine"):
        assert store.engine is store.database.engine
    with pytest.warns(DeprecationWarning, match=r"Store\.audit is deprecated: use Store\.audit_log\.query"):
        assert await store.audit() == []
    with pytest.warns(DeprecationWarning, match=r"Store\.latest_event_id"):
        assert await store.latest_event_id() == 0
    with pytest.warns(DeprecationWarning, match=r"Store\.event_poll_interval"):
        store.event_poll_interval = 0.01
    assert store.events.poll_interval == 0.01
    with pytest.warns(DeprecationWarning, match=r"Store\.claim_effect is deprecated: use Store\.flows\.claim_effect"):
        claim = await store.claim_effect("flow-1", "deploy", instance="a:1", at=1.0)  # type: ignore[attr-defined]
    assert claim.status == "won"
    with pytest.raises(AttributeError, match="no attribute 'claim_everything'"):
        store.claim_everything  # type: ignore[attr-defined]  # noqa: B018
