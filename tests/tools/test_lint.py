"""`askback lint`: each rule on a fixture written the old way, clean 2026-07-28 code left alone, noqa, selection,
output and the command's exit statuses."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from askback.cli.lint import register
from askback.tools.lint import RULES, Finding, lint_paths, lint_source, parse_codes, render_json, render_text
from infra import FIXTURES, ROOT

LINT_FIXTURES = FIXTURES / "lint"

# fixture -> (line, code) of every finding, in order
FLAGGED: dict[str, list[tuple[int, str]]] = {
    "abk100_syntax_error.py": [(2, "ABK100")],
    "abk101_push_elicitation.py": [
        (12, "ABK101"),
        (17, "ABK101"),
        (18, "ABK101"),
        (19, "ABK101"),
        (24, "ABK101"),
        (28, "ABK101"),
    ],
    "abk102_elicitation_complete.py": [(4, "ABK102"), (6, "ABK102"), (10, "ABK102"), (14, "ABK102"), (18, "ABK102")],
    "abk103_elicitation_id.py": [(7, "ABK103"), (11, "ABK103"), (14, "ABK103"), (15, "ABK103")],
    "abk104_url_elicitation_required.py": [(3, "ABK104"), (6, "ABK104"), (11, "ABK104"), (15, "ABK104")],
    "abk105_write_before_input.py": [
        (16, "ABK105"),
        (17, "ABK105"),
        (25, "ABK105"),
        (26, "ABK101"),
        (32, "ABK105"),
        (39, "ABK105"),
    ],
    "abk105_shared_state.py": [
        (18, "ABK105"),
        (19, "ABK105"),
        (20, "ABK105"),
        (21, "ABK105"),
        (22, "ABK105"),
        (23, "ABK105"),
    ],
    "abk106_secret_in_request_state.py": [(7, "ABK106"), (16, "ABK106"), (21, "ABK106"), (25, "ABK106")],
    "abk107_secret_in_form.py": [
        (13, "ABK107"),
        (18, "ABK107"),
        (19, "ABK107"),
        (40, "ABK107"),
        (42, "ABK107"),
        (48, "ABK107"),
        (52, "ABK107"),
    ],
    "delete_project_before.py": [(19, "ABK105"), (20, "ABK101")],
    "noqa.py": [(10, "ABK103"), (11, "ABK101"), (11, "ABK103"), (12, "ABK101")],
}

CLEAN = [
    "clean_askback_handler.py",
    "clean_reads_before_input.py",
    "clean_mentions_elicit.py",
    "clean_request_state.py",
    "clean_form.py",
    "delete_project_after.py",
]


def lint_fixture(name: str, **kwargs: set[str]) -> list[Finding]:
    path = LINT_FIXTURES / name
    return lint_source(path.read_text(encoding="utf-8"), str(path), **kwargs)


def positions(findings: list[Finding]) -> list[tuple[int, str]]:
    return [(f.line, f.code) for f in findings]


def build_app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """askback, as the lead's cli.py will build it."""

    register(app)
    return app


runner = CliRunner()


# --- the rules ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(FLAGGED))
def test_old_style_code_is_flagged_at_exact_lines(name: str) -> None:
    assert positions(lint_fixture(name)) == FLAGGED[name]


def test_every_rule_has_a_fixture_that_it_flags() -> None:
    covered = {code for expected in FLAGGED.values() for _, code in expected}
    assert covered == set(RULES)


@pytest.mark.parametrize("name", CLEAN)
def test_2026_style_code_is_not_flagged(name: str) -> None:
    assert lint_fixture(name) == []


def test_the_legacy_delete_project_needs_changes_and_its_askback_version_none() -> None:
    before = lint_fixture("delete_project_before.py")
    assert {f.code for f in before} == {"ABK101", "ABK105"}
    assert lint_fixture("delete_project_after.py") == []


def test_every_finding_carries_its_rules_hint() -> None:
    for name in FLAGGED:
        for finding in lint_fixture(name):
            assert finding.hint == RULES[finding.code].hint
            assert finding.message


def test_hints_point_at_the_askback_way() -> None:
    assert "flow.ask" in RULES["ABK101"].hint
    assert "flow.once" in RULES["ABK105"].hint
    assert "Link" in RULES["ABK107"].hint


def test_a_write_passed_to_flow_once_does_not_count_even_before_the_question() -> None:
    source = (
        "async def publish(post_id, flow):\n"
        "    await flow.once('publish', publish_later(post_id))\n"
        "    flow.ask(confirm)\n"
    )
    assert lint_source(source, "x.py") == []


