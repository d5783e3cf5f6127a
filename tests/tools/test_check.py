"""`askback check`: the probe against the askback demo server (everything passes), against a deliberately flawed
plain-SDK server (exactly its flaws fail), the command's output and exit statuses, and the verdicts on their own,
from hand-made exchanges."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from askback.cli.check import register
from askback.errors import ProbeError
from askback.testing import free_port
from askback.tools.check import (
    CHECKS,
    Exchange,
    Recorded,
    Report,
    Request,
    Response,
    evaluate,
    invalid_content,
    probe,
    run_check,
    tamper,
)
from infra import FIXTURES, wait_until

DELETE = {"project_id": "prj_42"}


def loopback(port: int) -> list[str]:
    return ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False


@pytest.fixture(scope="module")
def flawed_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """tests/fixtures/flawed_server.py under uvicorn on a loopback port, until the module's tests end."""
    port = free_port()
    log = tmp_path_factory.mktemp("flawed") / "server.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(FIXTURES), "flawed_server:app", *loopback(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until(lambda: _listening(port) or proc.poll() is not None, timeout=30, what="the flawed server's port")
        assert proc.poll() is None, f"the flawed server stopped:\n{log.read_text()}"
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def statuses(report: Report) -> dict[str, str]:
    return {check.name: check.status for check in report.checks}


def details(report: Report) -> dict[str, str]:
    return {check.name: check.detail for check in report.checks}


# Against real servers


def test_the_demo_passes_every_check(demo_url: str) -> None:
    report = run_check(demo_url, "delete_project", DELETE, token="demo-alice")
    assert [c.name for c in report.checks] == list(CHECKS)
    assert statuses(report) == dict.fromkeys(CHECKS, "pass"), details(report)
    said = details(report)
    assert said["result-type"] == "input_required, asking confirm_project (form)"
    assert said["declared-modes-only"].startswith("form only: asked confirm_project (form); url only: -32021")
    assert said["missing-capability"] == '-32021, HTTP 400, requiredCapabilities {"elicitation":{"form":{}}}'
    assert said["tampered-state"] == "refused: error -32602 (HTTP 400)"
    assert said["decline-completes"].startswith("complete (isError: false): 'Cancelled")
    assert said["invalid-answer-reasked"].endswith("confirm_project was asked again")
    assert report.counts() == {"pass": 9, "fail": 0, "skip": 0}


def test_a_fallback_to_a_tool_argument_passes_the_missing_capability_check(demo_url: str) -> None:
    report = run_check(demo_url, "deploy", {"service": "web"}, token="demo-alice")
    assert statuses(report) == dict.fromkeys(CHECKS, "pass"), details(report)
    assert details(report)["missing-capability"] == "fallback: a tool error naming the argument environment"


def test_a_tool_that_never_asks_skips_the_question_checks_and_says_why(demo_url: str) -> None:
    report = run_check(demo_url, "list_projects", {}, token="demo-alice")
    assert statuses(report) == {
        "result-type": "pass",
        "declared-modes-only": "skip",
        "missing-capability": "skip",
        "tampered-state": "skip",
        "decline-completes": "skip",
        "cancel-completes": "skip",
        "no-legacy-fields": "pass",
        "invalid-answer-reasked": "skip",
        "protocol-version-header": "pass",
    }
    assert "without asking" in details(report)["result-type"]
    assert "completed at once" in details(report)["tampered-state"]


