"""Questions a tool can put to the human: a form, a confirmation, a choice, or a link.

A question is a frozen value defined once, usually at module level, with a key the developer chooses. The key is
the wire key in `inputRequests`/`inputResponses`, so it is the same on every instance and however the server is
started. Everything that can be checked without a user is checked when the question is constructed (flat primitive
forms, no secret-looking form fields, safe links), so a mistake fails at import, not in front of a user.

Each question knows how to render itself as the `params` of an `elicitation/create` input request and how to read
an `ElicitResult` back into a typed outcome. Neither does any I/O.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Literal, TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from askback.core import addresses
from askback.core._answer_types import type_problems
from askback.core.form_schema import answer_problems, form_schema
from askback.core.secret_words import looks_secret
from askback.errors import DefinitionError

__all__ = [
    "Argument",
    "Choice",
    "Confirm",
    "Default",
    "Fallback",
    "Form",
    "Link",
    "Question",
    "connect_key",
]

T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

_SHOWN_PER_QUESTION = 64
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_.\-]{0,63}$")

_CREDENTIAL_PARAMS = frozenset(
    {"token", "access_token", "id_token", "refresh_token", "api_key", "apikey", "key", "secret", "password", "sig"}
)


# --- fallbacks -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Argument:
    """Fallback for clients that cannot ask: the model supplies the value as the named tool argument.

    Without elicitation the call returns a tool error naming the argument (and its allowed values), so the model
    can call again with it filled in.
    """

    name: str
    values: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Default(Generic[T]):
    """Fallback for clients that cannot ask: go on as if the user had accepted this value."""

    value: T


Fallback = Argument | Default[Any]


# --- the question types ----------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Question(Generic[T]):
    """Base of every question. `T` is what an accepted answer gives the handler."""

    key: str
    message: str
    fallback: Fallback | None = None
    on_decline: str | None = None
    on_cancel: str | None = None

    mode: ClassVar[Literal["form", "url"]] = "form"
    # What the question showed and its digest, by message: a handler asks the same questions every round, and
    # rendering and hashing them is most of what asking costs. Not part of the question's value.
    _shown: dict[str | None, tuple[dict[str, Any], str]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not _KEY.match(self.key):
            raise DefinitionError(
                f"question key {self.key!r} is not usable on the wire: use 1-64 characters, starting with a letter, "
                "of letters, digits, '_', '-' and '.'"
            )
        if not self.message or not self.message.strip():
            raise DefinitionError(f"question {self.key!r} needs a message to show the user")

    @property
    def label(self) -> str:
        return self.key.replace("_", " ")

    def render(self, *, message: str | None = None, url: str | None = None) -> dict[str, Any]:
        """The `params` of the `elicitation/create` input request for this question."""
        raise NotImplementedError

    def shown(self, *, message: str | None = None, url: str | None = None) -> tuple[dict[str, Any], str]:
        """`render(...)` and its digest. Kept for questions without a per-call link (a link may carry a one-time
        token, which is not kept); the params are shared: treat them as read-only."""
        if url is not None:
            params = self.render(message=message, url=url)
            return params, digest(params)
        found = self._shown.get(message)
        if found is None:
            params = self.render(message=message)
            found = (params, digest(params))
            if len(self._shown) >= _SHOWN_PER_QUESTION:
                self._shown.clear()  # messages made per call (an item's name in them): keep the cache small
            self._shown[message] = found
        return found

    def read(self, content: Mapping[str, Any] | None, *, expect: str | None = None) -> T:
        """Validate accepted content; raises `AnswerRejected` with a message for the user. `expect` is the value a
        typed confirmation must match; other questions ignore it."""
        raise NotImplementedError

    def fallback_error(self) -> str | None:
        """The tool error text for a client that cannot ask, when the fallback is an argument."""
        if isinstance(self.fallback, Argument):
            values = self.fallback.values
            allowed = f": one of {', '.join(values)}" if values else ""
            return f"{self.fallback.name} is required{allowed}. Call the tool again with the {self.fallback.name} argument."
        return None


class AnswerRejected(Exception):
    """Accepted content that does not satisfy the question; the text is shown to the user when asking again."""


def digest(params: Mapping[str, Any]) -> str:
    """A short fingerprint of what the user was shown, so an answer is taken only for the question it answers."""
    raw = json.dumps(params, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass(frozen=True)
class _Built:
    """What a form question derives from its fields once: the pydantic model answers are validated with, and the
    `requestedSchema` that goes on the wire."""

    model: type[BaseModel]
    schema: dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class _FormBase(Question[T]):
    def __post_init__(self) -> None:
        super().__post_init__()
        self._built  # noqa: B018 - build now, so that a question that can never work fails where it is defined

    def _form_model(self) -> type[BaseModel]:
        """The flat pydantic model of the form."""
        raise NotImplementedError

    def _adjust_schema(self, schema: dict[str, Any]) -> None:
        """A last touch to the rendered schema (titles of choices)."""

    @cached_property
    def _built(self) -> _Built:
        # cached_property stores into the instance's __dict__ directly: derived once, no field of the frozen
        # question is ever changed.
        model = self._form_model()
        try:
            schema = form_schema(model)
        except TypeError as exc:
            raise DefinitionError(
                f"question {self.key!r}: a form holds flat primitive fields only (str, int, float, bool, Literal "
                f"enums, lists of Literal for multi-select); {exc}. Split nested data into several questions."
            ) from None
        schema.pop("title", None)
        for name, prop in schema.get("properties", {}).items():
            for text in (name, str(prop.get("title", "")), str(prop.get("description", ""))):
                if looks_secret(text):
                    raise DefinitionError(
                        f"question {self.key!r}: form field {name!r} looks like it asks for a secret ({text!r}). "
                        "Form answers pass through the client and the model; ask for passwords, tokens, API keys and "
                        "payment details with a Link (URL mode) to a page you host instead."
                    )
        self._adjust_schema(schema)
        return _Built(model, schema)

    @property
    def _model(self) -> type[BaseModel]:
        return self._built.model

    @property
    def _schema(self) -> dict[str, Any]:
        return self._built.schema

    @property
    def schema(self) -> dict[str, Any]:
        """The form's `requestedSchema`, a copy: changing it changes nothing that is sent."""
        return copy.deepcopy(self._schema)

    def render(self, *, message: str | None = None, url: str | None = None) -> dict[str, Any]:
        if url is not None:
            raise DefinitionError(f"question {self.key!r} is a form; url= applies to a Link only")
        return {"mode": "form", "message": message or self.message, "requestedSchema": self._schema}

    def _validate(self, content: Mapping[str, Any] | None) -> BaseModel:
        if content is None:
            raise AnswerRejected("the answer was accepted but carried no values")
        known = {k: v for k, v in content.items() if k in self._schema.get("properties", {})}
        problems = type_problems(known, self._schema)
        if problems:
            raise AnswerRejected("; ".join(problems))
        try:
            return self._model.model_validate(known, strict=False)
        except ValidationError as exc:
            raise AnswerRejected(answer_problems(exc, self._schema)) from None


