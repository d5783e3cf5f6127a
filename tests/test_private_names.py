"""A name with a leading underscore belongs to its module, and a module with one to its package: no module of
askback imports another module's `_name`, nor a `_module` of a package it is not in. A name shared across modules
is named without the underscore."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"


def _modules() -> Iterator[tuple[str, str, ast.Module]]:
    """(module, its package, its tree) for every module of askback."""
    for path in sorted((SRC / "askback").rglob("*.py")):
        parts = path.relative_to(SRC).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        yield module, package, ast.parse(path.read_text(), str(path))


def _is_submodule(package: str, name: str) -> bool:
    base = SRC.joinpath(*package.split("."))
    return (base / f"{name}.py").exists() or (base / name).is_dir()


def _imports() -> Iterator[tuple[str, str, str, str]]:
    """(importing module, its package, module imported from, name) for every `from askback... import name`."""
    for module, package, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("askback"):
                for alias in node.names:
                    yield module, package, str(node.module), alias.name


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_names_imported() -> set[str]:
    return {
        f"{module} imports {source}.{name}"
        for module, _, source, name in _imports()
        if _private(name) and not _is_submodule(source, name)
    }


def private_modules_imported_from_outside() -> set[str]:
    found = set()
    for module, package, source, name in _imports():
        parts = [*source.split("."), *([name] if _is_submodule(source, name) else [])]
        for at, part in enumerate(parts):
            if _private(part):
                owner = ".".join(parts[:at])
                if package != owner and not package.startswith(owner + "."):
                    found.add(f"{module} imports {'.'.join(parts[: at + 1])}")
                break
    return found


def test_no_module_imports_another_modules_private_name() -> None:
    assert sorted(private_names_imported()) == []


def test_no_module_imports_a_private_module_of_a_package_it_is_not_in() -> None:
    assert sorted(private_modules_imported_from_outside()) == []


def test_the_checks_see_a_private_name_and_a_private_module_where_there_is_one() -> None:
    tree = ast.parse("from askback.store.models import _Base\nfrom askback.runtime import _wire\n")
    names = [(n.module, a.name) for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names]
    assert names == [("askback.store.models", "_Base"), ("askback.runtime", "_wire")]
    assert _is_submodule("askback.runtime", "_wire") and not _is_submodule("askback.store.models", "_Base")
