"""No import circles in askback: module A importing B while B, directly or through others, imports A.

A circle hides even when Python tolerates it: an import under `if TYPE_CHECKING:` or inside a function closes it
where the interpreter does not look, and the two modules can then be neither read nor changed apart. So the graph
here has every `askback.*` import, whether at module level, in a function or only for the type checker. Each circle
is reported as the set of modules that reach one another (a strongly connected component) with one path through
them; the circles known today are listed, so that a new one fails this test and a fixed one is taken off the list.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"

# No circle is allowed: a new one fails the test, with the path around it.
KNOWN: set[frozenset[str]] = set()


def module_files(src: Path) -> dict[str, Path]:
    """Every module under `src`, by its dotted name (a package by its own name, not `__init__`)."""
    found: dict[str, Path] = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def imported_by(path: Path, modules: Mapping[str, Path], prefix: str) -> set[str]:
    """The modules of `modules` that `path` imports, anywhere in it: `from a.b import c` is `a.b.c` when that is a
    module, `a.b` otherwise."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return {name for name in found if name in modules and name.startswith(prefix)}


def import_graph(src: Path, prefix: str = "askback") -> dict[str, set[str]]:
    modules = module_files(src)
    return {name: imported_by(path, modules, prefix) for name, path in modules.items()}


def circles(graph: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of `graph` that hold a circle (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(graph[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component: set[str] = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1 or node in graph[node]:
                        found.add(frozenset(component))
    return found


def a_path_around(component: frozenset[str], graph: Mapping[str, set[str]]) -> list[str]:
    """One circle through the first module of `component`, as the modules in the order they import each other."""
    start = min(component)
    paths = [[start]]
    seen = {start}
    while paths:
        path = paths.pop(0)
        for successor in sorted(graph[path[-1]] & component):
            if successor == start:
                return [*path, start]
            if successor not in seen:
                seen.add(successor)
                paths.append([*path, successor])
    return [start]


def test_askback_has_no_import_circles_but_the_known_ones() -> None:
    graph = import_graph(SRC)
    found = circles(graph)
    new = sorted(" -> ".join(a_path_around(c, graph)) for c in found - KNOWN)
    gone = sorted(", ".join(sorted(c)) for c in KNOWN - found)
    assert not new, f"import circles (an import under TYPE_CHECKING or in a function counts too): {new}"
    assert not gone, f"circles no longer there: take them off KNOWN in {Path(__file__).name}: {gone}"


def test_a_circle_closed_only_for_the_type_checker_or_in_a_function_is_found(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (package / "b.py").write_text("from pkg import c\n")
    (package / "c.py").write_text("def f() -> None:\n    import pkg.a\n")
    (package / "d.py").write_text("from pkg.a import x\n")
    graph = import_graph(tmp_path, "pkg")
    assert circles(graph) == {frozenset({"pkg.a", "pkg.b", "pkg.c"})}
    assert a_path_around(frozenset({"pkg.a", "pkg.b", "pkg.c"}), graph) == ["pkg.a", "pkg.b", "pkg.c", "pkg.a"]
