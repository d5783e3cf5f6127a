"""docs/configuration.md says its table lists every variable: each `Settings` field has its row, and each row names a
variable that `Settings` or askback's own source reads (the command line's own variables, such as
`ASKBACK_CALL_TOKEN`). A setting added without its row, or a row left behind by a removed one, fails here."""

from __future__ import annotations

import re
from pathlib import Path

from askback.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "configuration.md"


def listed() -> set[str]:
    text = PAGE.read_text(encoding="utf-8")
    table = text[text.index("## Variables") :]
    table = table[: table.index("\n## ", 1)]
    return set(re.findall(r"^\| `(ASKBACK_[A-Z0-9_]+)`", table, re.MULTILINE))


def fields() -> set[str]:
    prefix = str(Settings.model_config.get("env_prefix", ""))
    return {f"{prefix}{name}".upper() for name in Settings.model_fields}


def read_by_source() -> set[str]:
    source = "\n".join(path.read_text(encoding="utf-8") for path in (ROOT / "src" / "askback").rglob("*.py"))
    return set(re.findall(r"ASKBACK_[A-Z0-9_]+", source))


def test_every_setting_has_its_row_in_the_configuration_table() -> None:
    assert listed() >= fields(), f"settings without a row in {PAGE.name}: {sorted(fields() - listed())}"


def test_every_row_of_the_configuration_table_names_a_variable_askback_reads() -> None:
    stale = listed() - fields() - read_by_source()
    assert not stale, f"rows in {PAGE.name} for variables nothing reads: {sorted(stale)}"
