"""People's sign-in settings: one typed object, read from the environment (or given as arguments) and validated once,
for every reader: `PeopleSignIn.from_settings` on the hosted pages and `askback inbox serve --auth-issuer`.

| variable | meaning | default |
| --- | --- | --- |
| `ASKBACK_SIGNIN_ISSUER` | where people sign in (OpenID Connect; https, http on loopback) | `ASKBACK_AUTH_ISSUER` |
| `ASKBACK_SIGNIN_CLIENT_ID`, `ASKBACK_SIGNIN_CLIENT_SECRET` | askback's client at that issuer | none |
| `ASKBACK_PUBLIC_URL` | where people reach the site (https; http on loopback only, for development) | none |
| `ASKBACK_SESSION_SECRET` | signs the cookies: at least 32 bytes, the same on every instance | none |
| `ASKBACK_AUTH_PRINCIPAL_CLAIM` | the ID token's claim that names the person | `sub` |
| `ASKBACK_SIGNIN_GROUPS_CLAIM` | the ID token's claim that lists the person's groups (a list of names) | `groups` |
| `ASKBACK_AUTH_ISSUER` | the issuer of `/mcp`'s tokens, whose subjects are bare principals | none |

How long a session lasts and how many one person holds are askback's own settings (`ASKBACK_SESSION_TTL`,
`ASKBACK_SESSIONS_PER_PERSON`), read with the rest of them when the sign-in starts.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretBytes, SecretStr, ValidationError, field_validator

from askback.core.addresses import is_loopback
from askback.errors import ConfigurationError
from askback.identity._discovery import check_issuer
from askback.identity._session import MIN_SECRET_BYTES

__all__ = ["SignInSettings"]

# Each setting's variable, and what it is for when it is missing.
VARIABLES: Mapping[str, tuple[str, str]] = {
    "issuer": ("ASKBACK_SIGNIN_ISSUER", "the issuer people sign in at (ASKBACK_SIGNIN_ISSUER or ASKBACK_AUTH_ISSUER)"),
    "client_id": ("ASKBACK_SIGNIN_CLIENT_ID", "its client id at the issuer"),
    "client_secret": ("ASKBACK_SIGNIN_CLIENT_SECRET", "its client secret at the issuer"),
    "base_url": ("ASKBACK_PUBLIC_URL", "the URL people reach the site at, such as https://tools.example.com"),
    "session_secret": ("ASKBACK_SESSION_SECRET", f"a session secret of at least {MIN_SECRET_BYTES} bytes"),
    "principal_claim": ("ASKBACK_AUTH_PRINCIPAL_CLAIM", "the ID token's claim that names the person"),
    "groups_claim": ("ASKBACK_SIGNIN_GROUPS_CLAIM", "the ID token's claim that lists the person's groups"),
    "tokens_issuer": ("ASKBACK_AUTH_ISSUER", "the issuer of /mcp's tokens"),
}
_MAKE_SECRET = (
    "make one with `python -c 'import secrets; print(secrets.token_urlsafe(32))'`, the same on every instance"
)


class SignInSettings(BaseModel):
    """People's sign-in, as every reader sees it (see the module's docstring): `base_url` is `ASKBACK_PUBLIC_URL`;
    `session_secret_made` says that no session secret was set and one was made at start-up (`askback inbox serve`
    only), so that every sign-in ends when the process stops."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str
    client_id: str = Field(min_length=1)
    client_secret: SecretStr
    base_url: str
    session_secret: SecretBytes
    principal_claim: str = Field(default="sub", min_length=1)
    groups_claim: str = Field(default="groups", min_length=1, max_length=255)
    tokens_issuer: str | None = None
    session_secret_made: bool = False

    @field_validator("issuer")
    @classmethod
    def _issuer(cls, value: str) -> str:
        return check_issuer(value)

    @field_validator("tokens_issuer")
    @classmethod
    def _tokens_issuer(cls, value: str | None) -> str | None:
        return check_issuer(value) if value else None

    @field_validator("base_url")
    @classmethod
    def _site(cls, value: str) -> str:
        site = urlsplit(value)
        if site.scheme not in ("https", "http") or not site.hostname or site.query or site.fragment:
            raise ValueError("the site's base URL is an absolute https URL, such as https://tools.example.com")
        if site.scheme == "http" and not is_loopback(site.hostname):
            raise ValueError(
                "the session cookie is Secure, which a browser keeps only over https: give the site's https URL "
                "(http is accepted only on loopback, for development)"
            )
        return value.rstrip("/")

    @field_validator("session_secret", mode="before")
    @classmethod
    def _secret_bytes(cls, value: Any) -> Any:
        if isinstance(value, SecretStr | SecretBytes):
            value = value.get_secret_value()
        return value.encode() if isinstance(value, str) else value

    @field_validator("session_secret")
    @classmethod
    def _long_enough(cls, value: SecretBytes) -> SecretBytes:
        if len(value.get_secret_value()) < MIN_SECRET_BYTES:
            raise ValueError(f"a session secret is at least {MIN_SECRET_BYTES} bytes: {_MAKE_SECRET}")
        return value

    @property
    def home_issuer(self) -> str:
        """The issuer whose subjects are bare principals: the tokens' issuer when there is one, else `issuer`."""
        return self.tokens_issuer or self.issuer

    @property
    def secure(self) -> bool:
        """Whether the site is served over https (its cookies then Secure)."""
        return urlsplit(self.base_url).scheme == "https"

    @classmethod
    def given(cls, **values: Any) -> SignInSettings:
        """The settings given as arguments (`PeopleSignIn(...)`); `ConfigurationError` naming each wrong argument and
        the variable that sets it."""
        return _validated(values, named=lambda field, variable: f"{field} ({variable})")

    @classmethod
    def from_environ(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        issuer: str | None = None,
        client_id: str | None = None,
        served_at: str | None = None,
        make_session_secret: bool = False,
    ) -> SignInSettings:
        """The settings of `environ` (the process's environment when `None`; each value stripped, an empty one
        unset). `issuer` and `client_id`, when given (`--auth-issuer`, `--auth-client-id`), stand for
        `ASKBACK_SIGNIN_ISSUER` and `ASKBACK_SIGNIN_CLIENT_ID`; `served_at` is the base URL when `ASKBACK_PUBLIC_URL`
        is unset; `make_session_secret` makes a session secret when `ASKBACK_SESSION_SECRET` is unset. One
        `ConfigurationError` names each variable to set or change, never its value."""
        env = os.environ if environ is None else environ

        def read(name: str) -> str | None:
            return env.get(name, "").strip() or None

        values: dict[str, Any] = {
            "issuer": issuer or read("ASKBACK_SIGNIN_ISSUER") or read("ASKBACK_AUTH_ISSUER"),
            "client_id": client_id or read("ASKBACK_SIGNIN_CLIENT_ID"),
            "client_secret": read("ASKBACK_SIGNIN_CLIENT_SECRET"),
            "base_url": read("ASKBACK_PUBLIC_URL") or served_at,
            "session_secret": read("ASKBACK_SESSION_SECRET"),
            "principal_claim": read("ASKBACK_AUTH_PRINCIPAL_CLAIM") or "sub",
            "groups_claim": read("ASKBACK_SIGNIN_GROUPS_CLAIM") or "groups",
            "tokens_issuer": read("ASKBACK_AUTH_ISSUER"),
        }
        if values["session_secret"] is None and make_session_secret:
            values |= {"session_secret": secrets.token_urlsafe(32), "session_secret_made": True}
        if issuer:
            issuer_from = "--auth-issuer"
        else:
            issuer_from = "ASKBACK_SIGNIN_ISSUER" if read("ASKBACK_SIGNIN_ISSUER") else "ASKBACK_AUTH_ISSUER"

        def named(field: str, variable: str) -> str:
            if field == "issuer":
                return issuer_from
            return "--auth-client-id" if field == "client_id" and client_id else variable

        return _validated({k: v for k, v in values.items() if v is not None}, named=named)


def _validated(values: Mapping[str, Any], *, named: Callable[[str, str], str]) -> SignInSettings:
    """`SignInSettings(**values)`, or one `ConfigurationError` listing what is missing and what is wrong, each by the
    name `named(field, variable)` gives it."""
    try:
        return SignInSettings(**values)
    except ValidationError as exc:
        missing, wrong = [], []
        for err in exc.errors(include_input=False, include_url=False):
            field = str(err["loc"][0]) if err["loc"] else ""
            variable, what = VARIABLES.get(field, (field, field))
            if err["type"] == "missing":
                missing.append(f"{what}: set {named(field, variable)}")
            else:
                wrong.append(f"{named(field, variable)} is not usable: {err['msg'].removeprefix('Value error, ')}")
        problems = dict.fromkeys([*(f"needs {m}" for m in missing), *wrong])  # an issuer wrong twice is said once
        text = "The people's sign-in " + "; ".join(problems) + "."
        raise ConfigurationError(text) from None
