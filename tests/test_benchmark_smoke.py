"""The benchmarks still run: their quick modes complete and report a figure for each mode or configuration. Their
figures are not checked here (timings on a shared machine are noise to a test); read them from
`python benchmarks/bench_flow.py`, `python benchmarks/bench_scaleout.py` and the others."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks" / "bench_flow.py"
SCALEOUT = ROOT / "benchmarks" / "bench_scaleout.py"
RUNTIME = ROOT / "benchmarks" / "bench_runtime.py"
PENDING = ROOT / "benchmarks" / "bench_pending.py"
TASKS = ROOT / "benchmarks" / "bench_tasks.py"
APPROVALS = ROOT / "benchmarks" / "bench_approvals.py"
STATEMENTS = ROOT / "benchmarks" / "bench_statements.py"
ROUND_COST = ROOT / "benchmarks" / "bench_round_cost.py"
SCALEOUT_CONFIGS = (
    "(a) askback-sqlite-1",
    "(b) askback-pg-1",
    "(c) askback-pg-3-nginx",
    "(d) askback-sqlite-3-nginx",
    "(e) bare-1",
    "(f) bare-3-nginx",
)

pytestmark = pytest.mark.http


def quick(bench: object) -> tuple[list[str], str]:
    """Run a benchmark with `--quick`; its output lines, and everything it printed (for a failure message)."""
    done = subprocess.run(
        [sys.executable, str(bench), "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    output = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert done.returncode == 0, output
    return done.stdout.splitlines(), output


def test_quick_benchmark_reports_a_ratio_for_each_mode() -> None:
    lines, output = quick(BENCH)
    for mode in ("in-memory", "http"):
        assert any(line.startswith(mode) and "ratio" in line for line in lines), output


@pytest.mark.skipif(shutil.which("nginx") is None and not os.path.exists("/usr/sbin/nginx"), reason="needs nginx")
@pytest.mark.skipif(not glob.glob("/usr/lib/postgresql/*/bin/initdb"), reason="needs PostgreSQL")
def test_scaleout_benchmark_runs_quick() -> None:
    lines, output = quick(SCALEOUT)
    for config in SCALEOUT_CONFIGS:
        assert any(line.startswith(f"{config} ") and "flows/s" in line for line in lines), output


def test_runtime_benchmark_runs_quick_and_reports_listing_resume_and_memory() -> None:
    lines, output = quick(RUNTIME)
    assert any(line.startswith("parked: ") and "real calls" in line for line in lines), output
    for listing in ("pending(principal=", "calls.listing(), all"):
        assert sum(line.startswith(listing) and "target" in line for line in lines) == 2, output
    assert sum(line.startswith("resume ") and "overhead" in line for line in lines) == 2, output
    assert any(line.startswith("after parking 200 ") for line in lines), output


def test_quick_benchmark_reports_raw_http_rounds_against_both_baselines_and_a_second_askback() -> None:
    lines, output = quick(BENCH)
    for shape in ("write", "deploy"):
        for ratio in ("askback/bare+ledger", "askback/bare", "askback/askback-2"):
            assert any(line.startswith(f"raw-http  {shape} ") and f"ratio {ratio} " in line for line in lines), output
    assert any(line.startswith("mode ") and "round 3 p50" in line for line in lines), output
    assert sum(line.startswith("replayed final ") and "bare+ledger" in line for line in lines) == 2, output
    assert any(line.startswith("deployments recorded: ") for line in lines), output
    for mode in ("http", "in-memory"):
        assert any(line.startswith(mode) and "ratio askback/bare+ledger " in line for line in lines), output


def test_pending_benchmark_runs_quick_and_reports_growth_per_pending_question() -> None:
    lines, output = quick(PENDING)
    assert any(line.startswith("server: ") and "worker pid" in line for line in lines), output
    assert sum(bool(re.match(r"mrtr +[\d,]+ pending ", line)) for line in lines) == 2, output
    assert sum(bool(re.match(r"legacy +[\d,]+ waiting ", line)) for line in lines) == 2, output
    assert any(line.startswith("mrtr: from ") and "per further pending question" in line for line in lines), output
    assert any(line.startswith("legacy: from ") and "per further pending" in line for line in lines), output


def test_tasks_benchmark_runs_quick_and_reports_a_round_against_mrtr_growth_and_pruning() -> None:
    lines, output = quick(TASKS)
    for side in ("mrtr round ", "task round "):
        assert any(line.startswith(side) and "p50" in line and "p90" in line for line in lines), output
    assert any(line.startswith("ratio task/mrtr ") for line in lines), output
    assert any(line.startswith("a waiting task's row holds ") for line in lines), output
    assert any(line.startswith("waiting: ") and "traced memory per waiting task" in line for line in lines), output
    assert any(line.startswith("after one tasks/get (answered -32602): 0 rows left") for line in lines), output


def test_approvals_benchmark_runs_quick_and_reports_a_gated_flow_against_a_confirm_and_the_pages() -> None:
    lines, output = quick(APPROVALS)
    for side, steps in (("confirm flow", ("round 1", "round 2")), ("approval flow", ("request", "decide", "retry"))):
        assert any(line.startswith(side) and all(step in line for step in steps) for line in lines), output
    assert any(line.startswith("ratio approval/confirm ") and "p50" in line and "p99" in line for line in lines), output
    for page in ("request page GET ", "decision POST "):
        assert any(line.startswith(page) and "p50" in line for line in lines), output
    assert any(line.startswith("requests in the store: ") and "consumed" in line for line in lines), output


def test_statements_benchmark_runs_quick_and_prints_a_count_for_every_round_of_every_shape() -> None:
    lines, output = quick(STATEMENTS)
    assert lines[0].startswith("shape") and "sqlite stmts/tx" in lines[0], output
    for shape in ("no question", "write (form + effect)", "confirm", "replayed answer", "task (confirm + effect)"):
        assert any(line.startswith(shape) and re.search(r"\d+ / \d+", line) for line in lines), output


def test_round_cost_benchmark_splits_each_shape_and_checks_its_replays() -> None:
    lines, output = quick(ROUND_COST)
    for shape in ("write", "deploy"):
        assert any(line.startswith(f"{shape}: ") and "p50 per flow" in line for line in lines), output
    for side in ("askback", "askback-2", "bare+ledger"):  # flow, store, audit log, the rest
        assert sum(re.match(rf"{re.escape(side)} +\d+ +\d+ +\d+ +-?\d+$", line) is not None for line in lines) == 2, (
            output
        )
    assert sum("noise floor askback/askback-2" in line and "store" in line for line in lines) == 2, output
    assert sum(line.endswith("askback yes, askback-2 yes, bare+ledger yes") for line in lines) == 2, output
    assert any(line.startswith("deployments recorded by bare+ledger: ") for line in lines), output
