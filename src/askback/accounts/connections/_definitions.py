"""The definitions: `OAuthConnection` and `ApiKeyConnection` (each checked when made, a `DefinitionError` naming
what is wrong), `secret_from_env` for the one secret a connection holds, and the `Connections` registry."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, TypeAlias

from pydantic import SecretStr

from askback.accounts.connections._checks import (
    check_name,
    checked_authorize_params,
    checked_origins,
    checked_scopes,
    url_problem,
)
from askback.errors import ConfigurationError, DefinitionError

TokenAuthMethod: TypeAlias = Literal["client_secret_basic", "client_secret_post"]
TokenTypeHint: TypeAlias = Literal["access_token", "refresh_token"]


# RFC 9110 §5.6.2: a header name (and an auth scheme) is a token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@dataclass(frozen=True, kw_only=True)
class OAuthConnection:
    """An OAuth 2.0 authorization-code connection (PKCE S256 always).

    Give `authorize_url` and `token_url`, or `issuer` alone and let `discover` fill them in from the provider's
    metadata. `authorize_params` are added to every authorization URL (Google's `access_type=offline`, for one) and
    may not replace what the request itself sets. `scope_separator` is `" "` (RFC 6749) except for Slack (`","`).
    `origins` are where the access token may be sent (`https://api.example.com`; plain http on loopback only), kept
    normalised; without any, a connected account's `http` client sends it nowhere.
    """

    name: str
    client_id: str
    client_secret: SecretStr
    authorize_url: str | None = None
    token_url: str | None = None
    revocation_url: str | None = None
    scopes: tuple[str, ...] = ()
    authorize_params: Mapping[str, str] = field(default_factory=dict, hash=False)
    token_auth_method: TokenAuthMethod = "client_secret_basic"
    issuer: str | None = None
    scope_separator: str = " "
    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name(self.name)
        what = f"OAuth connection {self.name!r}"
        if not isinstance(self.client_id, str) or not self.client_id.strip():
            raise DefinitionError(f"{what} has no client_id; give the client id the provider issued for this app.")
        secret = self.client_secret
        if isinstance(secret, str):
            secret = SecretStr(secret)
            object.__setattr__(self, "client_secret", secret)
        if not isinstance(secret, SecretStr) or not secret.get_secret_value():
            raise DefinitionError(
                f"{what} has no client_secret; pass the provider's client secret (from the environment: "
                "`secret_from_env(NAME)`)."
            )
        object.__setattr__(self, "scopes", checked_scopes(self.scopes, what, self.scope_separator))
        object.__setattr__(self, "authorize_params", checked_authorize_params(self.authorize_params, what))
        object.__setattr__(self, "origins", checked_origins(self.origins, what))
        if self.token_auth_method not in ("client_secret_basic", "client_secret_post"):
            raise DefinitionError(
                f"{what}: token_auth_method is {self.token_auth_method!r}; use 'client_secret_basic' or "
                "'client_secret_post'."
            )
        if self.scope_separator not in (" ", ","):
            raise DefinitionError(f"{what}: scope_separator must be ' ' (RFC 6749) or ',' (Slack).")
        for key in ("authorize_url", "token_url", "revocation_url"):
            url = getattr(self, key)
            if url is not None and (problem := url_problem(url)):
                raise DefinitionError(f"{what}: {key} {problem}.")
        if self.issuer is not None and (problem := url_problem(self.issuer, issuer=True)):
            raise DefinitionError(f"{what}: issuer {problem}.")
        if (self.authorize_url is None or self.token_url is None) and self.issuer is None:
            raise DefinitionError(
                f"{what} needs authorize_url and token_url, or an issuer to discover them from; give either."
            )

    @property
    def needs_discovery(self) -> bool:
        """True while an endpoint is still to be read from the issuer's metadata (`discover`)."""
        return self.authorize_url is None or self.token_url is None


@dataclass(frozen=True, kw_only=True)
class KeyCheck:
    """A request that proves an API key works before the account turns active: `GET url` with the key placed as
    the connection says, answered with `expected_status`."""

    url: str
    expected_status: int = 200

    def __post_init__(self) -> None:
        if problem := url_problem(self.url):
            raise DefinitionError(f"KeyCheck url {problem}.")
        if not 100 <= self.expected_status <= 599:
            raise DefinitionError(f"KeyCheck expected_status {self.expected_status} is not an HTTP status.")


@dataclass(frozen=True, kw_only=True)
class ApiKeyConnection:
    """A connection whose credential is an API key each person enters on the hosted page.

    `label` names the key field on that page. `header` (and `scheme`) say how the key is sent: `Authorization` with
    scheme `Bearer` gives `Authorization: Bearer <key>`; `X-Api-Key` without a scheme gives `X-Api-Key: <key>`.
    Without a header the key is handed to the tool as it is. `validation` checks the key before the account turns
    active, and needs a header to send it in. `origins` are where the key may be sent, as for `OAuthConnection`.
    """

    name: str
    label: str = "API key"
    header: str | None = None
    scheme: str | None = None
    validation: KeyCheck | None = None
    origins: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check_name(self.name)
        what = f"API key connection {self.name!r}"
        object.__setattr__(self, "origins", checked_origins(self.origins, what))
        if not isinstance(self.label, str) or not self.label.strip():
            raise DefinitionError(f"{what} has an empty label; name the key as the person will see it.")
        if self.header is not None and not _TOKEN.fullmatch(self.header):
            raise DefinitionError(f"{what}: header {self.header!r} is not an HTTP header name.")
        if self.scheme is not None:
            if self.header is None:
                raise DefinitionError(f"{what} has a scheme but no header; add header='Authorization'.")
            if not _TOKEN.fullmatch(self.scheme):
                raise DefinitionError(f"{what}: scheme {self.scheme!r} is not an HTTP authentication scheme.")
        if self.validation is not None and self.header is None:
            raise DefinitionError(f"{what} has a validation request but no header to send the key in; add header.")


Connection: TypeAlias = OAuthConnection | ApiKeyConnection


def secret_from_env(name: str, *, environ: Mapping[str, str] | None = None) -> SecretStr:
    """The secret in environment variable `name`; a `ConfigurationError` naming the variable when it is unset or
    empty (never its value)."""
    env = os.environ if environ is None else environ
    value = env.get(name, "")
    if not value.strip():
        state = "is empty" if name in env else "is not set"
        raise ConfigurationError(f"Environment variable {name} {state}; set it to the client secret.")
    return SecretStr(value.strip())


class Connections:
    """The connections a server knows, by name. Iterating gives them in the order given."""

    def __init__(self, connections: Iterable[Connection] = (), *, source: str | None = None) -> None:
        by_name: dict[str, Connection] = {}
        for connection in connections:
            if not isinstance(connection, OAuthConnection | ApiKeyConnection):
                raise DefinitionError(
                    f"Connections takes OAuthConnection and ApiKeyConnection values, not {type(connection).__name__}."
                )
            if connection.name in by_name:
                raise DefinitionError(
                    f"Two connections are named {connection.name!r}; give each connection its own name."
                )
            by_name[connection.name] = connection
        self._by_name = MappingProxyType(by_name)
        self.source = source

    def __getitem__(self, name: str) -> Connection:
        try:
            return self._by_name[name]
        except KeyError:
            known = ", ".join(self._by_name) or "none"
            where = f"[connections.{name}] to {self.source}" if self.source else "it to Connections([...])"
            raise ConfigurationError(
                f"No connection is named {name!r} (configured: {known}). Add {where}, or use one of those names."
            ) from None

    def oauth(self, name: str) -> OAuthConnection:
        """The OAuth connection `name`; a `ConfigurationError` if there is none or it is an API key connection."""
        connection = self[name]
        if not isinstance(connection, OAuthConnection):
            raise ConfigurationError(f"Connection {name!r} is an API key connection, not an OAuth one.")
        return connection

    def api_key(self, name: str) -> ApiKeyConnection:
        """The API key connection `name`; a `ConfigurationError` if there is none or it is an OAuth one."""
        connection = self[name]
        if not isinstance(connection, ApiKeyConnection):
            raise ConfigurationError(f"Connection {name!r} is an OAuth connection, not an API key one.")
        return connection

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Connection]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Connections) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Connections({list(self._by_name.values())!r})"
