"""Parked calls in the shared store (SQLite and PostgreSQL), and the pure decisions and form checks around them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection

from askback.errors import CallStateError, InvalidAnswerError
from askback.runtime import Runtime
from askback.runtime._models import Base
from askback.runtime.forms import fields, parse, validate
from askback.runtime.parked_calls import MIGRATIONS, ParkedCalls
from askback.runtime.questions import Answer, Ready, Waiting, pending_questions, resume_decision
from askback.settings import load_settings
from askback.store import Store

pytestmark = pytest.mark.anyio

ASKED: dict[str, Any] = {
    "resultType": "input_required",
    "inputRequests": {
        "a": {"method": "elicitation/create", "params": {"mode": "form", "message": "A?", "requestedSchema": {
            "type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}}},
        "b": {"method": "elicitation/create", "params": {"mode": "url", "message": "B?", "url": "https://x.example/b"}},
    },
    "requestState": "v1.opaque",
}  # fmt: skip


async def test_the_runtime_migration_creates_exactly_the_tables_its_models_describe(tmp_path: Path) -> None:
    store = await Store.open(f"sqlite:///{tmp_path / 'rt.db'}", migrate=True, components=(MIGRATIONS,))
    try:

        def differences(connection: Connection) -> list[Any]:
            return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))

        async with store.database.engine.connect() as conn:
            found = await conn.run_sync(differences)
        assert await store.database.revisions() == {"runtime": "r004"}
    finally:
        await store.close()
    assert [d for d in found if not (d[0] == "remove_table" and d[1].name == MIGRATIONS.version_table)] == []


async def _calls(url: str) -> tuple[Store, ParkedCalls]:
    store = await Store.open(url, migrate=True, components=(MIGRATIONS,))
    return store, ParkedCalls(store.database)


async def _park(calls: ParkedCalls, call_id: str = "call_1") -> None:
    await calls.add(
        call_id=call_id, run_id="r", principal="ada", server="https://s.example/mcp", protocol="2026-07-28",
        method="tools/call", target="t", arguments={"x": 1}, outcome=ASKED, sent=None, deadline=200.0, now=100.0,
    )  # fmt: skip


async def test_of_many_claims_on_one_round_exactly_one_wins_until_its_lease_runs_out(any_database: str) -> None:
    store, calls = await _calls(any_database)
    try:
        await _park(calls)
        won: list[str] = []

        async def claim() -> None:
            token = await calls.claim("call_1", 1, now=110.0, lease=30.0)
            if token is not None:
                won.append(token)

        async with anyio.create_task_group() as tg:
            for _ in range(8):
                tg.start_soon(claim)
        assert len(won) == 1
        assert await calls.claim("call_1", 1, now=139.0, lease=30.0) is None
        assert await calls.due(now=139.0) == []
        # The claimer stopped half-way: once its lease has run out the call is due again and can be taken over.
        assert await calls.due(now=141.0) == ["call_1"]
        taken = await calls.claim("call_1", 1, now=141.0, lease=30.0)
        assert taken is not None
        # The first claimer's late settle is refused; the new one's is kept.
        assert not await calls.settle("call_1", won[0], round_=1, sent={}, outcome={"content": []}, now=150.0)
        assert await calls.settle(
            "call_1", taken, round_=1, sent={"a": {"action": "cancel"}}, outcome={"content": []}, now=150.0
        )
        assert (await calls.get("call_1")).status == "completed"
    finally:
        await store.close()


async def test_answers_count_down_the_round_and_a_second_answer_is_refused(any_database: str) -> None:
    store, calls = await _calls(any_database)
    try:
        await _park(calls)
        assert (await calls.get("call_1")).waiting == 2
        assert await calls.due(now=150.0) == []
        assert await calls.answer("call_1", 1, "a", Answer("accept", {"n": 2}), by="ada", now=120.0) == 1
        with pytest.raises(CallStateError, match="already answered"):
            await calls.answer("call_1", 1, "a", Answer("cancel"), by="ada", now=121.0)
        assert await calls.answer("call_1", 1, "b", Answer("accept"), by="ada", now=122.0) == 0
        assert await calls.due(now=150.0) == ["call_1"]
        assert await calls.answers("call_1", 1) == {"a": Answer("accept", {"n": 2}), "b": Answer("accept")}
        # Parked on the next round, the old round's answers are refused.
        token = await calls.claim("call_1", 1, now=130.0, lease=30.0)
        assert token is not None
        assert await calls.settle("call_1", token, round_=1, sent={}, outcome=ASKED, deadline=500.0, now=131.0)
        with pytest.raises(CallStateError, match="not waiting on round 1"):
            await calls.answer("call_1", 1, "a", Answer("cancel"), by="ada", now=132.0)
        record = await calls.get("call_1")
        assert (record.round, record.waiting, record.deadline) == (2, 2, 500.0)
        assert [r["round"] for r in await calls.rounds("call_1")] == [1, 2]
    finally:
        await store.close()


async def test_listing_narrows_to_a_person_and_a_run(tmp_path: Path) -> None:
    store, calls = await _calls(f"sqlite:///{tmp_path / 'rt.db'}")
    try:
        for i in range(3):
            await _park(calls, f"call_{i}")
        assert {r.id for r in await calls.listing(principal="ada", run_id="r")} == {"call_0", "call_1", "call_2"}
        assert await calls.listing(principal="bob") == []
        assert await calls.count() == 3
        # Newest first, page after page, each call once (two were parked in the same instant).
        pages = [[r.id for r in page] async for page in calls.pages(size=2)]
        assert pages == [["call_2", "call_1"], ["call_0"]]
    finally:
        await store.close()


QUESTIONS = pending_questions("c", 1, ASKED)


@pytest.mark.parametrize(
    ("answers", "now", "expected"),
    [
        ({}, 150.0, Waiting(("a", "b"))),
        ({"a": Answer("decline")}, 150.0, Waiting(("b",))),
        (
            {"a": Answer("decline"), "b": Answer("accept")},
            150.0,
            Ready({"a": Answer("decline"), "b": Answer("accept")}),
        ),
        ({}, 200.0, Ready({"a": Answer("cancel"), "b": Answer("cancel")}, cancelled=("a", "b"))),
        ({"b": Answer("accept")}, 250.0, Ready({"a": Answer("cancel"), "b": Answer("accept")}, cancelled=("a",))),
        ({}, 199.999, Waiting(("a", "b"))),
    ],
    ids=["nothing answered", "one of two", "all answered", "at the deadline", "after it, one answered", "just before"],
)
def test_a_round_goes_when_all_is_answered_or_the_deadline_has_passed(
    answers: dict[str, Answer], now: float, expected: Waiting | Ready
) -> None:
    assert resume_decision(QUESTIONS, answers, now=now, deadline=200.0) == expected


def test_questions_are_read_by_their_server_keys() -> None:
    a, b = QUESTIONS
    assert (a.ref, a.mode, a.message, b.mode, b.url, b.host) == (
        "c/1/a",
        "form",
        "A?",
        "url",
        "https://x.example/b",
        "x.example",
    )
    assert Answer("accept", {"n": 1}).wire() == {"action": "accept", "content": {"n": 1}}
    assert Answer("decline", {"n": 1}).wire() == {"action": "decline"}


SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2},
        "email": {"type": "string", "format": "email"},
        "size": {"type": "string", "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}]},
        "count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 1},
        "ratio": {"type": "number"},
        "ok": {"type": "boolean", "default": False},
        "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 2},
    },
    "required": ["name", "size"],
}


def test_a_form_schema_is_read_into_fields_with_their_choices_bounds_and_defaults() -> None:
    found = {f.name: f for f in fields(SCHEMA)}
    assert list(found) == ["name", "email", "size", "count", "ratio", "ok", "tags"]
    assert (found["size"].choices, found["size"].choice_titles, found["size"].required) == (
        ("s", "l"),
        ("Small", "Large"),
        True,
    )
    assert (found["count"].kind, found["count"].default, found["count"].hint) == ("integer", 1, "integer, 1 to 9")
    assert (found["tags"].kind, found["tags"].choices) == ("multi", ("a", "b", "c"))
    assert (
        parse(found["ok"], "yes") is True
        and parse(found["count"], " 3 ") == 3
        and parse(found["tags"], "a, c") == ["a", "c"]
    )
    assert parse(found["name"], "") is None
    with pytest.raises(InvalidAnswerError, match="not an integer"):
        parse(found["count"], "three")


def test_an_answer_that_does_not_fit_the_form_names_every_field_that_is_wrong() -> None:
    assert validate(SCHEMA, {"name": "Ada", "size": "s", "count": 3, "email": None}) == {
        "name": "Ada",
        "size": "s",
        "count": 3,
    }
    with pytest.raises(InvalidAnswerError) as caught:
        validate(
            SCHEMA,
            {"name": "A", "size": "m", "count": 10, "email": "nope", "ok": "yes", "tags": ["a", "b", "c"], "x": 1},
        )
    message = str(caught.value)
    for part in ["x: the form does not ask for it", "Name: must be at least 2 characters", "size: must be one of s, l",
                 "count: must be at most 9", "email: must be an email address", "ok: must be true or false",
                 "tags: choose at most 2"]:  # fmt: skip
        assert part in message
    with pytest.raises(InvalidAnswerError, match="Name: required"):
        validate(SCHEMA, {"size": "s"})


@pytest.mark.parametrize(
    ("wait", "lease", "warned"),
    [(30.0, 120.0, False), (59.0, 120.0, False), (60.0, 120.0, True), (None, 120.0, True), (5.0, 8.0, True)],
)
async def test_a_timeout_that_can_outlast_half_the_resume_lease_is_warned_of_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, wait: float | None, lease: float, warned: bool
) -> None:
    settings = load_settings(database_url=f"sqlite:///{tmp_path / 'agent.db'}", resume_lease=lease)
    with caplog.at_level("WARNING", logger="askback.runtime"):
        runtime = await Runtime.open(settings=settings, timeout=wait)
        await runtime.close()
    said = [r.getMessage() for r in caplog.records if "ASKBACK_RESUME_LEASE" in r.getMessage()]
    assert bool(said) == warned, said
    if warned:
        assert f"keep the timeout under {lease / 2:g} s" in said[0]
