"""Every test file that askback's source, docs, README or benchmarks point a reader at exists: a test moved or
renamed without its mentions fails here, naming them."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAMED = re.compile(r"tests/[A-Za-z0-9_/]+\.py")


def texts() -> list[Path]:
    found = [ROOT / "README.md", ROOT / "CHANGELOG.md"]
    for folder, pattern in (("src", "*.py"), ("docs", "*.md"), ("benchmarks", "*.py"), ("benchmarks", "*.md")):
        found += sorted((ROOT / folder).rglob(pattern))
    return found


def test_every_test_file_a_reader_is_pointed_at_exists() -> None:
    missing = [
        f"{path.relative_to(ROOT)}: {named}"
        for path in texts()
        for named in sorted(set(NAMED.findall(path.read_text(encoding="utf-8"))))
        if not (ROOT / named).is_file()
    ]
    assert not missing, "\n".join(missing)
