"""The Python in README.md and docs/*.md is checked against the code.

Every ```python block falls in one of three kinds, by the line right before its fence:

- `<!-- runnable -->`: a self-contained snippet, run as a script (in a temporary working directory, without any
  `ASKBACK_*` variables), that needs no network and no server. It must finish without an exception, and its
  imports are checked as a fragment's are. One that defines an app with tools (`app = Askback(...)`, `@app.tool`)
  is also served with `askback serve` and each of its tools called to completion (`test_docs_served.py`), so it
  must define whatever its handlers use.
- `<!-- signature -->`: a call signature such as `flow.ask(question, *, message=None, expect=None)`. Its parameters
  must be those of the real callable, in order, of the same kind, with a default where it has one (equal to it when
  the page shows a literal).
- anything else: a fragment. It must parse (top-level `await` allowed), and every `import askback...` and
  `from askback... import NAME` in it must resolve: the module imports and has the name, in its `__all__` when it
  has one (or the name is a submodule).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = "<!-- runnable -->"
SIGNATURE = "<!-- signature -->"
MARKERS = {RUNNABLE: "runnable", SIGNATURE: "signature"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<lang>[\w+-]*)\s*$")

# The receivers that signature blocks call methods on, and where bare names are looked up.
RECEIVERS = {"flow": "askback:Flow", "app": "askback:Askback"}
NAMESPACES = ("askback", "askback.server", "askback.testing", "askback.runtime")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the repository, e.g. "docs/asking.md"
    index: int  # the block's place among the page's python blocks, from 0
    line: int  # the line of its opening fence, from 1
    kind: str  # "runnable", "signature" or "fragment"
    source: str

    @property
    def id(self) -> str:
        return f"{self.page}:block{self.index}:line{self.line}"


def blocks_of(page: Path) -> list[Block]:
    """The page's ```python blocks, with the marker each one carries."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        end = i + 1
        while end < len(lines) and not re.match(r"^[ \t]*```\s*$", lines[end]):
            end += 1
        if opening["lang"] == "python":
            before = lines[i - 1].strip() if i > 0 else ""
            indent = len(opening["indent"])
            source = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
            rel = page.relative_to(ROOT).as_posix()
            found.append(Block(rel, len(found), i + 1, MARKERS.get(before, "fragment"), source))
        i = end + 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


def of_kind(kind: str) -> list[Any]:
    return [pytest.param(b, id=b.id) for b in ALL_BLOCKS if b.kind == kind]


def parse(block: Block) -> ast.Module:
    flags = ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(block.source, f"{block.page}:{block.line}", "exec", flags=flags, dont_inherit=True)
    assert isinstance(tree, ast.Module)
    return tree