@pytest.mark.http
def test_the_flawed_server_fails_exactly_where_it_is_flawed(flawed_url: str) -> None:
    report = run_check(flawed_url, "delete_project", DELETE)
    failed = {name for name, status in statuses(report).items() if status == "fail"}
    # protocol-version-header: the plain SDK routes a 2025-11-25 header to its legacy stateless path and serves
    # the request (HTTP 200), although the body's _meta says 2026-07-28 (R3 wants 400, -32020).
    assert failed == {"declared-modes-only", "missing-capability", "invalid-answer-reasked", "protocol-version-header"}
    assert {name for name, status in statuses(report).items() if status == "pass"} == {
        "result-type",
        "tampered-state",  # the SDK seals requestState even for a hand-built InputRequiredResult
        "decline-completes",
        "cancel-completes",
        "no-legacy-fields",  # the SDK drops elicitationId from a 2026-07-28 URL request
    }
    said = details(report)
    assert "form only: asked sign_in in url mode" in said["declared-modes-only"]
    assert "url only: asked confirm in form mode" in said["declared-modes-only"]
    assert said["missing-capability"].startswith("asked confirm (form), sign_in (url) of a request that declared no")
    assert said["invalid-answer-reasked"].endswith("the call completed on an invalid answer")
    # An ignored decline still completes: the check passes, and the report shows what the tool said.
    assert "Deleted prj_42." in said["decline-completes"]
    assert "header 2025-11-25: HTTP 200" in said["protocol-version-header"]
    assert "header 2099-01-01: HTTP 400, -32020" in said["protocol-version-header"]


@pytest.mark.http
def test_evidence_shows_the_request_and_the_wire_fields_but_no_state(flawed_url: str) -> None:
    report = run_check(flawed_url, "delete_project", DELETE, token="s3cret-token")
    tampered = report.by_name()["tampered-state"].evidence[0]
    assert tampered.request.startswith("#") and "requestState with char" in tampered.request
    assert tampered.response.startswith("HTTP 400, error -32602")
    everything = json.dumps(report.to_json())
    assert "s3cret-token" not in everything and "v1." not in everything


# The command


def cli() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """Only here so that `check` is a subcommand, as in `askback`."""

    register(app)
    return app


runner = CliRunner()


def stderr_of(result: Any) -> str:
    """The command's error output with the terminal's line wrapping undone."""
    return " ".join(result.stderr.split())


def test_the_command_prints_a_table_and_exits_0_when_nothing_failed(demo_url: str) -> None:
    result = runner.invoke(
        cli(),
        ["check", demo_url, "--tool", "delete_project", "--args", json.dumps(DELETE), "--token", "demo-alice"],
        env={"COLUMNS": "200"},
    )
    assert result.exit_code == 0, result.output
    for name in CHECKS:
        assert name in result.stdout
    assert "OK: 9 passed, 0 failed, 0 skipped" in result.stdout
    assert "\x1b[" not in result.stdout  # colour only on a terminal


@pytest.mark.http
def test_the_command_prints_json_and_exits_1_when_a_check_failed(flawed_url: str) -> None:
    result = runner.invoke(
        cli(), ["check", flawed_url, "--tool", "delete_project", "--args", '{"project_id": "p"}', "--json"]
    )
    assert result.exit_code == 1, result.output
    document = json.loads(result.stdout)
    assert document["url"] == flawed_url and document["tool"] == "delete_project"
    assert document["summary"] == {"pass": 5, "fail": 4, "skip": 0}
    first = document["checks"][0]
    assert set(first) == {"name", "status", "rules", "detail", "evidence"}
    assert first["rules"] == ["R5", "R7"] and first["evidence"][0]["response"].startswith("HTTP 200")


@pytest.mark.parametrize(
    ("args", "says"),
    [("{not json", "--args is not valid JSON"), ("[1, 2]", "--args must be a JSON object")],
)
def test_bad_arguments_exit_2_saying_what_to_give(args: str, says: str) -> None:
    result = runner.invoke(cli(), ["check", "http://127.0.0.1:9/mcp", "--tool", "t", "--args", args])
    assert result.exit_code == 2
    assert says in stderr_of(result)


def test_an_unreachable_url_exits_2_with_a_clear_message() -> None:
    url = f"http://127.0.0.1:{free_port()}/mcp"
    result = runner.invoke(cli(), ["check", url, "--tool", "delete_project", "--timeout", "2"])
    assert result.exit_code == 2
    assert f"cannot check {url}" in stderr_of(result) and "Is the server running" in stderr_of(result)


def test_a_url_that_is_not_http_exits_2() -> None:
    result = runner.invoke(cli(), ["check", "localhost:8000/mcp", "--tool", "t"])
    assert result.exit_code == 2 and "not an http:// or https:// URL" in stderr_of(result)


