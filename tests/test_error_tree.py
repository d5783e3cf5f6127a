"""The exception tree drawn in `askback.errors`' docstring is the real one: every error class the module defines is
drawn, under the class it derives from. An error added, moved or renamed without redrawing the tree fails here."""

from __future__ import annotations

import inspect
import re

import askback.errors as errors
from askback.errors import AskbackError

BRANCH = re.compile(r"^(?P<indent>[ │]*)[├└]── (?P<name>\w+)")


def drawn() -> dict[str, str]:
    """Each class in the docstring's tree and its parent there, read from the branches' depth."""
    parents: dict[str, str] = {}
    path = ["AskbackError"]
    for line in (errors.__doc__ or "").splitlines():
        found = BRANCH.match(line)
        if found is None:
            continue
        depth = (len(found["indent"]) - 4) // 4 + 1
        del path[depth:]
        parents[found["name"]] = path[-1]
        path.append(found["name"])
    return parents


def real() -> dict[str, str]:
    """Each error class `askback.errors` defines and the error class it derives from."""
    parents: dict[str, str] = {}
    for name, value in vars(errors).items():
        ours = inspect.isclass(value) and value.__module__ == errors.__name__
        if ours and issubclass(value, AskbackError) and value is not AskbackError:
            base = next(b for b in value.__bases__ if issubclass(b, AskbackError))
            parents[name] = base.__name__
    return parents


def test_the_docstrings_tree_draws_every_error_under_the_class_it_derives_from() -> None:
    assert drawn() == real()
