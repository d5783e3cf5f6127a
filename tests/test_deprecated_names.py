"""A renamed public name keeps its old name for one minor release: importing it works and warns, naming the new
name and the release that removes it (CHANGELOG.md, "Deprecated")."""

from __future__ import annotations

import importlib

import pytest

from askback._face import REMOVED_IN
from infra import ROOT

# (face, old name, new name): every rename of this release.
RENAMED = [("askback.runtime", "Question", "ParkedQuestion")]


@pytest.mark.parametrize(("face", "old", "new"), RENAMED)
def test_an_old_name_imports_the_new_one_and_warns_each_time(face: str, old: str, new: str) -> None:
    module = importlib.import_module(face)
    for _ in range(2):
        with pytest.warns(DeprecationWarning, match=rf"{face}\.{old} is deprecated .* {REMOVED_IN}: use {face}\.{new}"):
            value = getattr(module, old)
        assert value is getattr(module, new)
    assert old not in module.__all__


@pytest.mark.parametrize(("face", "old", "new"), RENAMED)
def test_every_deprecated_name_is_in_the_changelog(face: str, old: str, new: str) -> None:
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert f"{face}.{old}" in changelog and new in changelog


def test_a_name_that_never_was_is_still_an_attribute_error() -> None:
    import askback.runtime

    with pytest.raises(AttributeError, match="has no attribute 'Questions'"):
        _ = askback.runtime.Questions
