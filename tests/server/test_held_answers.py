"""Answers held on the server (`ASKBACK_ANSWERS=server`): the sealed `requestState` carries the flow's handle and
question digests but no answer; the answers wait in the store, sealed with keys derived from the state key ring, on
every instance, and are gone once the flow completes or expires."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text as sql

from _http import Served, served
from askback.core.state import FlowState, RecordedAnswer
from askback.server.held import AnswerSeal
from askback.store import Store
from askback.testing import accept, call_round, state_of, text

pytestmark = [pytest.mark.anyio, pytest.mark.http]

SECRET_WORD = "production"


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("held") / "db.sqlite"
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=3, answers="server") as server:
        yield server


@pytest.fixture(scope="module")
def inline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("inline") / "db.sqlite"
    with served(f"sqlite:///{path}", [secrets.token_urlsafe(48)], workers=1, answers="state") as server:
        yield server


async def _second_state(server: Served, service: str) -> tuple[str, str]:
    """Run a production deploy to its second question; the plaintext of the state that comes with it, and the
    state itself."""
    token = "demo-ada"
    first = await call_round(server.url, "deploy", {"service": service}, token=token)
    second = await call_round(
        server.url,
        "deploy",
        {"service": service},
        responses={"pick_env": accept(environment=SECRET_WORD)},
        request_state=state_of(first),
        token=token,
    )
    sealed = state_of(second)
    return server.codec().unseal(sealed).decode(), sealed


async def _held_rows(server: Served) -> list[tuple[str, int, str]]:
    store = await Store.open(server.database_url, migrate=False)
    try:
        async with store.database.engine.connect() as conn:
            rows = (await conn.execute(sql("SELECT flow_id, round, sealed FROM askback_held_answers"))).all()
        return [(r.flow_id, r.round, r.sealed) for r in rows]
    finally:
        await store.close()


async def test_the_unsealed_state_carries_no_answer_and_the_store_holds_it_sealed(held: Served) -> None:
    plaintext, sealed = await _second_state(held, "held-web")
    assert SECRET_WORD not in plaintext
    state = FlowState.decode(json.loads(plaintext)["s"])
    assert state is not None and state.held and state.answers == {} and list(state.asked) == ["confirm_prod"]
    rows = [r for r in await _held_rows(held) if r[0] == state.flow_id]
    assert [(flow, rnd) for flow, rnd, _ in rows] == [(state.flow_id, state.round)]
    assert SECRET_WORD not in rows[0][2]

    # The last round lands on any of the three instances, which put the answer back from the store.
    done = await call_round(
        held.url,
        "deploy",
        {"service": "held-web"},
        responses={"confirm_prod": accept(confirm=True)},
        request_state=sealed,
        token="demo-ada",
    )
    assert text(done.result) == "Deployed held-web to production."
    assert [r for r in await _held_rows(held) if r[0] == state.flow_id] == []


async def test_in_the_default_mode_the_answer_travels_in_the_sealed_state(inline: Served) -> None:
    plaintext, _ = await _second_state(inline, "inline-web")
    assert SECRET_WORD in plaintext
    state = FlowState.decode(json.loads(plaintext)["s"])
    assert state is not None and not state.held and state.answers["pick_env"].content == {"environment": SECRET_WORD}
    assert await _held_rows(inline) == []


async def test_a_held_state_whose_answers_are_gone_ends_the_flow_as_expired(held: Served) -> None:
    _, sealed = await _second_state(held, "gone-web")
    store = await Store.open(held.database_url, migrate=False)
    try:
        async with store.database.engine.begin() as conn:
            await conn.execute(sql("DELETE FROM askback_held_answers"))
    finally:
        await store.close()
    done = await call_round(
        held.url,
        "deploy",
        {"service": "gone-web"},
        responses={"confirm_prod": accept(confirm=True)},
        request_state=sealed,
        token="demo-ada",
    )
    assert text(done.result).startswith("Expired:")


def test_sealed_answers_open_only_for_their_flow_and_round_and_under_the_ring() -> None:
    answers = {"pick_env": RecordedAnswer("accept", {"environment": SECRET_WORD}, "digest")}
    old, new = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    sealed = AnswerSeal([old]).seal("flow-1", 2, answers)
    assert SECRET_WORD not in sealed
    assert AnswerSeal([new, old]).open("flow-1", 2, sealed) == answers  # rotation: the old key still opens
    assert AnswerSeal([old]).open("flow-2", 2, sealed) is None  # another flow's
    assert AnswerSeal([old]).open("flow-1", 3, sealed) is None  # another round's
    assert AnswerSeal([new]).open("flow-1", 2, sealed) is None  # a key the ring no longer holds
    spoiled = sealed[:-4] + ("AAAA" if not sealed.endswith("AAAA") else "BBBB")
    assert AnswerSeal([old]).open("flow-1", 2, spoiled) is None


async def test_flows_whose_rounds_land_on_different_instances_all_complete(held: Served) -> None:
    instances: set[str | None] = set()
    for i in range(10):
        service = f"spread-{i}"
        first = await call_round(held.url, "deploy", {"service": service}, token="demo-ada")
        second = await call_round(
            held.url,
            "deploy",
            {"service": service},
            responses={"pick_env": accept(environment=SECRET_WORD)},
            request_state=state_of(first),
            token="demo-ada",
        )
        done = await call_round(
            held.url,
            "deploy",
            {"service": service},
            responses={"confirm_prod": accept(confirm=True)},
            request_state=state_of(second),
            token="demo-ada",
        )
        assert text(done.result) == f"Deployed {service} to production."
        instances |= {first.instance, second.instance, done.instance}
    assert len(instances) > 1


async def test_answers_held_past_their_deadline_are_pruned_by_the_next_round_that_holds_answers(held: Served) -> None:
    store = await Store.open(held.database_url, migrate=False)
    try:
        async with store.database.engine.begin() as conn:
            await conn.execute(
                sql("INSERT INTO askback_held_answers (flow_id, round, sealed, expires_at) VALUES ('old', 2, 'x', 1.0)")
            )
    finally:
        await store.close()
    await _second_state(held, "prune-web")
    assert "old" not in {flow for flow, _, _ in await _held_rows(held)}
