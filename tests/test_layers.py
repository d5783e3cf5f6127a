"""The layout is the architecture: which part may import which, checked on the source and on a live import."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "askback"

# Libraries that do I/O or run an event loop. The core decides; it never does I/O.
IO_LIBRARIES = {
    "sqlalchemy",
    "alembic",
    "aiosqlite",
    "asyncpg",
    "sqlite3",
    "starlette",
    "uvicorn",
    "anyio",
    "asyncio",
    "httpx",
    "httpx2",
    "opentelemetry",
    "socket",
    "subprocess",
}
# What a core module may import at module level: the standard library (minus I/O), pydantic, the SDK's wire types
# (`mcp_types`), the error tree, and the core itself. Never the SDK itself (`import mcp` loads the server stack).
CORE_MAY_IMPORT_FROM_ASKBACK = {"askback.core", "askback.errors"}


@dataclass(frozen=True)
class Imported:
    """One import statement's module (`import a.b` and `from a.b import c` both give `a.b`)."""

    module: str
    names: tuple[str, ...]
    line: int
    type_only: bool  # lexically in the body of `if TYPE_CHECKING:`: never runs
    deferred: bool  # inside a function: runs when it is called, not when the module is imported


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_in(path: Path) -> list[Imported]:
    found: list[Imported] = []

    def visit(node: ast.AST, type_only: bool, deferred: bool) -> None:
        inside = deferred or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            # Only the body of the `if`: its `else` (and the test itself) run.
            child_type_only = type_only or (
                isinstance(node, ast.If) and _is_type_checking(node.test) and child in node.body
            )
            if isinstance(child, ast.Import):
                for alias in child.names:
                    found.append(Imported(alias.name, (), child.lineno, child_type_only, inside))
            elif isinstance(child, ast.ImportFrom):
                assert child.level == 0 and child.module, f"{path}:{child.lineno}: a relative import"
                names = tuple(alias.name for alias in child.names)
                found.append(Imported(child.module, names, child.lineno, child_type_only, inside))
            visit(child, child_type_only, inside)

    visit(ast.parse(path.read_text(), str(path)), False, False)
    return found


def imports_of(path: Path, *, top_level_only: bool, types_too: bool = False) -> set[str]:
    """The modules `path` imports at run time: when it is imported (`top_level_only`), or at all. Type-only imports
    count only with `types_too`."""
    return {
        imported.module
        for imported in imports_in(path)
        if (types_too or not imported.type_only) and not (top_level_only and imported.deferred)
    }


def modules_under(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules_under("core"), ids=lambda p: p.name)
def test_a_core_module_imports_no_io_library_and_nothing_outside_the_core_but_the_error_tree(path: Path) -> None:
    for name in imports_of(path, top_level_only=False, types_too=True):
        assert name.split(".")[0] not in IO_LIBRARIES, f"{path.name} imports {name}"
    for name in imports_of(path, top_level_only=False):
        # Not even in a function: `import mcp`, whatever the submodule, loads the server stack.
        assert name.split(".")[0] != "mcp", f"{path.name} imports {name}, which loads the server stack"
    for name in imports_of(path, top_level_only=True):
        if name.startswith("askback"):
            assert any(name == allowed or name.startswith(allowed + ".") for allowed in CORE_MAY_IMPORT_FROM_ASKBACK)


