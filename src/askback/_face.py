"""How a package's public face resolves its names: each is imported from the module that defines it on first use,
so that importing the face costs nothing until a name is needed (the server stack, SQLAlchemy and httpx load only
for the parts that use them); and how a module keeps a renamed name for one minor release, with a warning."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["renamed", "resolve"]


def resolve(face: str, where: Mapping[str, str], name: str, namespace: MutableMapping[str, Any]) -> Any:
    """The value of `name` on the face `face` (from the module `where` names), kept in the face's `namespace` so
    that the next use is a plain attribute read."""
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
        f"{module}.{name} is deprecated and goes in askback 0.3: use {new if where else f'{module}.{new}'}",
        DeprecationWarning,
        stacklevel=3,
    )
    return value
