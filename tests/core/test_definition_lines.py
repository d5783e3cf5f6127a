"""A question or tool defined wrongly is refused with the line of the user's code that defined it, not the line of
askback's own file that noticed: in the error's text, which is what a terminal shows last, and in `askback serve`'s
one line for a module that fails to import. A client is never told the server's file names."""

from __future__ import annotations

import runpy
import secrets
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from askback import DefinitionError
from askback.cli.serve import load_target
from askback.errors import ConfigurationError
from infra import run_askback

HEAD = """\
from pydantic import BaseModel, Field

from askback import Askback, Choice, Confirm, Flow, Form, Link, load_settings

app = Askback("ops", settings=load_settings(state_keys="k" * 43))


class Address(BaseModel):
    city: str


class Shipping(BaseModel):
    address: Address


class Login(BaseModel):
    user: str
    password: str = Field(title="Password")

"""

BAD = {
    "a nested model": 'shipping = Form(key="shipping", model=Shipping, message="Where should it go?")',
    "a secret-looking field": 'login = Form(key="login", model=Login, message="Sign in.")',
    "an unsafe link": 'pay = Link(key="pay", message="Pay.", url="http://pay.example.com/x")',
    "duplicate options": 'env = Choice(key="env", message="Where?", options=["dev", "dev"])',
    "a key that cannot go on the wire": 'odd = Confirm(key="1 odd", message="Sure?")',
    "a synchronous handler": "@app.tool()\ndef sync(flow: Flow) -> str:\n    return 'no'",
    "two questions with one key": (
        'go = Confirm(key="go", message="Go?")\n'
        'again = Confirm(key="go", message="Go again?")\n'
        "@app.tool(asks=[go, again])  # refused here\n"
        "async def twice(flow: Flow) -> str:\n"
        "    return 'no'"
    ),
}


def user_module(folder: Path, bad: str) -> tuple[Path, int]:
    """A module of the user's that defines something wrongly; its path and the line askback should name (the one
    marked `# refused here`, or the first)."""
    name = f"ops_{secrets.token_hex(4)}"
    path = folder / f"{name}.py"
    path.write_text(HEAD + textwrap.dedent(bad) + "\n", encoding="utf-8")
    lines = bad.splitlines()
    marked = next((n for n, text in enumerate(lines) if text.endswith("# refused here")), 0)
    return path, HEAD.count("\n") + 1 + marked


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_a_definition_error_names_the_users_file_and_line_not_askbacks(tmp_path: Path, bad: str) -> None:
    path, line = user_module(tmp_path, bad)
    with pytest.raises(DefinitionError) as refused:
        runpy.run_path(str(path))
    text = str(refused.value)
    assert text.endswith(f"(defined at {path}:{line})"), text
    assert refused.value.where == f"{path}:{line}"
    assert "askback/" not in text.replace(str(path), "")
    assert refused.value.message == text.removesuffix(f" (defined at {path}:{line})")


def test_the_line_is_relative_to_the_current_directory_when_the_file_is_under_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, line = user_module(tmp_path, BAD["a nested model"])
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DefinitionError) as refused:
        runpy.run_path(str(path))
    assert str(refused.value).endswith(f"(defined at {path.name}:{line})")


def test_the_wire_gets_the_message_without_the_file_and_line(tmp_path: Path) -> None:
    path, _ = user_module(tmp_path, BAD["an unsafe link"])
    with pytest.raises(DefinitionError) as refused:
        runpy.run_path(str(path))
    sent = refused.value.to_mcp_error().error
    assert sent.code == -32603 and sent.message == refused.value.message and str(path) not in sent.message


def test_askback_serve_names_the_users_line_for_a_module_that_fails_to_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, line = user_module(tmp_path, BAD["a nested model"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as refused:
        load_target(f"{path.stem}:app")
    text = str(refused.value)
    assert f"{path.name}:{line}" in text and "questions.py" not in text
    assert text.count(f"{path.name}:{line}") == 1, text


def test_askback_serve_names_the_users_line_for_any_exception_raised_inside_a_library(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, line = user_module(tmp_path, 'import json\nconfig = json.loads("{not json")')
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError) as refused:
        load_target(f"{path.stem}:app")
    text = str(refused.value)
    assert text.endswith(f"at {path.name}:{line + 1}"), text
    assert "json/decoder.py" not in text


def test_a_connections_file_names_its_own_entry_and_not_the_line_that_loaded_it(tmp_path: Path) -> None:
    from askback.accounts.connections import load_connections

    path = tmp_path / "connections.toml"
    path.write_text(
        '[connections.lab]\nclient_id = "a"\nclient_secret_env = "S"\n'
        'authorize_url = "http://lab.example.com/authorize"\ntoken_url = "https://lab.example.com/token"\n'
    )
    with pytest.raises(ConfigurationError) as refused:
        load_connections(path, environ={"S": "not-a-secret"})
    text = str(refused.value)
    assert text.startswith(f"{path}: [connections.lab]: ") and "must use https" in text
    assert "defined at" not in text and ".py" not in text


@pytest.mark.http
def test_a_served_module_that_defines_a_nested_form_is_refused_naming_its_line(tmp_path: Path) -> None:
    path, line = user_module(tmp_path, BAD["a nested model"])
    result = run_askback("serve", f"{path.stem}:app", "--port", "1", cwd=tmp_path, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"{path.name}:{line}" in result.stderr and "questions.py" not in result.stderr, result.stderr


@pytest.mark.http
def test_importing_a_module_that_defines_a_nested_form_ends_its_traceback_with_the_users_line(tmp_path: Path) -> None:
    path, line = user_module(tmp_path, BAD["a nested model"])
    result = subprocess.run(
        [sys.executable, "-c", f"import {path.stem}"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("askback.errors.DefinitionError: question 'shipping'"), result.stderr
    assert last.endswith(f"(defined at {path.name}:{line})"), result.stderr