def askback_imports(tree: ast.Module) -> list[tuple[str, str | None]]:
    """(module, name) for each name imported from askback; name is None for `import askback.x`."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names if alias.name.split(".")[0] == "askback"]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == "askback":
            found += [(node.module or "", alias.name) for alias in node.names if alias.name != "*"]
    return found


def unresolved(module: str, name: str | None) -> str | None:
    try:
        imported = importlib.import_module(module)
    except ImportError as exc:
        return f"import {module}: {exc}"
    if name is None:
        return None
    try:
        importlib.import_module(f"{module}.{name}")
        return None  # a submodule
    except ImportError:
        pass
    if not hasattr(imported, name):
        return f"from {module} import {name}: {module} has no {name}"
    public = getattr(imported, "__all__", None)
    if public is not None and name not in public:
        # Only imported there for its own use (as `AuditFilter` is in `askback.store`): not where it lives.
        return f"from {module} import {name}: {name} is not in {module}.__all__"
    return None


def test_every_marker_stands_right_before_a_python_block() -> None:
    for page in PAGES:
        lines = page.read_text().splitlines()
        for n, line in enumerate(lines):
            if line.strip() in MARKERS:
                following = lines[n + 1] if n + 1 < len(lines) else ""
                assert re.match(r"^\s*```python\s*$", following), (
                    f"{page.relative_to(ROOT)}:{n + 1}: {line.strip()} must be the line right before a ```python fence"
                )


def test_the_pages_have_runnable_blocks() -> None:
    runnable = {b.page for b in ALL_BLOCKS if b.kind == "runnable"}
    assert {"README.md", "docs/asking.md", "docs/testing.md", "docs/routes.md"} <= runnable


@pytest.mark.parametrize("block", of_kind("runnable"))
def test_a_runnable_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for name in [n for n in os.environ if n.startswith("ASKBACK_")]:
        monkeypatch.delenv(name)
    code = compile(block.source, f"{block.page}:{block.line}", "exec", dont_inherit=True)
    exec(code, {"__name__": "__main__"})


@pytest.mark.parametrize("block", of_kind("fragment") + of_kind("runnable"))
def test_a_block_parses_and_its_askback_imports_resolve(block: Block) -> None:
    try:
        tree = parse(block)
    except SyntaxError as exc:
        pytest.fail(f"{block.id} does not parse: {exc}")
    problems = [p for p in (unresolved(module, name) for module, name in askback_imports(tree)) if p]
    assert not problems, f"{block.id}: " + "; ".join(problems)


def real_callable(dotted: str) -> Any:
    """The object a signature block names: `flow.ask`, `Askback`, `build_app`, `app.tool` ..."""
    head, _, rest = dotted.partition(".")
    if head in RECEIVERS:
        module, _, attr = RECEIVERS[head].partition(":")
        owner = getattr(importlib.import_module(module), attr)
    else:
        owners = [importlib.import_module(m) for m in NAMESPACES]
        matches = [getattr(m, head) for m in owners if hasattr(m, head)]
        assert matches, f"{head} is in none of {', '.join(NAMESPACES)}"
        owner = matches[0]
    for part in rest.split(".") if rest else []:
        owner = getattr(owner, part)
    return owner


def documented(block: Block) -> tuple[str, ast.arguments]:
    """The callable's dotted name and the parameters the block shows for it."""
    text = " ".join(block.source.split())
    shown = re.fullmatch(r"(?:\w+ = )?@?(?P<name>[\w.]+)\((?P<params>.*)\)(?: -> (?P<returns>.+))?", text)
    assert shown is not None, f"{block.id} is not a call signature: {text}"
    tree = ast.parse(f"def f({shown['params']}): ...")
    function = tree.body[0]
    assert isinstance(function, ast.FunctionDef)
    return shown["name"], function.args


def shown_parameters(args: ast.arguments) -> list[tuple[str, inspect._ParameterKind, ast.expr | None]]:
    positional = [*args.posonlyargs, *args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    shown: list[tuple[str, inspect._ParameterKind, ast.expr | None]] = []
    for i, arg in enumerate(positional):
        kind = (
            inspect.Parameter.POSITIONAL_ONLY if i < len(args.posonlyargs) else inspect.Parameter.POSITIONAL_OR_KEYWORD
        )
        shown.append((arg.arg, kind, defaults[i]))
    if args.vararg:
        shown.append((args.vararg.arg, inspect.Parameter.VAR_POSITIONAL, None))
    for arg, default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        shown.append((arg.arg, inspect.Parameter.KEYWORD_ONLY, default))
    if args.kwarg:
        shown.append((args.kwarg.arg, inspect.Parameter.VAR_KEYWORD, None))
    return shown


@pytest.mark.parametrize("block", of_kind("signature"))
def test_a_signature_block_matches_the_code(block: Block) -> None:
    name, args = documented(block)
    real = [p for p in inspect.signature(real_callable(name)).parameters.values() if p.name != "self"]
    shown = shown_parameters(args)
    assert [p[0] for p in shown] == [p.name for p in real], f"{block.id}: the parameters of {name}"
    for (param, kind, default), actual in zip(shown, real, strict=True):
        assert kind == actual.kind, f"{block.id}: {param} is {actual.kind.description} in {name}"
        has_default = actual.default is not inspect.Parameter.empty
        assert (default is not None) == has_default, f"{block.id}: {param} {'has' if has_default else 'has no'} default"
        if default is not None:
            try:
                value = ast.literal_eval(default)
            except ValueError:
                continue  # a name or a call, such as `Bearer()`: shown for the reader, not compared
            assert value == actual.default, f"{block.id}: {param} defaults to {actual.default!r}"
