"""How a package's public face resolves its names: each is imported from the module that defines it on first use,
so that importing the face costs nothing until a name is needed (the server stack, SQLAlchemy and httpx load only
for the parts that use them); and how a module keeps a renamed name for one minor release, with a warning."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["REMOVED_IN", "renamed", "resolve"]

# The release that removes the names deprecated in this one: a renamed public name keeps working, with a
# `DeprecationWarning`, for one minor release (CHANGELOG.md lists each).
REMOVED_IN = "0.3.0"


def resolve(
    face: str,
    where: Mapping[str, str],
    name: str,
    namespace: MutableMapping[str, Any],
    renamed: Mapping[str, str] | None = None,
) -> Any:
    """The value of `name` on the face `face` (from the module `where` names), kept in the face's `namespace` so
    that the next use is a plain attribute read. A name in `renamed` is the old name of another: it still resolves,
    to the new name's value, with a `DeprecationWarning` on every use (it is never kept in `namespace`)."""
    new = (renamed or {}).get(name)
    if new is not None:
        warnings.warn(
            f"{face}.{name} is deprecated and will be removed in askback {REMOVED_IN}: use {face}.{new}",
            DeprecationWarning,
            stacklevel=3,
        )
        return resolve(face, where, new, namespace)
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {face!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    namespace[name] = value
    return value


def renamed(module: str, names: Mapping[str, str], name: str, namespace: Mapping[str, Any]) -> Any:
    """The value of `name`, an old name of `module` that `names` maps to its new one (`"askback.core.addresses.
    is_loopback"`, or a bare name in the same module), with a `DeprecationWarning` naming the new one; for a module's
    `__getattr__`, which Python calls only for names the module does not hold."""
    new = names.get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    where, _, new_name = new.rpartition(".")
    value = getattr(import_module(where), new_name) if where else namespace[new_name]
    warnings.warn(
        f"{module}.{name} is deprecated and will be removed in askback {REMOVED_IN}: "
        f"use {new if where else f'{module}.{new}'}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value
