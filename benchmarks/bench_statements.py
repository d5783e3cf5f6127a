"""How many SQL statements and transactions each round of each flow shape costs the store, on SQLite and PostgreSQL.

The same rounds and the same count as the test that pins them (tests/store/test_round_statements.py, through
tests/_statements.py): every shape's rounds as raw 2026-07-28 JSON-RPC to the real app in this process, each shape run
once before it is counted, every statement any askback connection runs counted at the driver. A count, not a timing:
the same on every machine. A statement run with several rows at once counts once per row on SQLite (its driver runs
each) and once on PostgreSQL.

    python benchmarks/bench_statements.py               # SQLite, and PostgreSQL when its binaries are installed
    python benchmarks/bench_statements.py --sqlite-only
"""

from __future__ import annotations

import argparse
import glob
import sys
import tempfile
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test suite's infrastructure: the rounds counted, PostgreSQL

from tests._statements import Cost, costs  # noqa: E402
from tests.infra import postgres  # noqa: E402


def table(found: dict[str, dict[str, dict[str, Cost]]]) -> list[str]:
    """One line per round of each shape: statements / transactions on each database."""
    databases = list(found)
    first = found[databases[0]]
    lines = [f"{'shape':<26}{'round':<14}" + "".join(f"{db + ' stmts/tx':>22}" for db in databases)]
    for shape, rounds in first.items():
        for name in rounds:
            cells = "".join(
                f"{found[db][shape][name].statements:>15} / {found[db][shape][name].transactions:<4}"
                for db in databases
            )
            lines.append(f"{shape:<26}{name:<14}{cells}".rstrip())
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sqlite-only", action="store_true", help="skip PostgreSQL")
    parser.add_argument("--quick", action="store_true", help="the same as --sqlite-only (for the smoke test)")
    args = parser.parse_args(argv)
    found: dict[str, dict[str, dict[str, Cost]]] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="askback-statements-")))
        found["sqlite"] = anyio.run(costs, f"sqlite:///{folder / 'askback.db'}")
        if not (args.sqlite_only or args.quick) and glob.glob("/usr/lib/postgresql/*/bin/initdb"):
            cluster = stack.enter_context(postgres())
            cluster.create_database("statements")
            found["postgresql"] = anyio.run(costs, cluster.url("statements"))
    for line in table(found):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
