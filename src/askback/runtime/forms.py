"""A form question's schema as fields a renderer can show, and the checks an answer passes before it is kept.

The 2026-07-28 form schema is flat: an object whose properties are strings (with `enum`/`oneOf` choices, lengths
and formats), numbers, integers, booleans, or arrays of enumerated strings. `fields(schema)` reads it once into
`Field` values (title, type, choices, default, required, bounds) that the terminal prompt and the web inbox both
render. A schema from a server may be anything: `schema_problems(schema)` says what keeps it from being rendered (not
an object schema, a bound that is not a number, an enum that is not a list of strings, ...), and `fields` refuses such
a schema rather than guess, so such a question is shown with what is wrong and can only be declined or cancelled.
`parse(field, text)` turns what a person typed into a typed value; `check_field(field, value)` says what is
wrong with one value, `problems(schema, content)` with each field of an answer, and `validate(schema, content)`
raises `InvalidAnswerError` naming every field that is wrong (its `problems` keep them by field). No I/O.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from askback.errors import InvalidAnswerError

__all__ = ["Field", "check_field", "fields", "parse", "problem_text", "problems", "schema_problems", "validate"]

Kind = Literal["string", "number", "integer", "boolean", "multi"]

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_TRUE = frozenset({"y", "yes", "true", "1", "on"})
_FALSE = frozenset({"n", "no", "false", "0", "off"})


@dataclass(frozen=True)
class Field:
    """One field of a form: what to show, what it accepts."""

    name: str
    kind: Kind
    title: str
    description: str | None
    required: bool
    default: Any
    choices: tuple[str, ...]
    choice_titles: tuple[str, ...]
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    format: str | None = None

    @property
    def hint(self) -> str:
        """A short description of what is accepted, e.g. 'integer, 1 to 10' or 'one of: eu, us'."""
        parts: list[str] = []
        if self.choices:
            parts.append(("any of: " if self.kind == "multi" else "one of: ") + ", ".join(self.choices))
        else:
            parts.append(self.format or self.kind)
        if self.minimum is not None or self.maximum is not None:
            low = "" if self.minimum is None else _number(self.minimum)
            high = "" if self.maximum is None else _number(self.maximum)
            parts.append(f"{low} to {high}".strip() if low and high else (f">= {low}" if low else f"<= {high}"))
        if self.min_length is not None or self.max_length is not None:
            unit = "choices" if self.kind == "multi" else "chars"
            parts.append(f"{self.min_length or 0}-{self.max_length if self.max_length is not None else '…'} {unit}")
        return ", ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _choices(spec: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    if "enum" in spec:
        values = tuple(str(v) for v in spec["enum"])
        titles = tuple(str(t) for t in spec.get("enumNames", values))
        return values, titles if len(titles) == len(values) else values
    options = spec.get("oneOf") or spec.get("anyOf")
    if isinstance(options, list) and all(isinstance(o, Mapping) and "const" in o for o in options):
        return tuple(str(o["const"]) for o in options), tuple(str(o.get("title", o["const"])) for o in options)
    return (), ()


def _quoted(value: Any, limit: int = 40) -> str:
    # ASCII escapes: a server's names and values are quoted so that the problem text is safe on any terminal or page.
    text = json.dumps(value, ensure_ascii=True, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _a(value: Any) -> str:
    """What kind of JSON value `value` is, as a phrase: 'a string', 'a list', ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object" if isinstance(value, Mapping) else f"a {type(value).__name__}"