def test_a_write_in_a_function_that_never_asks_is_not_flagged() -> None:
    assert lint_source("async def purge(project_id):\n    await db.purge_project(project_id)\n", "x.py") == []


def test_a_write_on_the_line_of_the_question_is_not_before_it() -> None:
    source = "def go(flow):\n    return flow.ask(confirm) and db.commit()\n"
    assert lint_source(source, "x.py") == []


def test_a_nested_function_is_checked_on_its_own() -> None:
    source = (
        "async def outer(flow):\n"
        "    async def inner(ctx):\n"
        "        await db.insert_row(1)\n"
        "        await ctx.elicit('now?', schema=None)  # noqa: ABK101\n"
        "    await db.insert_row(2)\n"
        "    flow.ask(confirm)\n"
    )
    assert positions(lint_source(source, "x.py")) == [(3, "ABK105"), (5, "ABK105")]


def test_a_change_to_the_modules_state_before_the_first_question_names_the_module_level_name() -> None:
    messages = [f.message for f in lint_fixture("abk105_shared_state.py")]
    assert messages[0].startswith("FILED.append(...) changes the module-level FILED: a write that runs before")
    assert messages[1].startswith("SEEN[...] changes the module-level SEEN")
    assert messages[2].startswith("del SEEN[...] changes the module-level SEEN")
    assert messages[4].startswith("assigning COUNT (global COUNT) changes the module-level COUNT")
    assert messages[5].startswith("await record(...) is not a known read and runs before the first question (line 24)")


@pytest.mark.parametrize(
    "line",
    [
        "await record(report_id)",
        "await audit_trail(report_id, 'seen')",
        "REGISTRY[report_id].append(1)",
        "REGISTRY.get(report_id).add(1)",
        "STATE.last = report_id",
        "REGISTRY.setdefault(report_id, []).append(1)",
        "REGISTRY.pop(report_id)",
        "REGISTRY.clear()",
        "REGISTRY[report_id] += 1",
    ],
)
def test_an_effect_on_shared_state_or_an_unknown_await_before_the_first_question_is_flagged(line: str) -> None:
    source = f"REGISTRY = {{}}\nSTATE = State()\n\nasync def tool(report_id, flow):\n    {line}\n    flow.ask(q)\n"
    assert positions(lint_source(source, "x.py")) == [(5, "ABK105")]


@pytest.mark.parametrize(
    "line",
    [
        "await reports.get_report(report_id)",
        "await reports.lookup(report_id)",
        "await reports.exists(report_id)",
        "await search_reports(report_id)",
        "await users.has_role(report_id, 'admin')",
        "await anyio.sleep(0)",
        "await response.json()",
        "await app.store()",
        "await ctx.report_progress(1, 2)",
        "await flow.connect('gmail')",
        "await flow.once('file', lambda: REGISTRY.update(x=1))",
        "await cursor.execute('SELECT 1')",
        "local = {}; local.update(x=1); local[report_id] = 1",
        "REGISTRY = {}; REGISTRY.update(x=1)",
        "total = len(REGISTRY) + REGISTRY.get(report_id, 0)",
        "import json\n    json.dumps(REGISTRY)",
    ],
)
def test_reads_local_state_flow_calls_and_effects_inside_flow_once_are_not_flagged(line: str) -> None:
    source = f"REGISTRY = {{}}\n\nasync def tool(report_id, flow, ctx):\n    {line}\n    flow.ask(q)\n"
    assert lint_source(source, "x.py") == []


def test_shared_state_changed_after_the_first_question_or_in_a_function_that_never_asks_is_not_flagged() -> None:
    source = (
        "FILED = []\n"
        "async def after(flow):\n"
        "    flow.ask(q)\n"
        "    FILED.append(1)\n"
        "    await record(1)\n"
        "async def never(x):\n"
        "    FILED.append(x)\n"
        "    await record(x)\n"
        "async def shadowed(FILED, flow):\n"
        "    FILED.append(1)\n"
        "    flow.ask(q)\n"
    )
    assert lint_source(source, "x.py") == []


def test_camel_case_writes_and_returned_input_required_results_count() -> None:
    source = (
        "def charge(ctx, order):\n"
        "    stripe.PaymentIntent.create(amount=order.total)\n"
        "    client.putObject(order.receipt)\n"
        "    return InputRequiredResult(input_requests={}, request_state='step:confirm')\n"
    )
    assert positions(lint_source(source, "x.py")) == [(2, "ABK105"), (3, "ABK105")]


