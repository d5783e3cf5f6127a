"""The layout is the architecture: which part may import which, checked on the source and on a live import."""

from __future__ import annotations

import ast
import subprocess
import sys
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
# What a core module may import at module level: the standard library (minus I/O), pydantic, the SDK's wire types,
# the error tree, and the core itself. (The SDK's schema renderer is imported where a form is first built.)
CORE_MAY_IMPORT_FROM_ASKBACK = {"askback.core", "askback.errors"}


def imports_of(path: Path, *, top_level_only: bool) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.If):  # `if TYPE_CHECKING:` blocks import nothing at run time
            continue
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return found


def modules_under(folder: str) -> list[Path]:
    return sorted((SRC / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules_under("core"), ids=lambda p: p.name)
def test_a_core_module_imports_no_io_library_and_nothing_outside_the_core_but_the_error_tree(path: Path) -> None:
    for name in imports_of(path, top_level_only=False):
        assert name.split(".")[0] not in IO_LIBRARIES, f"{path.name} imports {name}"
    for name in imports_of(path, top_level_only=True):
        if name.startswith("askback"):
            assert any(name == allowed or name.startswith(allowed + ".") for allowed in CORE_MAY_IMPORT_FROM_ASKBACK)
        assert name.split(".")[0] != "mcp", f"{path.name} imports {name} at module level, which loads the server stack"


@pytest.mark.parametrize("path", modules_under("tools"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_developer_tools_import_only_the_core_and_the_error_tree(path: Path) -> None:
    for name in imports_of(path, top_level_only=False):
        if name.startswith("askback"):
            assert name.startswith(("askback.core", "askback.errors")), f"{path} imports {name}"


@pytest.mark.parametrize("folder", ["core", "db", "audit", "store"])
def test_the_shared_layers_never_import_a_product(folder: str) -> None:
    for path in modules_under(folder):
        for name in imports_of(path, top_level_only=False):
            assert not name.startswith(
                (
                    "askback.server",
                    "askback.accounts",
                    "askback.runtime",
                    "askback.cli",
                    "askback.demo",
                    "askback.testing",
                )
            ), f"{path} imports {name}"


def loaded_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_importing_the_core_loads_no_io_library_and_not_the_sdk() -> None:
    loaded = loaded_after(
        "import askback.core.questions, askback.core.flow, askback.core.round, askback.core.plan, askback.core.state"
    )
    # (`socket` is loaded by the standard library's own modules; the core's imports of it are refused above.)
    assert not {m.split(".")[0] for m in loaded} & ((IO_LIBRARIES - {"socket"}) | {"mcp"})


def test_the_linter_does_not_import_the_server() -> None:
    loaded = loaded_after("import askback.tools.lint")
    assert not {m for m in loaded if m.startswith("askback.server") or m.split(".")[0] in ("sqlalchemy", "starlette")}


def test_importing_askback_does_not_import_the_server_stack() -> None:
    loaded = loaded_after("import askback")
    assert "askback.server" not in loaded
    assert not {m.split(".")[0] for m in loaded} & {"sqlalchemy", "starlette", "uvicorn", "mcp"}


PRODUCTS = {"server": "askback.server", "accounts": "askback.accounts", "runtime": "askback.runtime"}


@pytest.mark.parametrize(
    ("folder", "other"), [(a, b) for a in ("server", "accounts", "runtime") for b in PRODUCTS if a != b]
)
def test_a_product_never_imports_another_product(folder: str, other: str) -> None:
    for path in modules_under(folder):
        for name in imports_of(path, top_level_only=True):  # type-only imports (`if TYPE_CHECKING:`) aside
            assert not name.startswith(PRODUCTS[other]), f"{path} imports {name}"
        for name in imports_of(path, top_level_only=False):
            if name.startswith(PRODUCTS[other]):
                assert _only_for_types(path, name), f"{path} imports {name} at run time"


def _only_for_types(path: Path, module: str) -> bool:
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in ast.walk(node):
                if isinstance(inner, ast.ImportFrom) and inner.module == module:
                    return True
    return False


def test_importing_the_runtime_loads_neither_the_server_kit_nor_langgraph() -> None:
    loaded = loaded_after("import askback.runtime")
    assert not {m for m in loaded if m.startswith(("askback.server", "askback.accounts"))}
    assert "langgraph" not in {m.split(".")[0] for m in loaded}
