"""The core renders a form's `requestedSchema` itself, exactly as the SDK's renderer does: the wire is the SDK's.

The SDK is imported here only, to compare with; the core never imports it (`tests/test_layers.py`).
"""

from __future__ import annotations

from typing import Any, Literal

import pytest
from mcp.server.elicitation import render_elicitation_schema
from pydantic import BaseModel, Field

from askback import Choice, Confirm, DefinitionError, Form
from askback.core.questions import Question, form_schema


class Flat(BaseModel):
    name: str = Field(title="Name", min_length=1, max_length=40)
    email: str = Field(title="Email", json_schema_extra={"format": "email"})
    age: int = Field(ge=0, le=150, default=30)
    ratio: float = Field(default=0.5, ge=0, le=1)
    subscribe: bool = False
    plan: Literal["free", "pro"] = "free"
    tags: list[Literal["a", "b", "c"]] = Field(default_factory=list, description="Pick any")


class Optional(BaseModel):
    nickname: str | None = None
    count: int | None = Field(default=None, title="How many")
    note: str | None = Field(default="none yet", description="Anything else")
    when: str = Field(json_schema_extra={"format": "date"})


class Titled(BaseModel):
    size: Literal["s", "m", "l"] = Field(
        title="Size", json_schema_extra={"enumNames": ["Small", "Medium", "Large"]}, default="m"
    )


class Address(BaseModel):
    city: str


class Nested(BaseModel):
    name: str
    address: Address


class ListOfObjects(BaseModel):
    items: list[Address]


class BareList(BaseModel):
    names: list[str]


class Union(BaseModel):
    value: str | int


class Mapping(BaseModel):
    extra: dict[str, str]


QUESTIONS: dict[str, Question[Any]] = {
    "form": Form(key="profile", model=Flat, message="Tell me about you."),
    "form with optional fields": Form(key="optional", model=Optional, message="More?"),
    "form with enum names": Form(key="titled", model=Titled, message="Which size?"),
    "confirm": Confirm(key="k", message="m", field="f", title="t"),
    "typed confirm": Confirm(key="name", message="Type the name.", field="name", typed=True),
    "choice": Choice(key="env", message="Where?", options=["dev", "prod"], field="env"),
    "choice with titles": Choice(key="env", message="Where?", options={"dev": "Development", "prod": "Production"}),
    "multiple choice": Choice(key="tags", message="Which?", options=["a", "b"], multiple=True, title="Tags"),
    "multiple choice with titles": Choice(key="tags", message="Which?", options={"a": "A", "b": "B"}, multiple=True),
}


@pytest.mark.parametrize("kind", QUESTIONS)
def test_every_question_kind_sends_the_schema_the_sdks_renderer_gives(kind: str) -> None:
    question = QUESTIONS[kind]
    model = question._model  # type: ignore[attr-defined]
    assert form_schema(model) == render_elicitation_schema(model)
    # What went on the wire before: the SDK's rendering, untitled, with the question's own last touch.
    sent = render_elicitation_schema(model)
    sent.pop("title", None)
    question._adjust_schema(sent)  # type: ignore[attr-defined]
    assert question.render()["requestedSchema"] == sent


@pytest.mark.parametrize("model", [Nested, ListOfObjects, BareList, Union, Mapping])
def test_a_model_the_sdk_refuses_is_refused_with_the_same_reason(model: type[BaseModel]) -> None:
    with pytest.raises(TypeError) as sdk:
        render_elicitation_schema(model)
    with pytest.raises(TypeError) as ours:
        form_schema(model)
    assert str(ours.value) == str(sdk.value)
    with pytest.raises(DefinitionError, match="flat primitive fields") as refused:
        Form(key="bad", model=model, message="?")
    assert str(sdk.value) in str(refused.value)
