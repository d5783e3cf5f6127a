"""Users upgrade: a public name (one in a face's `__all__`) never disappears silently. `tests/public_names.txt` lists
every public name; one that is gone from its face must be named in CHANGELOG.md (renamed or removed, with what to do),
and a new public name is added to the list, so that its later removal is caught too."""

from __future__ import annotations

import importlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LISTED = ROOT / "tests" / "public_names.txt"


def listed() -> set[tuple[str, str]]:
    rows = (line.split() for line in LISTED.read_text(encoding="utf-8").splitlines() if not line.startswith("#"))
    return {(row[0], row[1]) for row in rows if len(row) == 2}


def exported(faces: set[str]) -> set[tuple[str, str]]:
    return {(face, name) for face in faces for name in importlib.import_module(face).__all__}


def test_a_public_name_that_is_gone_is_named_in_the_changelog() -> None:
    names = listed()
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    gone = names - exported({face for face, _ in names})
    silent = sorted(f"{face}.{name}" for face, name in gone if f"`{name}`" not in changelog)
    assert not silent, f"public names gone with no word in CHANGELOG.md: {silent}"


def test_every_public_name_is_listed() -> None:
    names = listed()
    new = exported({face for face, _ in names}) - names
    assert not new, f"public names to add to {LISTED.name}: {sorted(f'{face} {name}' for face, name in new)}"
