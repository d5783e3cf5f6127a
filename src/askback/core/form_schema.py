"""A form question's `requestedSchema`: the JSON schema of a flat pydantic model, rendered as the SDK renders it and
checked field by field against the spec's primitive schemas; and the words for an answer the model refuses.

No I/O, and no SDK server module: defining a question must not load the server stack.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

__all__ = ["answer_problems", "form_schema"]


def answer_problems(exc: ValidationError, schema: Mapping[str, Any]) -> str:
    """What is wrong with a form's answer, as pydantic found it, for the person: each field by its title."""
    props: Mapping[str, Any] = schema.get("properties", {})
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        loc = str(err["loc"][0]) if err["loc"] else ""
        title = props.get(loc, {}).get("title", loc) if loc else "answer"
        if err["type"] == "extra_forbidden":
            continue
        parts.append(f"{title}: {err['msg']}")
    return "; ".join(parts) or "the answer did not match the form"


class _FormJsonSchema(GenerateJsonSchema):
    """Pydantic's JSON schema with `T | None` flattened to `T` and `None` defaults dropped, as the SDK's
    `render_elicitation_schema` renders it: the spec's primitive schemas admit no `anyOf` or null type, and an
    optional field is one left out of `required`. Built here so that defining a question loads no SDK server module
    (which would bring the server stack with it); a test holds the two renderings equal."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])

    def default_schema(self, schema: core_schema.WithDefaultSchema) -> JsonSchemaValue:
        result = super().default_schema(schema)
        if result.get("default") is None:
            result.pop("default", None)
        return result


@cache
def _primitive_schema() -> TypeAdapter[Any]:
    # The spec's own definition of a form field, from the wire types (the per-revision package models it strictly;
    # its 2025-11-25 twin, which the SDK checks against, defines the same shapes).
    from mcp_types._v2026_07_28 import PrimitiveSchemaDefinition

    definition: Any = PrimitiveSchemaDefinition  # a union, which TypeAdapter's typing does not spell
    return TypeAdapter(definition)


def form_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The `requestedSchema` of a flat model; `TypeError` names a field that is not a primitive the spec allows
    (nested models, bare lists, unions of several types)."""
    schema = model.model_json_schema(schema_generator=_FormJsonSchema)
    for name, prop in schema.get("properties", {}).items():
        try:
            _primitive_schema().validate_python(prop)
        except ValidationError:
            raise TypeError(
                f"Elicitation schema field {name!r} rendered as {prop!r}, which is not a valid PrimitiveSchemaDefinition"
            ) from None
    return schema