@pytest.mark.parametrize("path", modules_under("tools"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_developer_tools_import_only_the_core_and_the_error_tree(path: Path) -> None:
    own = f"askback.tools.{path.parent.name}."  # a tool's private modules, behind its face
    for name in imports_of(path, top_level_only=False, types_too=True):
        if name.startswith("askback"):
            assert name.startswith(("askback.core", "askback.errors", own)), f"{path} imports {name}"


@pytest.mark.parametrize("folder", ["core", "db", "audit", "store"])
def test_the_shared_layers_never_import_a_product(folder: str) -> None:
    for path in modules_under(folder):
        for name in imports_of(path, top_level_only=False, types_too=True):
            assert not name.startswith(
                (
                    "askback.server",
                    "askback.accounts",
                    "askback.runtime",
                    "askback.identity",
                    "askback.webhooks",
                    "askback.approvals",
                    "askback.cli",
                    "askback.demo",
                    "askback.testing",
                )
            ), f"{path} imports {name}"


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.http
def test_importing_the_core_loads_no_io_library_and_not_the_sdk() -> None:
    loaded = loaded_after(
        "import askback.core.questions, askback.core.flow, askback.core.round, askback.core.plan, askback.core.state"
    )
    # (`socket` is loaded by the standard library's own modules; the core's imports of it are refused above.)
    assert not {m.split(".")[0] for m in loaded} & ((IO_LIBRARIES - {"socket"}) | {"mcp"})


@pytest.mark.http
def test_the_linter_does_not_import_the_server() -> None:
    loaded = loaded_after("import askback.tools.lint")
    assert not {m for m in loaded if m.startswith("askback.server") or m.split(".")[0] in ("sqlalchemy", "starlette")}


@pytest.mark.http
def test_importing_askback_does_not_import_the_server_stack() -> None:
    loaded = loaded_after("import askback")
    assert "askback.server" not in loaded
    assert not {m.split(".")[0] for m in loaded} & {"sqlalchemy", "starlette", "uvicorn", "mcp"}


PRODUCTS = {
    "server": "askback.server",
    "accounts": "askback.accounts",
    "runtime": "askback.runtime",
    "identity": "askback.identity",
    "webhooks": "askback.webhooks",
    "approvals": "askback.approvals",
}


@pytest.mark.parametrize(("folder", "other"), [(a, b) for a in PRODUCTS for b in PRODUCTS if a != b])
def test_a_product_never_imports_another_product(folder: str, other: str) -> None:
    for path in modules_under(folder):
        for imported in imports_in(path):
            if imported.module.startswith(PRODUCTS[other]):
                # A type-only import (`if TYPE_CHECKING:`) is allowed, and hides nothing: each statement is judged
                # by where it is, so the same module imported in a function is still caught.
                assert imported.type_only, f"{path}:{imported.line} imports {imported.module} at run time"


def test_an_import_in_a_function_is_caught_even_when_the_module_is_also_imported_for_types(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from askback.server.app import Askback\n"
        "else:\n"
        "    from askback.server.http import build_app\n"
        "def f() -> None:\n"
        "    from askback.server.app import Askback\n"
    )
    assert [(i.module, i.type_only, i.deferred) for i in imports_in(module)] == [
        ("typing", False, False),
        ("askback.server.app", True, False),
        ("askback.server.http", False, False),
        ("askback.server.app", False, True),
    ]
    assert imports_of(module, top_level_only=True) == {"typing", "askback.server.http"}
    assert imports_of(module, top_level_only=False) == {"typing", "askback.server.http", "askback.server.app"}


@pytest.mark.http
def test_importing_the_runtime_loads_neither_the_server_kit_nor_langgraph() -> None:
    loaded = loaded_after("import askback.runtime")
    assert not {m for m in loaded if m.startswith(("askback.server", "askback.accounts"))}
    assert "langgraph" not in {m.split(".")[0] for m in loaded}


QUESTION_KINDS = {
    "form": (
        "from typing import Literal\n"
        "from pydantic import BaseModel, Field\n"
        "from askback import Form\n"
        "class Shipping(BaseModel):\n"
        "    city: str = Field(title='City', max_length=40)\n"
        "    express: bool = False\n"
        "    speed: Literal['slow', 'fast'] = 'slow'\n"
        "q = Form(key='shipping', model=Shipping, message='Where should it go?')\n"
        "q.render(); q.read({'city': 'Lyon'})\n"
    ),
    "confirm": "from askback import Confirm\nq = Confirm(key='k', message='m', field='f', title='t')\nq.render(); q.read({'f': True})\n",
    "typed confirm": (
        "from askback import Confirm\n"
        "q = Confirm(key='name', message='Type the name.', field='name', typed=True)\n"
        "q.render(); q.read({'name': 'billing'}, expect='billing')\n"
    ),
    "choice": (
        "from askback import Choice\n"
        "q = Choice(key='env', message='Where?', options={'dev': 'Development', 'prod': 'Production'})\n"
        "q.render(); q.read({'choice': 'dev'})\n"
        "many = Choice(key='tags', message='Which?', options=['a', 'b'], multiple=True)\n"
        "many.render(); many.read({'choice': ['a']})\n"
    ),
    "link": (
        "from askback import Link\n"
        "q = Link(key='connect', message='Connect.', url='https://example.com/connect?flow=1')\n"
        "q.render(); q.shown(url='https://example.com/connect?flow=2')\n"
    ),
}


@pytest.mark.parametrize("kind", QUESTION_KINDS)
@pytest.mark.http
def test_defining_and_rendering_a_question_loads_no_io_library_and_nothing_of_the_sdk_but_its_wire_types(
    kind: str,
) -> None:
    # Each kind in a fresh interpreter: what one loads must not be hidden by another loading it first.
    loaded = {name.split(".")[0] for name in loaded_after(f"exec({QUESTION_KINDS[kind]!r})")}
    assert "askback" in loaded
    # (`socket` is loaded by the standard library's own modules; the core's imports of it are refused above.)
    assert not loaded & ((IO_LIBRARIES - {"socket"}) | {"mcp"})


# --- no import cycle at run time ---------------------------------------------------------------------------------


def run_time_import_graph(root: Path = SRC) -> dict[str, dict[str, int]]:
    """The modules of the package at `root` and, for each, the modules of it that its run-time imports execute, with
    the line of one such import.

    An import in a function counts: it runs the first time the function does, and a cycle closed there is as real
    (one module finding the other half-initialised). `from a import b` is an edge to the module `a.b` when there is
    one, else to `a`. Importing `a.b.c` also runs the packages `a.b`, so those are edges too, except a module's own
    packages (a package's face importing its parts is how a package is made)."""
    package = root.name

    def name_of(path: Path) -> str:
        parts = path.relative_to(root.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    modules = {name_of(path): path for path in root.rglob("*.py")}
    graph: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, {})
        for imported in imports_in(path):
            if imported.type_only or imported.module.split(".")[0] != package:
                continue
            targets = {f"{imported.module}.{n}" for n in imported.names} & modules.keys() or {imported.module}
            for target in targets:
                parts = target.split(".")
                for depth in range(2, len(parts) + 1):
                    reached = ".".join(parts[:depth])
                    if reached in modules and not (name == reached or name.startswith(reached + ".")):
                        edges.setdefault(reached, imported.line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = [stack.pop()]
            while component[-1] != node:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_askbacks_modules_import_one_another_without_a_cycle_at_run_time() -> None:
    graph = run_time_import_graph()
    assert any("askback.audit.chain" in graph[name] for name in graph if name.startswith("askback.store"))
    found = cycles(graph)
    edges = {c[0]: {a: {b: graph[a][b] for b in c if b in graph[a]} for a in c} for c in found}
    assert not found, f"run-time import cycles (module: {{imported module: line}}): {edges}"


def test_a_cycle_closed_in_a_function_or_through_a_package_is_found_and_a_type_only_one_is_not(
    tmp_path: Path,
) -> None:
    root = tmp_path / "pkg"
    for name, text in {
        "__init__.py": "from pkg.face import Thing\n",
        "face.py": "Thing = 1\n",
        "a.py": "def f() -> None:\n    from pkg.b import g\n",
        "b.py": "from pkg import a\ndef g() -> None: ...\n",
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.d import D\n",
        "d.py": "import pkg.c\nD = 1\n",
        "sub/__init__.py": "from pkg.sub.part import P\n",
        "sub/part.py": "from pkg.e import E\nP = 1\n",
        "e.py": "from pkg.sub import P\nE = 1\n",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = run_time_import_graph(root)
    assert graph["pkg.sub.part"] == {"pkg.e": 1}  # its own package is not an edge
    assert graph["pkg.e"] == {"pkg.sub": 1}
    assert cycles(graph) == [["pkg.a", "pkg.b"], ["pkg.e", "pkg.sub", "pkg.sub.part"]]