@dataclass(frozen=True, kw_only=True)
class Form(_FormBase[M]):
    """A flat form from a pydantic model; an accepted answer gives a validated instance of the model.

    ```python
    class Shipping(BaseModel):
        city: str = Field(title="City", max_length=40)
        express: bool = Field(default=False, title="Express delivery")

    shipping = Form(key="shipping", model=Shipping, message="Where should it go?")
    ```
    """

    model: type[M]

    def _form_model(self) -> type[BaseModel]:
        if not (isinstance(self.model, type) and issubclass(self.model, BaseModel)):
            raise DefinitionError(f"question {self.key!r}: model must be a pydantic BaseModel subclass")
        return self.model

    def read(self, content: Mapping[str, Any] | None, *, expect: str | None = None) -> M:
        return cast(M, self._validate(content))


@dataclass(frozen=True, kw_only=True)
class Confirm(_FormBase[bool]):
    """A confirmation. Plain: a yes/no checkbox (`True` only when ticked). Typed (`typed=True`): the user types an
    exact value, such as the project name, and the answer is `True` only when it matches the `expect=` given at ask
    time; asked without `expect=`, it is refused before it goes out.
    """

    field: str = "confirm"
    title: str = "Confirm"
    typed: bool = False

    def _form_model(self) -> type[BaseModel]:
        kind: Any = str if self.typed else bool
        fields: dict[str, Any] = {self.field: (kind, Field(title=self.title))}
        return create_model(f"Confirm_{self.key}", __config__=ConfigDict(extra="ignore"), **fields)

    def read(self, content: Mapping[str, Any] | None, *, expect: str | None = None) -> bool:
        value = getattr(self._validate(content), self.field)
        if self.typed:
            if expect is None:
                raise DefinitionError(
                    f"question {self.key!r} is a typed confirmation: pass expect= when asking", when="asked"
                )
            return bool(value == expect)
        return bool(value)


