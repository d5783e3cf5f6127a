"""How a package's public face resolves its names: each is imported from the module that defines it on first use,
so that importing the face costs nothing until a name is needed (the server stack, SQLAlchemy and httpx load only
for the parts that use them)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from importlib import import_module
from typing import Any

__all__ = ["resolve"]


def resolve(face: str, where: Mapping[str, str], name: str, namespace: MutableMapping[str, Any]) -> Any:
    """The value of `name` on the face `face` (from the module `where` names), kept in the face's `namespace` so
    that the next use is a plain attribute read."""
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {face!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    namespace[name] = value
    return value
