"""Questions refuse, when they are defined, what could never be asked correctly."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from askback import Argument, Askback, Choice, Confirm, DefinitionError, Form, Link
from askback.core.secret_words import looks_secret


class Address(BaseModel):
    city: str


class Nested(BaseModel):
    name: str
    address: Address


class ListOfObjects(BaseModel):
    items: list[Address]


class Flat(BaseModel):
    name: str = Field(title="Name", min_length=1, max_length=40)
    email: str = Field(title="Email", json_schema_extra={"format": "email"})
    age: int = Field(ge=0, le=150, default=30)
    ratio: float = Field(default=0.5, ge=0, le=1)
    subscribe: bool = False
    plan: Literal["free", "pro"] = "free"
    tags: list[Literal["a", "b", "c"]] = Field(default_factory=list, description="Pick any")


def test_a_flat_form_renders_a_primitive_schema() -> None:
    q = Form(key="profile", model=Flat, message="Tell me about you.")
    props = q.schema["properties"]
    assert props["name"] == {"type": "string", "title": "Name", "minLength": 1, "maxLength": 40}
    assert props["email"]["format"] == "email"
    assert props["age"]["minimum"] == 0 and props["age"]["maximum"] == 150
    assert props["plan"]["enum"] == ["free", "pro"]
    assert props["tags"]["items"]["enum"] == ["a", "b", "c"]
    assert q.schema["required"] == ["name", "email"]
    assert q.render()["mode"] == "form"


@pytest.mark.parametrize("model", [Nested, ListOfObjects])
def test_a_nested_model_is_refused_at_definition(model: type[BaseModel]) -> None:
    with pytest.raises(DefinitionError, match="flat primitive fields"):
        Form(key="bad", model=model, message="?")


class WithPassword(BaseModel):
    username: str
    password: str


class WithApiKey(BaseModel):
    apiKey: str


class WithCard(BaseModel):
    card_number: str


class WithSecretDescription(BaseModel):
    value: str = Field(description="Your GitHub personal access token")


class WithCvv(BaseModel):
    cvv: str


@pytest.mark.parametrize("model", [WithPassword, WithApiKey, WithCard, WithSecretDescription, WithCvv])
def test_a_secret_looking_field_is_refused_with_a_pointer_to_url_mode(model: type[BaseModel]) -> None:
    with pytest.raises(DefinitionError, match="Link \\(URL mode\\)"):
        Form(key="creds", model=model, message="?")


@pytest.mark.parametrize("text", ["project_name", "environment", "tokenizer_mode_x", "keyboard", "passport_country"])
def test_ordinary_field_names_are_not_taken_for_secrets(text: str) -> None:
    assert not looks_secret(text)


@pytest.mark.parametrize(
    "url",
    [
        "http://example.com/connect",
        "ftp://example.com/x",
        "javascript:alert(1)",
        "https://user:pw@example.com/x",
        "https://example.com/connect?access_token=abc",
        "https://example.com/connect?api_key=abc",
    ],
)
def test_an_unsafe_link_is_refused_at_definition(url: str) -> None:
    with pytest.raises(DefinitionError):
        Link(key="connect", message="Connect your account.", url=url)


@pytest.mark.parametrize(
    "url",
    ["https://example.com/connect?flow=abc", "http://127.0.0.1:8000/connect", "http://localhost/x", "http://[::1]/"],
)
def test_https_and_loopback_links_are_accepted(url: str) -> None:
    assert Link(key="connect", message="Connect.", url=url).render()["url"] == url


def test_a_link_given_at_ask_time_is_checked_too() -> None:
    q = Link(key="connect", message="Connect.")
    with pytest.raises(DefinitionError):
        q.render(url="http://example.com/")


@pytest.mark.parametrize("key", ["", "1abc", "has space", "x" * 65, "a/b"])
def test_a_key_that_is_not_wire_safe_is_refused(key: str) -> None:
    with pytest.raises(DefinitionError, match="key"):
        Confirm(key=key, message="Sure?")


def test_two_questions_with_one_key_in_a_tool_are_refused() -> None:
    app = Askback("t")
    a = Confirm(key="same", message="A?")
    b = Choice(key="same", message="B?", options=["x", "y"])
    with pytest.raises(DefinitionError, match="same"):

        @app.tool(asks=[a, b])
        async def tool() -> str:
            return "x"


def test_a_choice_needs_distinct_options() -> None:
    with pytest.raises(DefinitionError, match="distinct"):
        Choice(key="c", message="?", options=["a", "a"])


def test_a_choice_with_titles_renders_one_of() -> None:
    q = Choice(key="c", message="?", options={"dev": "Development", "prod": "Production"}, field="env")
    assert q.schema["properties"]["env"]["oneOf"] == [
        {"const": "dev", "title": "Development"},
        {"const": "prod", "title": "Production"},
    ]


def test_a_sync_tool_is_refused() -> None:
    app = Askback("t")
    with pytest.raises(DefinitionError, match="async"):

        @app.tool()
        def tool() -> str:  # type: ignore[type-var]
            return "x"


def test_every_question_reads_an_answer_through_one_read() -> None:
    plain = Confirm(key="sure", message="Sure?")
    typed = Confirm(key="name", message="Type the name.", field="name", typed=True)
    pick = Choice(key="env", message="Where?", options=["dev", "prod"], field="env")
    assert plain.read({"confirm": True}) is True
    assert typed.read({"name": "billing"}, expect="billing") is True
    assert typed.read({"name": "bill"}, expect="billing") is False
    assert pick.read({"env": "prod"}, expect="ignored") == "prod"
    with pytest.raises(DefinitionError, match="expect="):
        typed.read({"name": "billing"})


def test_the_schema_handed_out_is_a_copy_and_the_question_is_never_changed() -> None:
    pick = Choice(key="env", message="Where?", options=["dev", "prod"], field="env", fallback=Argument("env"))
    schema = pick.schema
    schema["properties"]["env"]["enum"].append("hacked")
    assert pick.render()["requestedSchema"]["properties"]["env"]["enum"] == ["dev", "prod"]
    assert pick.options == ["dev", "prod"] and pick.fallback == Argument("env")  # as given, not normalised in place
    assert pick.fallback_error() == "env is required: one of dev, prod. Call the tool again with the env argument."