@dataclass(frozen=True, kw_only=True)
class Choice(_FormBase[Any]):
    """A choice from a list of values (`options`: values, or a mapping of value to title). An accepted answer gives
    the chosen value, or a list of values with `multiple=True`."""

    options: Sequence[str] | Mapping[str, str]
    field: str = "choice"
    title: str | None = None
    multiple: bool = False

    def __post_init__(self) -> None:
        values = self.values
        if not values or len(set(values)) != len(values) or not all(isinstance(v, str) and v for v in values):
            raise DefinitionError(f"question {self.key!r}: options must be distinct non-empty strings")
        super().__post_init__()

    def _form_model(self) -> type[BaseModel]:
        literal: Any = Literal[self.values]
        kind: Any = list[literal] if self.multiple else literal
        fields: dict[str, Any] = {
            self.field: (kind, Field(title=self.title or self.field.replace("_", " ").capitalize()))
        }
        return create_model(f"Choice_{self.key}", __config__=ConfigDict(extra="ignore"), **fields)

    def _adjust_schema(self, schema: dict[str, Any]) -> None:
        if isinstance(self.options, Mapping):
            prop = schema["properties"][self.field]
            titled = [{"const": v, "title": t} for v, t in self.options.items()]
            if self.multiple:
                prop["items"] = {"anyOf": titled}
            else:
                prop.pop("enum", None)
                prop["oneOf"] = titled

    def fallback_error(self) -> str | None:
        # An argument fallback without its own list of values takes the choice's.
        if isinstance(self.fallback, Argument) and self.fallback.values is None:
            return replace(self, fallback=Argument(self.fallback.name, self.values)).fallback_error()
        return super().fallback_error()

    @property
    def values(self) -> tuple[str, ...]:
        return tuple(self.options.keys() if isinstance(self.options, Mapping) else self.options)

    def read(self, content: Mapping[str, Any] | None, *, expect: str | None = None) -> Any:
        return getattr(self._validate(content), self.field)


_PLAIN_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,23}")


def connect_key(connection: str, label: str = "") -> str:
    """The key of the link `flow.connect` asks to connect `connection`'s account `label` (`""`: the default one, as
    account events spell it): `connect.<connection>` for the default account; `connect.<connection>.<label>` for a
    short plain label (letters, digits, `_` and `-`, up to 24), `connect.<connection>.-<digest>` for any other.
    One key per account, so that the agent runtime, which builds the same key from an account event, resumes only the
    calls waiting for exactly that account. (The key carries it because a link's `_meta` does not reach the client.)"""
    base = "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in connection)
    if not label:
        named = base[:50]
    else:
        plain = _PLAIN_LABEL.fullmatch(label) is not None
        named = base[:30] + "." + (label if plain else "-" + hashlib.sha256(label.encode()).hexdigest()[:16])
    return "connect." + named


def check_link(url: str, *, key: str = "link") -> str:
    """Refuse links the spec forbids: not https (plain http only on loopback), credentials in userinfo or query."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if (parts.scheme == "https" and host) or (parts.scheme == "http" and addresses.is_loopback(host)):
        pass
    else:
        raise DefinitionError(
            f"question {key!r}: link {parts.scheme}://{host or '?'}... must be https (plain http is allowed only on "
            "loopback, for development)"
        )
    if parts.username or parts.password:
        raise DefinitionError(f"question {key!r}: the link carries credentials in its user-info; remove them")
    for name, _ in parse_qsl(parts.query, keep_blank_values=True):
        if name.lower() in _CREDENTIAL_PARAMS or looks_secret(name):
            raise DefinitionError(
                f"question {key!r}: the link's query parameter {name!r} looks like a credential. A link must carry "
                "no secret and not be pre-authenticated: put an opaque id in it and check who opens it."
            )
    return url


@dataclass(frozen=True, kw_only=True)
class Link(Question[None]):
    """Send the user to a page (URL mode): sign-in to another service, payment, anything sensitive.

    An accepted link only means the user agreed to open it. The handler decides whether the work is done by
    checking real state (`flow.link(q, url=..., done=account.active)`), never by the accept itself. A link is never
    downgraded to a form.
    """

    url: str | None = None

    mode: ClassVar[Literal["form", "url"]] = "url"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.fallback is not None:
            raise DefinitionError(
                f"question {self.key!r}: a link has no fallback. Nothing can stand in for the user visiting the "
                "page, and a link is never downgraded to a form; without URL mode the call fails with -32021."
            )
        if self.url is not None:
            check_link(self.url, key=self.key)

    def render(self, *, message: str | None = None, url: str | None = None) -> dict[str, Any]:
        target = url or self.url
        if target is None:
            raise DefinitionError(f"question {self.key!r} has no url: pass url= when asking", when="asked")
        check_link(target, key=self.key)
        return {"mode": "url", "message": message or self.message, "url": target}

    def read(self, content: Mapping[str, Any] | None, *, expect: str | None = None) -> None:
        return None


_RENAMED = {"is_loopback": "askback.core.addresses.is_loopback"}

if not TYPE_CHECKING:  # old names are for code not yet moved to the new ones, never for askback's own

    def __getattr__(name: str) -> Any:
        from askback._face import renamed

        return renamed(__name__, _RENAMED, name, globals())