def test_columns_are_one_based_and_count_characters_not_bytes() -> None:
    source = 'é = "ü"; x = ctx.elicit("ß")\n'
    [finding] = lint_source(source, "x.py")
    assert (finding.line, finding.col) == (1, source.index("ctx") + 1)


def test_the_attribute_itself_is_located_not_its_object() -> None:
    [finding] = lint_source("value = params.elicitationId\n", "x.py")
    assert finding.col == len("value = params.") + 1


def test_a_finding_is_a_frozen_value() -> None:
    [finding] = lint_source("ctx.elicit('x')\n", "x.py")
    with pytest.raises(dataclasses.FrozenInstanceError):
        finding.line = 2  # type: ignore[misc]


# --- noqa --------------------------------------------------------------------------------------------------------


def test_a_bare_noqa_silences_every_rule_on_its_line() -> None:
    lines = {line for line, _ in positions(lint_fixture("noqa.py"))}
    assert 7 not in lines


def test_noqa_with_codes_silences_only_those_codes_in_any_case() -> None:
    found = positions(lint_fixture("noqa.py"))
    # line 8 silences ABK101,ABK103; line 9 the same codes in lower case, after NOQA in upper case
    assert not [p for p in found if p[0] in (8, 9)]
    # line 10 silences ABK101 only
    assert (10, "ABK103") in found and (10, "ABK101") not in found
    # line 11 silences ABK105, which is not there
    assert (11, "ABK101") in found and (11, "ABK103") in found


def test_noqa_inside_a_string_silences_nothing() -> None:
    assert (12, "ABK101") in positions(lint_fixture("noqa.py"))


# --- select and ignore -------------------------------------------------------------------------------------------


def test_select_keeps_only_the_chosen_codes() -> None:
    assert positions(lint_fixture("delete_project_before.py", select={"ABK101"})) == [(20, "ABK101")]


def test_ignore_drops_codes_and_wins_over_select() -> None:
    assert positions(lint_fixture("delete_project_before.py", ignore={"ABK101"})) == [(19, "ABK105")]
    assert lint_fixture("delete_project_before.py", select={"ABK101"}, ignore={"ABK101"}) == []


def test_a_prefix_selects_every_code_it_starts_and_case_does_not_matter() -> None:
    assert positions(lint_fixture("delete_project_before.py", select={"abk10"})) == [(19, "ABK105"), (20, "ABK101")]


def test_an_unknown_code_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"'ABK999'.*ABK101"):
        lint_source("x = 1\n", "x.py", select={"ABK999"})
    with pytest.raises(ValueError, match="'E501'"):
        parse_codes("ABK101, E501")


def test_parse_codes_reads_commas_and_spaces() -> None:
    assert parse_codes("abk101,ABK105  ABK1") == {"ABK101", "ABK105", "ABK1"}


def test_a_syntax_error_is_reported_whatever_is_selected_unless_ignored() -> None:
    assert positions(lint_fixture("abk100_syntax_error.py", select={"ABK101"})) == [(2, "ABK100")]
    assert lint_fixture("abk100_syntax_error.py", ignore={"ABK100"}) == []


# --- files ---------------------------------------------------------------------------------------------------------


def test_lint_paths_walks_python_files_and_skips_tool_directories(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "tools.py").write_text("ctx.elicit('x')\n")
    (tmp_path / "pkg" / "notes.txt").write_text("ctx.elicit('x')\n")
    for skipped in (".venv", ".git", "__pycache__", "node_modules"):
        (tmp_path / skipped).mkdir()
        (tmp_path / skipped / "vendored.py").write_text("ctx.elicit('x')\n")
    found = lint_paths([tmp_path])
    assert [(Path(f.path).relative_to(tmp_path).as_posix(), f.code) for f in found] == [("pkg/tools.py", "ABK101")]


def test_a_file_named_explicitly_is_checked_once_whatever_its_suffix(tmp_path: Path) -> None:
    script = tmp_path / "server"
    script.write_text("ctx.elicit('x')\n")
    assert positions(lint_paths([script, str(script)])) == [(1, "ABK101")]
    assert positions(lint_paths(str(script))) == [(1, "ABK101")]


