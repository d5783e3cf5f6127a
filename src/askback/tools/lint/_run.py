"""The entry points: `lint_source`, a pure function of a file's text and name, and `lint_paths`, the only part
that touches the file system; `parse_codes` reads a `--select`/`--ignore` list."""

from __future__ import annotations

import ast
import errno
import os
import re
import tokenize
import warnings
from collections.abc import Iterable, Iterator
from collections.abc import Set as AbstractSet
from pathlib import Path

from askback.tools.lint._checker import Checker
from askback.tools.lint._noqa import check_codes, code_selected, is_silenced, noqa_lines, normalise
from askback.tools.lint._rules import RULES, SYNTAX, Finding

_SKIP_DIRS = frozenset({".venv", ".git", "__pycache__", "node_modules"})


def parse_codes(text: str) -> set[str]:
    """Codes from a comma- or space-separated list, upper-cased. A prefix such as `ABK10` stands for every code it
    starts. Raises `ValueError` naming an entry that matches no rule."""
    codes = {part.upper() for part in re.split(r"[\s,]+", text) if part}
    check_codes(codes)
    return codes


def lint_source(
    source: str,
    filename: str,
    *,
    select: AbstractSet[str] | None = None,
    ignore: AbstractSet[str] | None = None,
) -> list[Finding]:
    """The findings for one file's text, sorted by position.

    `select` keeps only codes starting with one of its entries, `ignore` drops them (ignore wins). A file that does
    not parse gives a single ABK100, whatever `select` says, because none of the selected rules could run; only
    `ignore` drops it. Raises `ValueError` for a `select`/`ignore` entry that matches no rule.
    """
    chosen = normalise(select)
    dropped = normalise(ignore)
    try:
        with warnings.catch_warnings():
            # Invalid escape sequences and the like are the interpreter's business, not the linter's.
            warnings.simplefilter("ignore")
            tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        found = [_unparsed(filename, exc.lineno, exc.offset, f"could not parse the file: {exc.msg}")]
        return [f for f in found if not code_selected(f.code, dropped)]
    except ValueError as exc:  # source with NUL bytes
        found = [_unparsed(filename, 1, 1, f"could not parse the file: {exc}")]
        return [f for f in found if not code_selected(f.code, dropped)]
    raw = Checker(tree, _split_lines(source), filename).run()
    noqa = noqa_lines(source)
    kept: dict[tuple[int, str], Finding] = {}
    for finding in sorted(raw):
        if chosen is not None and not code_selected(finding.code, chosen):
            continue
        if code_selected(finding.code, dropped) or is_silenced(finding, noqa):
            continue
        # One finding per rule per line: `f(elicitation_id=elicitation_id)` is one thing to fix, not two.
        kept.setdefault((finding.line, finding.code), finding)
    return list(kept.values())


def lint_paths(
    paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
    select: AbstractSet[str] | None = None,
    ignore: AbstractSet[str] | None = None,
) -> list[Finding]:
    """Lint files and directories (directories recursively: `*.py`, skipping .venv, .git, __pycache__ and
    node_modules). A file that cannot be read or parsed gives an ABK100 finding. Raises `FileNotFoundError` for a
    path that does not exist (before linting anything) and `ValueError` for an unknown code."""
    normalise(select)
    normalise(ignore)
    if isinstance(paths, str | os.PathLike):
        paths = [paths]  # one path, not the characters of one path
    roots = [Path(p) for p in paths]
    for root in roots:
        if not root.exists():
            raise FileNotFoundError(errno.ENOENT, "no such file or directory", str(root))
    findings: list[Finding] = []
    seen: set[str] = set()
    for root in roots:
        for file in _python_files(root):
            key = os.path.normcase(os.path.abspath(file))
            if key in seen:
                continue
            seen.add(key)
            findings.extend(_lint_file(file, select, ignore))
    return findings


# --- reading files ---------------------------------------------------------------------------------------------


def _python_files(root: Path) -> Iterator[Path]:
    if not root.is_dir():
        yield root  # named explicitly: checked whatever its suffix
        return
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            if name.endswith(".py"):
                yield Path(folder, name)


def _lint_file(file: Path, select: AbstractSet[str] | None, ignore: AbstractSet[str] | None) -> list[Finding]:
    try:
        with tokenize.open(file) as fh:  # honours a PEP 263 coding line and a UTF-8 BOM
            source = fh.read()
    except (SyntaxError, UnicodeDecodeError, OSError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        found = [_unparsed(str(file), 1, 1, f"could not read the file: {reason}")]
        return [f for f in found if not code_selected(f.code, normalise(ignore))]
    return lint_source(source, str(file), select=select, ignore=ignore)


def _unparsed(path: str, line: int | None, col: int | None, message: str) -> Finding:
    return Finding(path, line or 1, max(col or 1, 1), SYNTAX, message, RULES[SYNTAX].hint)


def _split_lines(source: str) -> list[str]:
    # The lines as `ast` counts them (not str.splitlines, which also splits on form feeds and U+2028).
    return re.split(r"\r\n|\r|\n", source)
