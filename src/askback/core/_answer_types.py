"""An answer's values against the JSON types of the form they answer, before any model reads them.

pydantic reads answers leniently (so that a `format: date` string becomes a date and an integer a number), which on
its own would also turn the string "yes" into `True` and approve what the person never ticked. So first each value
must have the JSON type its `requestedSchema` property names: a boolean is a JSON boolean, an integer an integer, a
number an integer or a number, a string a string, a choice exactly one of its values, a multi-select a list of those.
A pure function of the answer and the schema; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["type_problems"]

_KINDS = {
    "boolean": "true or false",
    "integer": "a whole number",
    "number": "a number",
    "string": "text",
    "array": "a list of the choices offered",
}


def type_problems(content: Mapping[str, Any], schema: Mapping[str, Any]) -> list[str]:
    """Each value of `content` (only the form's own fields) whose JSON type is not the one `schema` says, as
    "Title: what it must be" (never the value given); empty when every value fits. A field left out, or sent as
    null when it is optional, is for the model to judge."""
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    problems = []
    for name, value in content.items():
        prop = props.get(name)
        if not isinstance(prop, Mapping) or (value is None and name not in required):
            continue
        if not _fits(value, prop):
            kind = str(prop.get("type", ""))
            wanted = "one of the choices offered" if _choices(prop) is not None else _KINDS.get(kind, kind)
            problems.append(f"{prop.get('title', name)}: must be {wanted}")
    return problems


def _fits(value: Any, prop: Mapping[str, Any]) -> bool:
    kind = prop.get("type")
    if kind == "boolean":
        return value is True or value is False
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str) and _chosen(value, _choices(prop))
    if kind == "array":
        items = prop.get("items")
        choices = _choices(items) if isinstance(items, Mapping) else None
        return isinstance(value, list) and all(isinstance(v, str) and _chosen(v, choices) for v in value)
    return False  # a kind no form renders: nothing can fit it


def _choices(prop: Mapping[str, Any]) -> list[Any] | None:
    """The values a property allows (`enum`, or the `const`s of a titled `oneOf`/`anyOf`); None when any is."""
    if "enum" in prop:
        return list(prop["enum"])
    titled = prop.get("oneOf", prop.get("anyOf"))
    if isinstance(titled, list):
        return [option.get("const") for option in titled if isinstance(option, Mapping)]
    return None


def _chosen(value: str, choices: list[Any] | None) -> bool:
    return choices is None or any(isinstance(c, str) and c == value for c in choices)
