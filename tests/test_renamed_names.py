"""A renamed name still answers at its old place for one minor release, with a `DeprecationWarning` that names the
new one, and is the very same object (CHANGELOG.md says what to change)."""

from __future__ import annotations

import importlib

import pytest

from askback._face import REMOVED_IN
from infra import ROOT

RENAMED = [
    ("askback.runtime", "Question", "askback.runtime", "ParkedQuestion"),
    ("askback.asgi", "FormGuard", "askback.web.asgi", "FormGuard"),
    ("askback.asgi", "HostGuard", "askback.web.asgi", "HostGuard"),
    ("askback.pages", "PageKit", "askback.web.pages", "PageKit"),
    ("askback.pages", "safe_next_path", "askback.web.pages", "safe_next_path"),
    ("askback.accounts.links", "Link", "askback.accounts.links", "AuthorizationLink"),
    ("askback.core.questions", "is_loopback", "askback.core.addresses", "is_loopback"),
    ("askback.runtime.questions", "Link", "askback.runtime.questions", "CheckedLink"),
    ("askback.runtime.questions", "check_link", "askback.runtime.questions", "checked_link"),
    ("askback.core.round_steps", "Outcome", "askback.core.round_steps", "RoundEnd"),
    ("askback.core.round_plan", "Outcome", "askback.core.round_steps", "RoundEnd"),
]


@pytest.mark.parametrize(("old_module", "old", "new_module", "new"), RENAMED, ids=lambda v: str(v))
def test_an_old_name_still_answers_with_a_warning_naming_the_new_one(
    old_module: str, old: str, new_module: str, new: str
) -> None:
    module = importlib.import_module(old_module)
    for _ in range(2):  # every use warns, not only the first
        with pytest.warns(DeprecationWarning, match=rf"{old_module}\.{old} is deprecated .* {REMOVED_IN}: .*\b{new}\b"):
            value = getattr(module, old)
        assert value is getattr(importlib.import_module(new_module), new)
    assert old not in module.__all__ and new in importlib.import_module(new_module).__all__


@pytest.mark.parametrize(("old_module", "old", "new_module", "new"), RENAMED, ids=lambda v: str(v))
def test_every_renamed_name_is_in_the_changelog_with_its_new_name(
    old_module: str, old: str, new_module: str, new: str
) -> None:
    changelog = " ".join((ROOT / "CHANGELOG.md").read_text().split())
    # Named as it is (`askback.runtime.Question`), or as its module's move (`askback.asgi` is `askback.web.asgi`).
    moved = old == new and f"`{old_module}` is `{new_module}`" in changelog
    assert moved or (f"{old_module}.{old}" in changelog and new in changelog)


def test_a_name_that_never_was_is_still_an_attribute_error() -> None:
    from askback.runtime import questions

    with pytest.raises(AttributeError, match="no attribute 'Linq'"):
        questions.Linq  # noqa: B018