def test_an_unknown_tool_exits_2_listing_the_tools(demo_url: str) -> None:
    with pytest.raises(ProbeError, match=r"lists no tool named 'nope'.*delete_project"):
        run_check(demo_url, "nope", {}, token="demo-alice")


def test_a_wrong_endpoint_exits_2(demo_url: str) -> None:
    with pytest.raises(ProbeError, match="Is this the MCP endpoint"):
        run_check(demo_url.removesuffix("/mcp") + "/healthz", "delete_project", DELETE)


# The plan and the verdicts, without a server


def test_invalid_content_breaks_the_first_property_and_fills_the_rest() -> None:
    def schema(first: dict[str, Any]) -> dict[str, Any]:
        return {"type": "object", "properties": {"a": first, "b": {"type": "integer", "minimum": 3}}}

    assert invalid_content(schema({"type": "string"})) == (
        {"a": 12345, "b": 3},
        "a number where a string is asked (a=12345)",
    )
    assert invalid_content(schema({"type": "integer"}))[0]["a"] == "not a number"  # type: ignore[index]
    assert invalid_content(schema({"type": "boolean"}))[0]["a"] == "not a boolean"  # type: ignore[index]
    enum = invalid_content(schema({"type": "string", "enum": ["dev", "prod"]}))
    assert enum is not None and enum[0]["a"] not in ("dev", "prod") and "outside the enum" in enum[1]
    titled = invalid_content(schema({"type": "string", "oneOf": [{"const": "x", "title": "X"}]}))
    assert titled is not None and titled[0]["a"] != "x"
    assert invalid_content({"type": "object", "properties": {}}) is None
    assert invalid_content(None) is None


def test_tampering_changes_one_character_in_the_middle() -> None:
    state = "v1.abcdefghijklmnop"
    changed, where = tamper(state)
    assert where == len(state) // 2 and len(changed) == len(state)
    assert [i for i, (a, b) in enumerate(zip(state, changed, strict=True)) if a != b] == [where]


ASK = {
    "resultType": "input_required",
    "inputRequests": {
        "confirm": {
            "method": "elicitation/create",
            "params": {
                "mode": "form",
                "message": "Type the name.",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        }
    },
    "requestState": "opaque-state-0123456789",
}


def answer(status: int, *, result: Mapping[str, Any] | None = None, error: Mapping[str, Any] | None = None) -> Response:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 0}
    message.update({"result": result} if result is not None else {"error": error})
    return Response(status=status, message=message)


def well_behaved(request: Request) -> Response:
    """What a correct server answers, from the request alone (a tampered state is any state but ASK's)."""
    params = request.body["params"]
    if request.body["method"] == "tools/list":
        if request.headers["MCP-Protocol-Version"] != params["_meta"]["io.modelcontextprotocol/protocolVersion"]:
            return answer(400, error={"code": -32020, "message": "header mismatch"})
        return answer(200, result={"resultType": "complete", "tools": [{"name": "t", "inputSchema": {}}]})
    form = "form" in params["_meta"]["io.modelcontextprotocol/clientCapabilities"].get("elicitation", {})
    responses = params.get("inputResponses")
    if "requestState" in params and params["requestState"] != ASK["requestState"]:
        return answer(400, error={"code": -32602, "message": "Invalid or expired requestState"})
    if not form:
        return answer(
            400, error={"code": -32021, "message": "m", "data": {"requiredCapabilities": {"elicitation": {}}}}
        )
    if responses and responses["confirm"]["action"] != "accept":
        return answer(200, result={"resultType": "complete", "content": [{"type": "text", "text": "Cancelled."}]})
    return answer(200, result=ASK)


def drive(server: Callable[[Request], Response]) -> tuple[list[Request], Recorded]:
    sent: list[Request] = []
    plan = probe("t", {"x": 1})
    try:
        request = next(plan)
        while True:
            sent.append(request)
            request = plan.send(server(request))
    except StopIteration as done:
        return sent, done.value