def test_a_file_that_does_not_parse_is_a_finding_not_a_crash(tmp_path: Path) -> None:
    (tmp_path / "a_broken.py").write_text("def f(:\n")
    (tmp_path / "b_latin1.py").write_bytes(b"x = '\xe9'\n")
    (tmp_path / "c_fine.py").write_text("ctx.elicit('x')\n")
    found = lint_paths([tmp_path])
    assert [(Path(f.path).name, f.code) for f in found] == [
        ("a_broken.py", "ABK100"),
        ("b_latin1.py", "ABK100"),
        ("c_fine.py", "ABK101"),
    ]
    assert "could not read" in found[1].message


def test_a_path_that_does_not_exist_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        lint_paths([LINT_FIXTURES, tmp_path / "missing"])


def test_the_fixture_directory_gives_every_finding_of_its_files() -> None:
    found = lint_paths([LINT_FIXTURES])
    by_file: dict[str, list[tuple[int, str]]] = {}
    for f in found:
        by_file.setdefault(Path(f.path).name, []).append((f.line, f.code))
    assert by_file == FLAGGED


def test_the_linter_passes_its_own_rules() -> None:
    src = ROOT / "src" / "askback"
    assert lint_paths([src / "tools" / "lint" / "__init__.py", src / "cli" / "lint.py"]) == []


# --- output --------------------------------------------------------------------------------------------------------


def test_text_output_gives_location_code_message_hint_and_a_summary() -> None:
    findings = lint_source("ctx.elicit('x')\nctx.elicit('y')\n", "tools.py")
    text = render_text(findings)
    lines = text.splitlines()
    assert lines[0].startswith("tools.py:1:1: ABK101 ctx.elicit(...) pushes elicitation/create")
    assert lines[1] == f"    hint: {RULES['ABK101'].hint}"
    assert lines[2].startswith("tools.py:2:1: ABK101 ")
    assert lines[-1] == "Found 2 findings in 1 file (ABK101 x2)."
    assert text.endswith("\n")


def test_text_output_says_so_when_nothing_is_found() -> None:
    assert render_text([]) == "No findings.\n"


def test_json_output_lists_findings_and_a_summary() -> None:
    findings = lint_fixture("delete_project_before.py")
    document = json.loads(render_json(findings))
    assert document["summary"] == {"findings": 2, "files": 1, "codes": {"ABK101": 1, "ABK105": 1}}
    first = document["findings"][0]
    assert set(first) == {"path", "line", "col", "code", "message", "hint"}
    assert (first["line"], first["col"], first["code"]) == (19, 11, "ABK105")
    assert first["path"].endswith("delete_project_before.py")
    assert json.loads(render_json([])) == {"findings": [], "summary": {"findings": 0, "files": 0, "codes": {}}}


# --- the command ---------------------------------------------------------------------------------------------------


def test_the_command_exits_0_when_clean() -> None:
    result = runner.invoke(build_app(), ["lint", *(str(LINT_FIXTURES / name) for name in CLEAN)])
    assert result.exit_code == 0, result.output
    assert result.stdout == "No findings.\n"


def test_the_command_exits_1_and_prints_findings() -> None:
    result = runner.invoke(build_app(), ["lint", str(LINT_FIXTURES / "delete_project_before.py")])
    assert result.exit_code == 1
    assert ":20:20: ABK101 " in result.stdout and "hint: " in result.stdout
    assert result.stdout.endswith("Found 2 findings in 1 file (ABK101 x1, ABK105 x1).\n")


def test_the_command_prints_json_for_machines() -> None:
    result = runner.invoke(build_app(), ["lint", "--format", "json", str(LINT_FIXTURES / "delete_project_before.py")])
    assert result.exit_code == 1
    assert [f["code"] for f in json.loads(result.stdout)["findings"]] == ["ABK105", "ABK101"]


def test_the_command_selects_and_ignores() -> None:
    path = str(LINT_FIXTURES / "delete_project_before.py")
    selected = runner.invoke(build_app(), ["lint", "--select", "ABK105", "--format", "json", path])
    assert [f["code"] for f in json.loads(selected.stdout)["findings"]] == ["ABK105"]
    ignored = runner.invoke(build_app(), ["lint", "--ignore", "ABK101,abk105", path])
    assert ignored.exit_code == 0 and ignored.stdout == "No findings.\n"


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["lint", "no/such/dir"], "no such file or directory"),
        (["lint", "--select", "ABK999", "."], "unknown rule code"),
        (["lint", "--ignore", "nope", "."], "unknown rule code"),
        (["lint", "--format", "xml", "."], "--format is text or json"),
        (["lint"], "Missing argument"),
    ],
)
def test_the_command_exits_2_on_a_usage_error(args: list[str], says: str) -> None:
    result = runner.invoke(build_app(), args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert says in result.stderr
