"""What a round costs the store, pinned: the SQL statements and transactions each round of each flow shape runs, on
SQLite and PostgreSQL (tests/_statements.py drives and counts them; benchmarks/bench_statements.py prints the same
table). Equalities, so that a change that adds a statement or a transaction to a round fails here; a change that
removes one updates the figures below, and says so in its commit."""

from __future__ import annotations

import pytest
from tests._statements import Cost, costs

pytestmark = pytest.mark.anyio

# (statements, transactions) of each round, by shape. On SQLite a statement run for several rows at once counts once
# per row (an audit INSERT of two events counts two).
PINNED: dict[str, dict[str, dict[str, tuple[int, int]]]] = {
    "sqlite": {
        "no question": {"call": (0, 0)},
        "write (form + effect)": {"ask": (2, 1), "answer": (9, 3)},
        "confirm": {"ask": (2, 1), "answer": (7, 2)},
        "replayed answer": {"replay": (4, 2)},
        "task (confirm + effect)": {"ask": (5, 2), "get (asked)": (1, 1), "answer": (9, 4), "get (done)": (1, 1)},
        "task (confirm)": {"ask": (5, 2), "get (asked)": (1, 1), "answer": (6, 2), "get (done)": (1, 1)},
    },
    "postgresql": {
        "no question": {"call": (0, 0)},
        "write (form + effect)": {"ask": (2, 1), "answer": (8, 3)},
        "confirm": {"ask": (2, 1), "answer": (6, 2)},
        "replayed answer": {"replay": (4, 2)},
        "task (confirm + effect)": {"ask": (6, 2), "get (asked)": (1, 1), "answer": (8, 4), "get (done)": (1, 1)},
        "task (confirm)": {"ask": (6, 2), "get (asked)": (1, 1), "answer": (5, 2), "get (done)": (1, 1)},
    },
}


def _as_pairs(found: dict[str, dict[str, Cost]]) -> dict[str, dict[str, tuple[int, int]]]:
    return {
        shape: {name: (cost.statements, cost.transactions) for name, cost in rounds.items()}
        for shape, rounds in found.items()
    }


async def test_each_round_runs_exactly_the_statements_and_transactions_pinned_for_its_shape(
    any_database: str,
) -> None:
    dialect = "sqlite" if any_database.startswith("sqlite") else "postgresql"
    assert _as_pairs(await costs(any_database)) == PINNED[dialect]


@pytest.mark.parametrize("dialect", list(PINNED))
def test_a_task_round_costs_the_transactions_of_the_same_mrtr_round_and_one_more_per_effect_it_starts(
    dialect: str,
) -> None:
    """The `tasks/update` and the run it starts against the MRTR call that answers the same question: the same two
    transactions (the task's row is the round's claim; its end is written with its audit events). An effect's outcome
    is kept before the handler goes on in both (an instance stopped after the effect does not leave it to run again),
    and a task's effect takes one more: its claim with the task's row (a cancel either comes before it or finds the
    effect started)."""
    figures = PINNED[dialect]
    transactions = {shape: {name: cost[1] for name, cost in rounds.items()} for shape, rounds in figures.items()}
    assert transactions["task (confirm)"]["answer"] == transactions["confirm"]["answer"] == 2
    assert transactions["task (confirm + effect)"]["answer"] == transactions["write (form + effect)"]["answer"] + 1
    assert transactions["task (confirm)"]["get (done)"] == 1