def _finite(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _choice_problems(spec: Mapping[str, Any]) -> list[str]:
    found: list[str] = []
    for key in ("enum", "enumNames"):
        if spec.get(key) is not None and not _strings(spec[key]):
            found.append(f"its {key} is {_a(spec[key])} {_quoted(spec[key])}, not a list of strings")
    for key in ("oneOf", "anyOf"):
        options = spec.get(key)
        if options is None:
            continue
        if not isinstance(options, list):
            found.append(f"its {key} is {_a(options)}, not a list of choices")
            continue
        for option in options:
            # An option without `const` is a type alternative, read leniently as no choices; a choice must be text.
            if isinstance(option, Mapping) and "const" in option:
                if not isinstance(option["const"], str) or not isinstance(option.get("title", ""), str):
                    found.append(f"a choice of its {key} is {_quoted(option)}: its const and title must be text")
                    break
            elif not isinstance(option, Mapping):
                found.append(f"a choice of its {key} is {_a(option)}, not an object")
                break
    return found


def _property_problems(spec: Any) -> list[str]:
    if not isinstance(spec, Mapping):
        return [f"it is {_a(spec)} {_quoted(spec)}, not a schema"]
    found: list[str] = []
    kind = spec.get("type", "string")
    if not isinstance(kind, str):
        found.append(f"its type is {_a(kind)} {_quoted(kind)}, not one type")
    elif kind == "object":
        found.append("it is a nested object, which a form cannot ask for")
    for key in ("title", "description", "format"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            found.append(f"its {key} is {_a(spec[key])}, not text")
    for key in ("minimum", "maximum"):
        if spec.get(key) is not None and not _finite(spec[key]):
            found.append(f"its {key} is {_quoted(spec[key])}, not a number")
    for key in ("minLength", "maxLength", "minItems", "maxItems"):
        if spec.get(key) is not None and not _count(spec[key]):
            found.append(f"its {key} is {_quoted(spec[key])}, not a whole number of at least 0")
    found.extend(_choice_problems(spec))
    items = spec.get("items")
    if items is not None:
        if isinstance(items, Mapping):
            found.extend(f"its items: {p}" for p in _choice_problems(items))
        else:
            found.append(f"its items are {_a(items)} {_quoted(items)}, not a schema")
    return found


def schema_problems(schema: Any) -> tuple[str, ...]:
    """What keeps a form's requested schema (any JSON a server sent) from being rendered as a form, each said
    plainly; empty when it can be. None (no schema) is a form that asks for nothing. A server's names and values
    are quoted with ASCII escapes, so the text is safe to show anywhere. Unknown property types are read as strings
    (not a problem); a nested object is one."""
    if schema is None:
        return ()
    if not isinstance(schema, Mapping):
        return (f"the requested schema is {_a(schema)} {_quoted(schema)}, not an object schema",)
    found: list[str] = []
    kind = schema.get("type", "object")
    if kind != "object":
        found.append(f'the requested schema\'s type is {_quoted(kind)}, not "object"')
    properties = schema.get("properties")
    if properties is not None and not isinstance(properties, Mapping):
        found.append(f"its properties are {_a(properties)} {_quoted(properties)}, not an object")
        properties = None
    required = schema.get("required")
    if required is not None and not _strings(required):
        found.append(f"its required list is {_a(required)} {_quoted(required)}, not a list of property names")
    for name, spec in (properties or {}).items():
        found.extend(f"property {_quoted(name)}: {p}" for p in _property_problems(spec))
    return tuple(found)


def problem_text(problems: tuple[str, ...], *, limit: int = 5) -> str:
    """`problems` as one sentence-like line: the first `limit`, then how many more."""
    shown = "; ".join(problems[:limit])
    more = len(problems) - limit
    return shown + (f"; and {more} more" if more > 0 else "")


def fields(schema: Mapping[str, Any] | None) -> tuple[Field, ...]:
    """The fields of a form's requested schema, in the schema's order. Unknown property types are read as strings.
    A schema with `schema_problems` is refused (`InvalidAnswerError` saying what is wrong): no form is guessed."""
    wrong = schema_problems(schema)
    if wrong:
        raise InvalidAnswerError(
            f"this question's form cannot be shown ({problem_text(wrong)}): it can only be declined or cancelled"
        )
    if not schema:
        return ()
    required = set(schema.get("required") or ())
    found: list[Field] = []
    for name, spec in (schema.get("properties") or {}).items():
        spec = spec if isinstance(spec, Mapping) else {}
        kind_raw = spec.get("type", "string")
        kind: Kind
        choices, titles = _choices(spec)
        if kind_raw == "array":
            kind = "multi"
            choices, titles = _choices(spec.get("items") or {})
        elif kind_raw in ("number", "integer", "boolean"):
            kind = kind_raw
        else:
            kind = "string"
        found.append(
            Field(
                name=str(name),
                kind=kind,
                title=str(spec.get("title") or name),
                description=spec.get("description"),
                required=name in required,
                default=spec.get("default"),
                choices=choices,
                choice_titles=titles,
                minimum=spec.get("minimum"),
                maximum=spec.get("maximum"),
                min_length=spec.get("minLength", spec.get("minItems")),
                max_length=spec.get("maxLength", spec.get("maxItems")),
                format=spec.get("format"),
            )
        )
    return tuple(found)


def parse(field: Field, text: str) -> Any:
    """What a person typed for `field`, as the value to send: '' is 'no value' (None); a multi-select takes
    comma-separated choices. Raises `InvalidAnswerError` saying what is accepted."""
    text = text.strip()
    if text == "":
        return None
    if field.kind == "boolean":
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise InvalidAnswerError(f"{field.title}: answer yes or no")
    if field.kind in ("number", "integer"):
        try:
            value = float(text) if field.kind == "number" else int(text)
        except ValueError:
            value = None
        # `inf` and `nan` parse as floats but are no JSON number.
        if value is None or not _finite(value):
            raise InvalidAnswerError(
                f"{field.title}: {text!r} is not {'a number' if field.kind == 'number' else 'an integer'}"
            ) from None
        return value
    if field.kind == "multi":
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def _problems(field: Field, value: Any) -> list[str]:
    kind = field.kind
    if kind == "boolean" and not isinstance(value, bool):
        return ["must be true or false"]
    if kind in ("number", "integer"):
        if not _finite(value) or (kind == "integer" and not (isinstance(value, int) or value.is_integer())):
            return [f"must be {'a number' if kind == 'number' else 'an integer'}"]
        if field.minimum is not None and value < field.minimum:
            return [f"must be at least {_number(field.minimum)}"]
        if field.maximum is not None and value > field.maximum:
            return [f"must be at most {_number(field.maximum)}"]
        return []
    if kind == "multi":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return ["must be a list of choices"]
        wrong = [v for v in value if field.choices and v not in field.choices]
        if wrong:
            return [f"{', '.join(wrong)} not among {', '.join(field.choices)}"]
        if field.min_length is not None and len(value) < field.min_length:
            return [f"choose at least {field.min_length}"]
        if field.max_length is not None and len(value) > field.max_length:
            return [f"choose at most {field.max_length}"]
        return []
    if kind == "string":
        if not isinstance(value, str):
            return ["must be text"]
        if field.choices and value not in field.choices:
            return [f"must be one of {', '.join(field.choices)}"]
        if field.min_length is not None and len(value) < field.min_length:
            return [f"must be at least {field.min_length} characters"]
        if field.max_length is not None and len(value) > field.max_length:
            return [f"must be at most {field.max_length} characters"]
        if field.format == "email" and not _EMAIL.match(value):
            return ["must be an email address"]
        if field.format == "date" and not _DATE.match(value):
            return ["must be a date (YYYY-MM-DD)"]
    return []


def check_field(field: Field, value: Any) -> list[str]:
    """What is wrong with `value` for `field` (None: not answered): empty when it fits."""
    if value is None:
        return ["required"] if field.required else []
    return _problems(field, value)


def problems(schema: Mapping[str, Any] | None, content: Mapping[str, Any] | None) -> dict[str, list[str]]:
    """What is wrong with each field of an answer, by field name (a field the form does not ask for included);
    empty when the answer fits. `None` values count as not answered."""
    known = fields(schema)
    given = {k: v for k, v in (content or {}).items() if v is not None}
    found: dict[str, list[str]] = {}
    names = {f.name for f in known}
    for extra in sorted(set(given) - names):
        found[extra] = ["the form does not ask for it"]
    for f in known:
        wrong = check_field(f, given.get(f.name))
        if wrong:
            found[f.name] = wrong
    return found


def validate(schema: Mapping[str, Any] | None, content: Mapping[str, Any] | None) -> dict[str, Any]:
    """The answer's content, checked against the form: every required field present, every value of its type and
    within its bounds, no field the form did not ask for. `None` values are dropped (not answered)."""
    wrong = problems(schema, content)
    if wrong:
        titles = {f.name: f.title for f in fields(schema)}
        described = "; ".join(f"{titles.get(name, name)}: {p}" for name, ps in wrong.items() for p in ps)
        raise InvalidAnswerError("the answer does not fit the form: " + described, problems=wrong)
    return {k: v for k, v in (content or {}).items() if v is not None}
