"""Reading what a question's form sent: the answer it makes, or why it is refused (no I/O)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.datastructures import FormData

from askback.errors import InvalidAnswerError
from askback.runtime.forms import Field, check_field, fields, parse
from askback.runtime.inbox._view import PREFIX, Asked, Values
from askback.runtime.questions import Action, Answer

_ACTIONS: tuple[Action, ...] = ("accept", "decline", "cancel")


@dataclass(frozen=True)
class Refused:
    """An answer not recorded: the question's page again, with what was typed (`values`), what is wrong with each
    field (`errors`, by field name) or with the answer as a whole (`problem`)."""

    values: Values | None = None
    errors: Mapping[str, str] = field(default_factory=dict)
    problem: str | None = None


def submitted(form_fields: Sequence[Field], form: FormData) -> Values:
    """What the person sent in each field, as sent (to be shown again if the answer is refused)."""
    values: Values = {}
    for f in form_fields:
        name = PREFIX + f.name
        if f.kind == "boolean":
            values[f.name] = form.get(name) is not None
        elif f.kind == "multi" and f.choices:
            values[f.name] = [v for v in form.getlist(name) if isinstance(v, str)]
        else:
            raw = form.get(name)
            values[f.name] = raw if isinstance(raw, str) else ""
    return values


def _one_field_problem(f: Field, value: Any) -> str | None:
    wrong = check_field(f, value)
    return f"{f.title}: {'; '.join(wrong)}" if wrong else None


def _content(form_fields: Sequence[Field], values: Values) -> tuple[dict[str, Any], dict[str, str]]:
    """The answer's content from what was sent, and what is wrong with each field (by name). An unticked checkbox
    is `false`; a group of checkboxes is the list of ticked values (none ticked: no value)."""
    content: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for f in form_fields:
        raw = values.get(f.name, "")
        value: Any
        try:
            if f.kind == "boolean":
                value = raw is True
            elif isinstance(raw, list):
                value = raw or None
            else:
                value = parse(f, str(raw))
        except InvalidAnswerError as exc:
            errors[f.name] = str(exc)
            continue
        problem = _one_field_problem(f, value)
        if problem is not None:
            errors[f.name] = problem
        elif value is not None:
            content[f.name] = value
    return content, errors


def _action(value: object) -> Action | None:
    for action in _ACTIONS:
        if value == action:
            return action
    return None


def read_answer(item: Asked, form: FormData) -> Answer | Refused:
    """The answer the person sent to `item` with the button they pressed, or why it cannot be recorded."""
    q = item.question
    action = _action(form.get("action"))
    if action is None:
        return Refused(problem="Press one of the buttons: Send answer, Decline or Cancel.")
    if action != "accept":
        return Answer(action)
    if q.problem is not None:
        return Refused(problem="This question cannot be accepted: decline or cancel it.")
    if q.mode == "form":
        values = submitted(fields(q.schema), form)
        content, errors = _content(fields(q.schema), values)
        return Refused(values=values, errors=errors) if errors else Answer("accept", content)
    if item.host is None:
        return Refused(problem="This question cannot be accepted here: decline or cancel it.")
    return Answer("accept")


def refused_by_the_runtime(item: Asked, form: FormData, exc: InvalidAnswerError) -> Refused:
    """The page again after the runtime refused the answer: what was typed kept, its problems beside each field."""
    q = item.question
    kept = submitted(fields(q.schema), form) if q.mode == "form" and q.problem is None else None
    if exc.problems and kept is not None:
        titles = {f.name: f.title for f in fields(q.schema)}
        errors = {name: f"{titles.get(name, name)}: {'; '.join(ps)}" for name, ps in exc.problems.items()}
        return Refused(values=kept, errors=errors)
    return Refused(values=kept, problem=str(exc))
