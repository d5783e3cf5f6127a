"""No module of askback is over 500 lines: one that grows past it is a folder in disguise, its parts private
modules behind one face."""

from __future__ import annotations

from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "askback"
MAX_LINES = 500


def oversized(root: Path, limit: int = MAX_LINES) -> dict[str, int]:
    """The modules under `root` longer than `limit` lines, by their path relative to `root`, with their length."""
    found: dict[str, int] = {}
    for path in sorted(root.rglob("*.py")):
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found[path.relative_to(root).as_posix()] = lines
    return found


def test_no_module_of_askback_is_over_500_lines() -> None:
    found = oversized(SRC)
    assert not found, f"modules over {MAX_LINES} lines (split them along their docstrings' seams): {found}"


def test_the_size_check_names_every_module_over_the_limit_and_only_those(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * 500)
    (tmp_path / "pkg" / "sub" / "long.py").write_text("x = 1\n" * 501)
    (tmp_path / "pkg" / "notes.txt").write_text("x\n" * 900)
    assert oversized(tmp_path / "pkg") == {"sub/long.py": 501}