def test_every_request_carries_the_envelope_matching_headers_and_a_new_id() -> None:
    sent, _ = drive(well_behaved)
    assert len(sent) == 14  # the plan is finite: one listing, round one, three declarations, tamper, 3 x 2, 2 headers
    assert len({r.id for r in sent}) == len(sent)
    for request in sent:
        meta = request.body["params"]["_meta"]
        assert meta["io.modelcontextprotocol/protocolVersion"] == "2026-07-28"
        assert "io.modelcontextprotocol/clientCapabilities" in meta
        assert request.headers["Mcp-Method"] == request.body["method"]
        assert request.headers["Accept"] == "application/json, text/event-stream"
        if request.body["method"] == "tools/call":
            assert request.headers["Mcp-Name"] == "t" and request.headers["MCP-Protocol-Version"] == "2026-07-28"
    echoed = [r.body["params"]["requestState"] for r in sent if "requestState" in r.body["params"]]
    assert echoed.count(ASK["requestState"]) == 3  # the decline, cancel and invalid-answer branches


def test_a_well_behaved_server_passes_every_check() -> None:
    _, recorded = drive(well_behaved)
    checks = evaluate(recorded)
    assert {c.name: c.status for c in checks} == dict.fromkeys(CHECKS, "pass")


def recorded_with(round_one: Response, **others: Exchange) -> Recorded:
    request = Request({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {}}, {}, "#2 tools/call t")
    return Recorded("t", {}, {"properties": {"env": {}}}, (), Exchange(request, round_one), **others)  # type: ignore[arg-type]


def one(response: Response, number: int = 3) -> Exchange:
    return Exchange(Request({"jsonrpc": "2.0", "id": number, "method": "tools/call"}, {}, f"#{number}"), response)


def verdict(recorded: Recorded, name: str) -> tuple[str, str]:
    check = {c.name: c for c in evaluate(recorded)}[name]
    return check.status, check.detail


def test_legacy_fields_and_codes_anywhere_fail() -> None:
    legacy = {
        **ASK,
        "inputRequests": {
            "go": {
                "method": "elicitation/create",
                "params": {"mode": "url", "url": "https://x", "message": "m", "elicitationId": "e1"},
            }
        },
    }
    status, detail = verdict(recorded_with(answer(200, result=legacy)), "no-legacy-fields")
    assert status == "fail" and "result.inputRequests.go.params.elicitationId" in detail
    old_code = recorded_with(
        answer(200, result=ASK), no_capabilities=one(answer(400, error={"code": -32042, "message": "URL required"}))
    )
    status, detail = verdict(old_code, "no-legacy-fields")
    assert status == "fail" and "-32042" in detail
    pushed = Response(
        status=200,
        message={"jsonrpc": "2.0", "id": 2, "result": ASK},
        others=({"jsonrpc": "2.0", "id": 9, "method": "elicitation/create"},),
    )
    assert verdict(recorded_with(pushed), "no-legacy-fields")[0] == "fail"


def test_missing_capability_wants_400_and_required_capabilities() -> None:
    no_data = recorded_with(
        answer(200, result=ASK), no_capabilities=one(answer(200, error={"code": -32021, "message": "m"}))
    )
    status, detail = verdict(no_data, "missing-capability")
    assert status == "fail" and "HTTP 200, not 400" in detail and "requiredCapabilities" in detail
    vague = {"resultType": "complete", "isError": True, "content": [{"type": "text", "text": "cannot ask"}]}
    status, detail = verdict(
        recorded_with(answer(200, result=ASK), no_capabilities=one(answer(200, result=vague))), "missing-capability"
    )
    assert status == "fail" and "names no argument" in detail
    named = {**vague, "content": [{"type": "text", "text": "env is required"}]}
    status, detail = verdict(
        recorded_with(answer(200, result=ASK), no_capabilities=one(answer(200, result=named))), "missing-capability"
    )
    assert (status, detail) == ("pass", "fallback: a tool error naming the argument env")


def test_a_result_without_result_type_fails_and_the_question_checks_skip() -> None:
    recorded = recorded_with(answer(200, result={"content": []}))
    checks = {c.name: c for c in evaluate(recorded)}
    assert checks["result-type"].status == "fail" and "no resultType" in checks["result-type"].detail
    assert checks["tampered-state"].status == "skip"
