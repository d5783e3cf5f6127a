"""People's sign-in settings are one typed object, read one way: the hosted pages' sign-in
(`PeopleSignIn.from_settings`) and `askback inbox serve --auth-issuer` get the same values from the same environment
and refuse a bad value with the same words."""

from __future__ import annotations

import os
import secrets

import pytest
from pydantic import SecretStr

from askback.cli._inbox_people import inbox_people
from askback.errors import ConfigurationError
from askback.identity import PeopleSignIn, SignInSettings

ISSUER = "https://login.example.com"
CLIENT_ID = "askback"
SERVED_AT = "http://127.0.0.1:8765"
SESSION_SECRET = secrets.token_urlsafe(32)
FULL = {
    "ASKBACK_SIGNIN_ISSUER": ISSUER,
    "ASKBACK_SIGNIN_CLIENT_ID": CLIENT_ID,
    "ASKBACK_SIGNIN_CLIENT_SECRET": "s3cret-value",
    "ASKBACK_SESSION_SECRET": SESSION_SECRET,
    "ASKBACK_PUBLIC_URL": "https://tools.example.com/",
    "ASKBACK_AUTH_PRINCIPAL_CLAIM": "email",
    "ASKBACK_AUTH_ISSUER": "https://tokens.example.com",
}


@pytest.fixture
def environ(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in os.environ:
        if name.startswith("ASKBACK_"):
            monkeypatch.delenv(name)
    return monkeypatch


def pages(env: dict[str, str]) -> SignInSettings:
    return PeopleSignIn.from_settings(env).settings


def inbox(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> SignInSettings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sign_in = inbox_people(None, None, ISSUER, CLIENT_ID, SERVED_AT).sign_in
    assert sign_in is not None
    return sign_in.settings


def test_the_pages_and_the_inbox_read_the_same_settings_from_the_same_environment(
    environ: pytest.MonkeyPatch,
) -> None:
    read = pages(FULL)
    assert inbox(FULL, environ) == read
    assert read == SignInSettings(
        issuer=ISSUER,
        client_id=CLIENT_ID,
        client_secret=SecretStr("s3cret-value"),
        base_url="https://tools.example.com",
        session_secret=SESSION_SECRET.encode(),
        principal_claim="email",
        tokens_issuer="https://tokens.example.com",
    )
    assert read.home_issuer == "https://tokens.example.com" and read.secure
    assert "s3cret-value" not in repr(read) and SESSION_SECRET not in repr(read)


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("ASKBACK_SESSION_SECRET", "too-short", "at least 32 bytes"),
        ("ASKBACK_PUBLIC_URL", "http://tools.example.com", "https"),
        ("ASKBACK_PUBLIC_URL", "https://tools.example.com/?next=1", "absolute https URL"),
        ("ASKBACK_AUTH_ISSUER", "http://tokens.example.com", "https"),
        ("ASKBACK_SIGNIN_CLIENT_SECRET", "", "set ASKBACK_SIGNIN_CLIENT_SECRET"),
    ],
)
def test_the_pages_and_the_inbox_refuse_a_bad_value_with_the_same_words(
    environ: pytest.MonkeyPatch, name: str, value: str, said: str
) -> None:
    bad = {**FULL, name: value}
    with pytest.raises(ConfigurationError) as by_pages:
        pages(bad)
    with pytest.raises(ConfigurationError) as by_inbox:
        inbox(bad, environ)
    assert str(by_pages.value) == str(by_inbox.value)
    assert name in str(by_pages.value) and said in str(by_pages.value)
    assert not value or value not in str(by_pages.value)


def test_every_problem_is_said_at_once_naming_what_to_set(environ: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigurationError) as refused:
        SignInSettings.from_environ({"ASKBACK_SESSION_SECRET": "short"})
    text = str(refused.value)
    for name in (
        "ASKBACK_AUTH_ISSUER",
        "ASKBACK_SIGNIN_CLIENT_ID",
        "ASKBACK_SIGNIN_CLIENT_SECRET",
        "ASKBACK_PUBLIC_URL",
    ):
        assert f"set {name}" in text
    assert "ASKBACK_SESSION_SECRET is not usable" in text


def test_only_the_inbox_makes_a_session_secret_when_none_is_set_and_says_so(environ: pytest.MonkeyPatch) -> None:
    unset = {k: v for k, v in FULL.items() if k not in ("ASKBACK_SESSION_SECRET", "ASKBACK_PUBLIC_URL")}
    with pytest.raises(ConfigurationError, match="set ASKBACK_SESSION_SECRET"):
        pages({**unset, "ASKBACK_PUBLIC_URL": SERVED_AT})
    for name, value in unset.items():
        environ.setenv(name, value)
    people = inbox_people(None, None, ISSUER, CLIENT_ID, SERVED_AT)
    assert people.sign_in is not None and people.sign_in.settings.session_secret_made
    assert people.sign_in.settings.base_url == SERVED_AT
    assert people.notice is not None and "ASKBACK_SESSION_SECRET is not set" in people.notice


def test_arguments_are_checked_as_the_environment_is_naming_the_argument_and_its_variable() -> None:
    given = PeopleSignIn(
        issuer=ISSUER,
        client_id=CLIENT_ID,
        client_secret=SecretStr("s3cret-value"),
        base_url="https://tools.example.com",
        session_secret=SESSION_SECRET,
        principal_claim="email",
        tokens_issuer="https://tokens.example.com",
    )
    assert given.settings == pages(FULL)
    with pytest.raises(ConfigurationError, match=r"base_url \(ASKBACK_PUBLIC_URL\) is not usable"):
        PeopleSignIn(
            issuer=ISSUER,
            client_id=CLIENT_ID,
            client_secret=SecretStr("x"),
            base_url="http://tools.example.com",
            session_secret=SESSION_SECRET,
        )
