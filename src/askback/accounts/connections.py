"""Connections: what askback needs to reach a third-party provider on someone's behalf.

A connection is configuration, not a credential. It says where to send a person to authorize (OAuth 2.0
authorization code, always with PKCE S256) or what to ask them for (an API key), and how to use what comes back.
Each person's tokens or key belong to their account and live in the vault. The one secret here, an OAuth client
secret, comes from an environment variable only and is held as a `SecretStr`: no `repr`, `str` or error message
shows it.

A connection also says where the credential may go: `origins`, the `scheme://host[:port]` of the APIs it is for. A
connected account's `http` client puts the credential only on requests to those origins and refuses every other
request, so a URL a model supplies cannot carry it elsewhere. The presets know their providers' API origins; any
other connection names them (`origins = [...]`), and one that names none has a credential that is sent nowhere.

Three layers, each usable alone:
- the definitions: `OAuthConnection`, `ApiKeyConnection`, the presets (`github`, `google`, `slack`, `microsoft`,
  or `preset(name, ...)`), the `Connections` registry, and `load_connections`, which reads a TOML file
  (`ASKBACK_CONNECTIONS_FILE`);
- request building, with no I/O: `authorization_request`, `token_request`, `refresh_request`, `revocation_request`,
  `api_key_headers`, `key_check_request` describe exactly what would be sent. The hosted pages and the refresher do
  the sending, and tests can read every byte;
- discovery: `discover` and `fetch_metadata` are the only I/O here (one or two GETs with httpx). The URLs to try
  (`metadata_urls`) and the judgement of what came back (`parse_metadata`) are pure.

The OAuth encoding comes from Authlib's pure helpers (`prepare_grant_uri`, `prepare_token_request`,
`prepare_revoke_token_request`, `ClientAuth`, `create_s256_code_challenge`), the same ones its clients call.
`AsyncOAuth2Client` itself is not used to build requests, because constructing one opens an HTTP client and its
methods send.

Errors: a connection written wrongly in Python is a `DefinitionError`. Anything wrong in the file, the environment
or what a provider publishes is a `ConfigurationError` naming the file, the connection and the key or variable to
fix. Neither ever holds a secret.
"""

from __future__ import annotations

import ipaddress
import os
import re
import tomllib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, TypeAlias, TypeVar
from urllib.parse import parse_qsl, quote_plus, urlsplit, urlunsplit

from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.auth import ClientAuth  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749.parameters import (  # type: ignore[import-untyped]
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7009 import prepare_revoke_token_request  # type: ignore[import-untyped]
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, SecretStr, ValidationError

from askback.errors import ConfigurationError, DefinitionError, InvalidParamsError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "PRESETS",
    "ApiKeyConnection",
    "Connection",
    "Connections",
    "FormRequest",
    "KeyCheck",
    "KeyCheckRequest",
    "OAuthConnection",
    "ProviderMetadata",
    "TokenAuthMethod",
    "TokenTypeHint",
    "api_key_headers",
    "authorization_request",
    "discover",
    "discover_all",
    "fetch_metadata",
    "github",
    "google",
    "key_check_request",
    "load_connections",
    "metadata_urls",
    "microsoft",
    "new_code_verifier",
    "new_state",
    "origin",
    "parse_metadata",
    "preset",
    "refresh_request",
    "revocation_request",
    "secret_from_env",
    "slack",
    "token_request",
]

TokenAuthMethod: TypeAlias = Literal["client_secret_basic", "client_secret_post"]
TokenTypeHint: TypeAlias = Literal["access_token", "refresh_token"]

ENV = "ASKBACK_CONNECTIONS_FILE"
# Connection names appear in URLs (callbacks, links) and in the file as table names.
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")
# RFC 7636 §4.1: 43 to 128 unreserved characters.
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")
# RFC 9110 §5.6.2: a header name (and an auth scheme) is a token.
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOOPBACK = {"127.0.0.1", "localhost", "::1"}
# What the authorization request itself sets; `authorize_params` may not replace any of them.
_RESERVED_AUTHORIZE = frozenset(
    {"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"}
)
# Form fields and headers that are secrets: `FormRequest`'s repr shows them as '**********'.
_SECRET_FIELDS = frozenset({"client_secret", "code", "code_verifier", "refresh_token", "token"})
_SECRET_HEADERS = frozenset({"authorization"})
_FORM_HEADERS = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}
_MAX_METADATA_BYTES = 1 << 20
# Seconds for each metadata GET when discovery makes its own client; pass `http=` to choose otherwise.
_DISCOVERY_TIMEOUT = 10.0


# --- definitions ----------------------------------------------------------------------------------------------------


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
        _check_name(self.name)
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
        object.__setattr__(self, "scopes", _scopes(self.scopes, what, self.scope_separator))
        object.__setattr__(self, "authorize_params", _authorize_params(self.authorize_params, what))
        object.__setattr__(self, "origins", _origins(self.origins, what))
        if self.token_auth_method not in ("client_secret_basic", "client_secret_post"):
            raise DefinitionError(
                f"{what}: token_auth_method is {self.token_auth_method!r}; use 'client_secret_basic' or "
                "'client_secret_post'."
            )
        if self.scope_separator not in (" ", ","):
            raise DefinitionError(f"{what}: scope_separator must be ' ' (RFC 6749) or ',' (Slack).")
        for key in ("authorize_url", "token_url", "revocation_url"):
            url = getattr(self, key)
            if url is not None and (problem := _url_problem(url)):
                raise DefinitionError(f"{what}: {key} {problem}.")
        if self.issuer is not None and (problem := _url_problem(self.issuer, issuer=True)):
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
        if problem := _url_problem(self.url):
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
        _check_name(self.name)
        what = f"API key connection {self.name!r}"
        object.__setattr__(self, "origins", _origins(self.origins, what))
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


# --- presets --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Preset:
    authorize_url: str
    token_url: str
    revocation_url: str | None
    scopes: tuple[str, ...]
    token_auth_method: TokenAuthMethod
    origins: tuple[str, ...]
    authorize_params: Mapping[str, str] = field(default_factory=dict)
    issuer: str | None = None
    scope_separator: str = " "


# Each provider's documented endpoints. None of GitHub, Slack or Microsoft offers an RFC 7009 revocation endpoint
# (GitHub's is `DELETE /applications/{client_id}/token`, Slack's is `auth.revoke`; both take other requests).
_GITHUB = _Preset(
    # https://docs.github.com/en/apps/oauth-apps/building-oauth-apps/authorizing-oauth-apps (PKCE: S256 only)
    authorize_url="https://github.com/login/oauth/authorize",
    token_url="https://github.com/login/oauth/access_token",
    revocation_url=None,
    scopes=("read:user",),
    token_auth_method="client_secret_post",
    # The REST and GraphQL APIs, and release asset uploads.
    origins=("https://api.github.com", "https://uploads.github.com"),
)
_GOOGLE = _Preset(
    # https://developers.google.com/identity/protocols/oauth2/web-server
    authorize_url="https://accounts.google.com/o/oauth2/v2/auth",
    token_url="https://oauth2.googleapis.com/token",
    revocation_url="https://oauth2.googleapis.com/revoke",
    scopes=("openid", "email"),
    token_auth_method="client_secret_post",
    # Google's APIs each have a host of their own under googleapis.com; more can be added with `origins`.
    origins=(
        "https://www.googleapis.com",
        "https://gmail.googleapis.com",
        "https://people.googleapis.com",
        "https://openidconnect.googleapis.com",
        "https://sheets.googleapis.com",
        "https://docs.googleapis.com",
        "https://slides.googleapis.com",
        "https://tasks.googleapis.com",
        "https://youtube.googleapis.com",
    ),
    # A refresh token is issued only for offline access, and again only when consent is shown again.
    authorize_params={"access_type": "offline", "prompt": "consent"},
    issuer="https://accounts.google.com",
)
_SLACK = _Preset(
    # https://docs.slack.dev/authentication/installing-with-oauth and the oauth.v2.access method, which takes
    # `code_verifier` and asks for the client credentials in HTTP Basic rather than in the form.
    authorize_url="https://slack.com/oauth/v2/authorize",
    token_url="https://slack.com/api/oauth.v2.access",
    revocation_url=None,
    scopes=("channels:read", "chat:write"),
    token_auth_method="client_secret_basic",
    # The Web API, and `url_private` file downloads, which take the token as a bearer too.
    origins=("https://slack.com", "https://files.slack.com"),
    scope_separator=",",
)
_MICROSOFT_ALIASES = frozenset({"common", "organizations", "consumers"})
_TENANT = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,255}")
_GUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")


def _microsoft_preset(tenant: str) -> _Preset:
    # https://learn.microsoft.com/entra/identity-platform/v2-oauth2-auth-code-flow
    if not _TENANT.fullmatch(tenant):
        raise DefinitionError(
            f"Microsoft tenant {tenant!r} is not a tenant: use 'common', 'organizations', 'consumers', a tenant id "
            "(GUID) or a domain such as 'contoso.onmicrosoft.com'."
        )
    base = f"https://login.microsoftonline.com/{tenant}"
    return _Preset(
        authorize_url=f"{base}/oauth2/v2.0/authorize",
        token_url=f"{base}/oauth2/v2.0/token",
        revocation_url=None,
        # offline_access is what makes the token endpoint return a refresh token.
        scopes=("offline_access", "User.Read"),
        token_auth_method="client_secret_post",
        origins=("https://graph.microsoft.com",),
        # Only a tenant id has a fixed issuer; the aliases' metadata carries a `{tenantid}` template instead.
        issuer=f"{base}/v2.0" if _GUID.fullmatch(tenant) else None,
    )


PRESETS: tuple[str, ...] = ("github", "google", "microsoft", "slack")


def preset(
    provider: str,
    /,
    *,
    client_id: str,
    client_secret: SecretStr | str,
    name: str | None = None,
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    tenant: str | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """The connection for a known provider (one of `PRESETS`), named after it unless `name` is given.

    `scopes` replace the preset's defaults; `authorize_params` are merged over the preset's; `origins` are added to
    the preset's (its provider's own API origins). `tenant` is Microsoft's (default `common`) and refused for the
    others.
    """
    if provider not in PRESETS:
        raise DefinitionError(f"No preset named {provider!r}; the presets are {', '.join(PRESETS)}.")
    if tenant is not None and provider != "microsoft":
        raise DefinitionError(f"The {provider} preset takes no tenant; only microsoft does.")
    if provider == "microsoft":
        spec = _microsoft_preset("common" if tenant is None else tenant)
    else:
        spec = {"github": _GITHUB, "google": _GOOGLE, "slack": _SLACK}[provider]
    return OAuthConnection(
        name=provider if name is None else name,
        client_id=client_id,
        client_secret=client_secret if isinstance(client_secret, SecretStr) else SecretStr(client_secret),
        authorize_url=spec.authorize_url,
        token_url=spec.token_url,
        revocation_url=spec.revocation_url,
        scopes=spec.scopes if scopes is None else _scopes(scopes, f"{provider} preset", spec.scope_separator),
        authorize_params={**spec.authorize_params, **(authorize_params or {})},
        token_auth_method=spec.token_auth_method,
        issuer=spec.issuer,
        scope_separator=spec.scope_separator,
        origins=(*spec.origins, *_origins(() if origins is None else origins, f"{provider} preset")),
    )


def github(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "github",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """GitHub (OAuth app or GitHub App user authorization); default scope `read:user`; the token goes to
    `https://api.github.com` and `https://uploads.github.com`."""
    return preset(
        "github",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def google(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "google",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Google; default scopes `openid email`, with `access_type=offline` and `prompt=consent` for a refresh token;
    the token goes to Google's API hosts (`https://www.googleapis.com`, `https://gmail.googleapis.com`, ...: see
    `docs/connections.md`)."""
    return preset(
        "google",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def slack(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    name: str = "slack",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Slack (OAuth v2); default bot scopes `channels:read,chat:write`. User scopes go in
    `authorize_params={"user_scope": "..."}`; Slack then returns the user token under `authed_user`. The token goes
    to `https://slack.com` and `https://files.slack.com`."""
    return preset(
        "slack",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        origins=origins,
    )


def microsoft(
    client_id: str,
    client_secret: SecretStr | str,
    *,
    tenant: str = "common",
    name: str = "microsoft",
    scopes: Sequence[str] | None = None,
    authorize_params: Mapping[str, str] | None = None,
    origins: Sequence[str] | None = None,
) -> OAuthConnection:
    """Microsoft identity platform (v2.0 endpoints) for `tenant`; default scopes `offline_access User.Read`; the
    token goes to `https://graph.microsoft.com`."""
    return preset(
        "microsoft",
        client_id=client_id,
        client_secret=client_secret,
        name=name,
        scopes=scopes,
        authorize_params=authorize_params,
        tenant=tenant,
        origins=origins,
    )


# --- the registry ---------------------------------------------------------------------------------------------------


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


# --- request building (no I/O) --------------------------------------------------------------------------------------


class FormRequest(NamedTuple):
    """A form POST, exactly as it would be sent: `url, headers, form = token_request(...)`.

    Its `repr` masks the client secret, the code, the verifier and tokens, so it can be logged or shown in a
    failing test; the values themselves are what goes on the wire.
    """

    url: str
    headers: dict[str, str]
    form: dict[str, str]

    def __repr__(self) -> str:
        headers = {k: "**********" if k.lower() in _SECRET_HEADERS else v for k, v in self.headers.items()}
        form = {k: "**********" if k in _SECRET_FIELDS else v for k, v in self.form.items()}
        return f"FormRequest(url={self.url!r}, headers={headers!r}, form={form!r})"


class KeyCheckRequest(NamedTuple):
    """The request that checks an API key: `method, url, headers`; its `repr` masks the key."""

    method: str
    url: str
    headers: dict[str, str]

    def __repr__(self) -> str:
        return f"KeyCheckRequest(method={self.method!r}, url={self.url!r}, headers={{...}})"


def new_code_verifier() -> str:
    """A fresh PKCE code verifier (64 random letters and digits; RFC 7636 asks for 43 to 128)."""
    return str(generate_token(64))


def new_state() -> str:
    """A fresh `state` value for one authorization request."""
    return str(generate_token(32))


def authorization_request(connection: OAuthConnection, *, redirect_uri: str, state: str, code_verifier: str) -> str:
    """The URL to send the person to: `response_type=code`, `client_id`, `redirect_uri`, `scope`, `state`,
    `code_challenge` (base64url of the verifier's SHA-256) and `code_challenge_method=S256`, then the connection's
    `authorize_params`."""
    authorize_url, _ = _endpoints(connection)
    _check_redirect_uri(redirect_uri)
    if not state:
        raise ValueError("state is empty; make one with new_state() and keep it to compare on the callback.")
    _check_verifier(code_verifier)
    url = prepare_grant_uri(
        authorize_url,
        client_id=connection.client_id,
        response_type="code",
        redirect_uri=redirect_uri,
        scope=connection.scope_separator.join(connection.scopes) or None,
        state=state,
        code_challenge=create_s256_code_challenge(code_verifier),
        code_challenge_method="S256",
        **connection.authorize_params,
    )
    return str(url)


def token_request(connection: OAuthConnection, *, code: str, redirect_uri: str, code_verifier: str) -> FormRequest:
    """The token request that exchanges `code` (RFC 6749 §4.1.3, with the PKCE verifier), client authentication
    as the connection's `token_auth_method` says."""
    _, token_url = _endpoints(connection)
    if not code:
        raise ValueError("code is empty; pass the `code` the provider returned to the redirect URI.")
    _check_redirect_uri(redirect_uri)
    _check_verifier(code_verifier)
    body = prepare_token_request(
        "authorization_code", code=code, redirect_uri=redirect_uri, code_verifier=code_verifier
    )
    return _authenticated(connection, token_url, str(body), dict(_FORM_HEADERS))


def refresh_request(connection: OAuthConnection, refresh_token: str) -> FormRequest:
    """The token request that trades `refresh_token` for a new access token (RFC 6749 §6). No `scope` is sent, so
    the grant keeps what was consented to."""
    _, token_url = _endpoints(connection)
    if not refresh_token:
        raise ValueError("refresh_token is empty.")
    body = prepare_token_request("refresh_token", refresh_token=refresh_token)
    return _authenticated(connection, token_url, str(body), dict(_FORM_HEADERS))


def revocation_request(
    connection: OAuthConnection, token: str, token_type_hint: TokenTypeHint | None = None
) -> FormRequest:
    """The RFC 7009 revocation request for `token`, authenticated as at the token endpoint (RFC 7009 §2.1)."""
    if connection.revocation_url is None:
        raise ConfigurationError(
            f"Connection {connection.name!r} has no revocation_url: its provider offers no RFC 7009 revocation "
            "endpoint askback knows of. Set revocation_url if it has one; otherwise revoke the grant at the provider."
        )
    if not token:
        raise ValueError("token is empty.")
    if token_type_hint not in (None, "access_token", "refresh_token"):
        raise ValueError("token_type_hint is 'access_token', 'refresh_token' or None.")
    body, _ = prepare_revoke_token_request(token, token_type_hint)
    return _authenticated(connection, connection.revocation_url, str(body), dict(_FORM_HEADERS))


def api_key_headers(connection: ApiKeyConnection, key: SecretStr | str) -> dict[str, str]:
    """The header that carries `key` (`{"Authorization": "Bearer <key>"}`, `{"X-Api-Key": "<key>"}` ...)."""
    if connection.header is None:
        raise ConfigurationError(
            f"Connection {connection.name!r} names no header for its key, so askback cannot place it; set header "
            "(and scheme) on the connection, or let the tool use the key as it is."
        )
    value = _api_key_value(key)
    return {connection.header: f"{connection.scheme} {value}" if connection.scheme else value}


def key_check_request(connection: ApiKeyConnection, key: SecretStr | str) -> KeyCheckRequest:
    """The request that checks `key` before the account turns active; it passes when the provider answers with
    `connection.validation.expected_status`."""
    if connection.validation is None:
        raise ConfigurationError(f"Connection {connection.name!r} has no validation request.")
    headers = {"Accept": "application/json", **api_key_headers(connection, key)}
    return KeyCheckRequest("GET", connection.validation.url, headers)


def _authenticated(connection: OAuthConnection, url: str, body: str, headers: dict[str, str]) -> FormRequest:
    if connection.token_auth_method == "client_secret_basic":
        # RFC 6749 §2.3.1: id and secret are form-urlencoded before base64, which Authlib leaves to the caller.
        client_id = quote_plus(connection.client_id, safe="")
        client_secret = quote_plus(connection.client_secret.get_secret_value(), safe="")
    else:
        client_id, client_secret = connection.client_id, connection.client_secret.get_secret_value()
    auth = ClientAuth(client_id, client_secret, connection.token_auth_method)
    url, headers, body = auth.prepare("POST", url, headers, body)
    return FormRequest(str(url), dict(headers), dict(parse_qsl(str(body), keep_blank_values=True)))


def _endpoints(connection: OAuthConnection) -> tuple[str, str]:
    if connection.authorize_url is None or connection.token_url is None:
        raise ConfigurationError(
            f"Connection {connection.name!r} has no endpoints yet: discover them from its issuer first "
            "(`await discover(connection)`), or set authorize_url and token_url."
        )
    return connection.authorize_url, connection.token_url


def _check_redirect_uri(redirect_uri: str) -> None:
    if problem := _url_problem(redirect_uri):
        raise ValueError(f"redirect_uri {problem}.")


def _check_verifier(code_verifier: str) -> None:
    if not _VERIFIER.fullmatch(code_verifier):
        raise ValueError(
            "code_verifier must be 43 to 128 letters, digits, '-', '.', '_' or '~' (RFC 7636 §4.1); make one with "
            "new_code_verifier()."
        )


def _api_key_value(key: SecretStr | str) -> str:
    value = (key.get_secret_value() if isinstance(key, SecretStr) else key).strip()
    if not value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise InvalidParamsError(
            "The API key is empty or holds a line break or another control character; paste the key alone."
        )
    return value


# --- discovery ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ProviderMetadata:
    """What an authorization server publishes about itself (RFC 8414 / OpenID Connect Discovery), as far as
    askback uses it. `None` means the document left the entry out."""

    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    revocation_endpoint: str | None = None
    userinfo_endpoint: str | None = None
    code_challenge_methods_supported: tuple[str, ...] | None = None
    token_endpoint_auth_methods_supported: tuple[str, ...] | None = None
    scopes_supported: tuple[str, ...] | None = None
    source: str = ""


def metadata_urls(issuer: str) -> tuple[str, ...]:
    """Where to look, in order: OpenID Connect Discovery's `{issuer}/.well-known/openid-configuration`, then RFC
    8414's `/.well-known/oauth-authorization-server` inserted before the issuer's path (RFC 8414 §3.1)."""
    if problem := _url_problem(issuer, issuer=True):
        raise ConfigurationError(f"The issuer {problem}.")
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    openid = urlunsplit((parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", ""))
    rfc8414 = urlunsplit((parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", ""))
    return (openid,) if openid == rfc8414 else (openid, rfc8414)


def parse_metadata(issuer: str, document: object, *, source: str) -> ProviderMetadata:
    """Judge a metadata document fetched from `source` for `issuer`: it must be a JSON object whose `issuer` is
    identical to the configured one (RFC 8414 §3.3) and which names the authorization and token endpoints."""
    here = f"The metadata at {source}"
    if not isinstance(document, dict):
        raise ConfigurationError(f"{here} is not a JSON object.")
    published = document.get("issuer")
    if published != issuer:
        shown = repr(published) if isinstance(published, str) else "no issuer"
        raise ConfigurationError(
            f"{here} names {shown} as its issuer, but the connection's issuer is {issuer!r}; RFC 8414 §3.3 requires "
            "them to be identical, so the document is refused. Set the connection's issuer to exactly the one the "
            "provider publishes (a trailing '/' counts), if you trust it."
        )
    endpoints: dict[str, str] = {}
    for key in ("authorization_endpoint", "token_endpoint"):
        value = document.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigurationError(
                f"{here} has no {key}; askback needs it for the authorization code flow. Set authorize_url and "
                "token_url on the connection instead of discovering them."
            )
        if problem := _url_problem(value):
            raise ConfigurationError(f"{here}: {key} {problem}.")
        endpoints[key] = value
    revocation = document.get("revocation_endpoint")
    if revocation is not None and (not isinstance(revocation, str) or _url_problem(revocation)):
        raise ConfigurationError(f"{here}: revocation_endpoint is not an https URL.")
    userinfo = document.get("userinfo_endpoint")
    if userinfo is not None and (not isinstance(userinfo, str) or _url_problem(userinfo)):
        raise ConfigurationError(f"{here}: userinfo_endpoint is not an https URL.")
    return ProviderMetadata(
        issuer=issuer,
        authorization_endpoint=endpoints["authorization_endpoint"],
        token_endpoint=endpoints["token_endpoint"],
        revocation_endpoint=revocation,
        userinfo_endpoint=userinfo,
        code_challenge_methods_supported=_string_list(document, "code_challenge_methods_supported", here),
        token_endpoint_auth_methods_supported=_string_list(document, "token_endpoint_auth_methods_supported", here),
        scopes_supported=_string_list(document, "scopes_supported", here),
        source=source,
    )


async def fetch_metadata(issuer: str, *, http: httpx.AsyncClient | None = None) -> ProviderMetadata:
    """Fetch and judge the issuer's metadata, trying each of `metadata_urls(issuer)` until one answers 200 with
    JSON. A document that answers but is wrong (another issuer, no token endpoint) is refused at once, not skipped."""
    import httpx

    urls = metadata_urls(issuer)
    tried: list[str] = []
    client = httpx.AsyncClient(timeout=_DISCOVERY_TIMEOUT, follow_redirects=False) if http is None else http
    try:
        for url in urls:
            try:
                response = await client.get(url, headers={"Accept": "application/json"})
            except httpx.HTTPError as exc:
                tried.append(f"GET {url}: {type(exc).__name__} ({exc})")
                continue
            if response.status_code != 200:
                tried.append(f"GET {url}: HTTP {response.status_code}")
                continue
            if len(response.content) > _MAX_METADATA_BYTES:
                tried.append(f"GET {url}: a body over {_MAX_METADATA_BYTES} bytes")
                continue
            try:
                document = response.json()
            except ValueError:
                tried.append(f"GET {url}: HTTP 200 but not JSON")
                continue
            return parse_metadata(issuer, document, source=url)
    finally:
        if http is None:
            await client.aclose()
    raise ConfigurationError(
        f"No authorization server metadata for issuer {issuer!r}: " + "; ".join(tried) + ". Check the issuer (it "
        "must be exactly the provider's), or set authorize_url and token_url on the connection instead."
    )


async def discover(connection: OAuthConnection, *, http: httpx.AsyncClient | None = None) -> OAuthConnection:
    """The connection with the endpoints it lacks filled in from its issuer's metadata (those it sets win), and the
    origin of the provider's OpenID Connect `userinfo_endpoint` (where its access tokens are meant to go) added to its
    `origins`. Refused when the provider says it does not do PKCE S256, or not the connection's client
    authentication."""
    if connection.issuer is None:
        raise ConfigurationError(f"Connection {connection.name!r} has no issuer to discover endpoints from.")
    meta = await fetch_metadata(connection.issuer, http=http)
    methods = meta.code_challenge_methods_supported
    if methods is not None and "S256" not in methods:
        raise ConfigurationError(
            f"Connection {connection.name!r}: the provider's metadata ({meta.source}) lists code challenge methods "
            f"{list(methods)} without S256, and askback always uses PKCE S256."
        )
    auth_methods = meta.token_endpoint_auth_methods_supported
    if auth_methods is not None and connection.token_auth_method not in auth_methods:
        raise ConfigurationError(
            f"Connection {connection.name!r} authenticates with {connection.token_auth_method}, but the provider "
            f"({meta.source}) supports {list(auth_methods)}; set token_auth_method to one of those."
        )
    return replace(
        connection,
        authorize_url=connection.authorize_url or meta.authorization_endpoint,
        token_url=connection.token_url or meta.token_endpoint,
        revocation_url=connection.revocation_url or meta.revocation_endpoint,
        origins=(*connection.origins, *(() if meta.userinfo_endpoint is None else (origin(meta.userinfo_endpoint),))),
    )


async def discover_all(connections: Connections, *, http: httpx.AsyncClient | None = None) -> Connections:
    """`connections` with every OAuth connection that still `needs_discovery` discovered (one at a time)."""
    done: list[Connection] = []
    for connection in connections:
        if isinstance(connection, OAuthConnection) and connection.needs_discovery:
            connection = await discover(connection, http=http)
        done.append(connection)
    return Connections(done, source=connections.source)


# --- the TOML file --------------------------------------------------------------------------------------------------


class _OAuthEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal["oauth"] = "oauth"
    preset: str | None = None
    client_id: str
    client_secret_env: str
    scopes: list[str] | None = None
    authorize_params: dict[str, str] | None = None
    tenant: str | None = None
    authorize_url: str | None = None
    token_url: str | None = None
    revocation_url: str | None = None
    issuer: str | None = None
    token_auth_method: TokenAuthMethod | None = None
    scope_separator: str | None = None
    origins: list[str] | None = None


class _ApiKeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: Literal["api_key"]
    label: str = "API key"
    header: str | None = None
    scheme: str | None = None
    validation_url: str | None = None
    validation_status: int | None = None
    origins: list[str] | None = None


_Entry = TypeVar("_Entry", _OAuthEntry, _ApiKeyEntry)
# Keys a preset decides itself; writing them next to `preset` is refused rather than silently ignored.
_PRESET_FIXED = ("authorize_url", "token_url", "revocation_url", "issuer", "token_auth_method", "scope_separator")
# Keys that would put a person's credential in the file; an API key is entered on the hosted page.
_CREDENTIAL_KEYS = ("key", "api_key", "secret", "token", "password", "client_secret")


def load_connections(path: str | os.PathLike[str], *, environ: Mapping[str, str] | None = None) -> Connections:
    """The connections in the TOML file at `path` (`[connections.NAME]` tables), each client secret read from the
    environment variable its `client_secret_env` names (`environ`, default `os.environ`).

    Everything wrong is one `ConfigurationError` naming the file, the connection and what to change; no message
    holds a secret value.
    """
    file = Path(path)
    try:
        with file.open("rb") as handle:
            data = tomllib.load(handle)
    except FileNotFoundError:
        raise ConfigurationError(f"No connections file at {file}; create it, or point {ENV} at it.") from None
    except (IsADirectoryError, PermissionError) as exc:
        raise ConfigurationError(f"Cannot read the connections file {file}: {exc.strerror}.") from None
    except tomllib.TOMLDecodeError as exc:
        hint = " (each connection may be defined once)" if "twice" in str(exc) else ""
        raise ConfigurationError(f"The connections file {file} is not valid TOML{hint}: {exc}.") from None
    except UnicodeDecodeError:
        raise ConfigurationError(f"The connections file {file} is not UTF-8 text.") from None
    others = sorted(set(data) - {"connections"})
    if others:
        raise ConfigurationError(
            f"{file}: unknown top-level key(s) {', '.join(map(repr, others))}; the file holds [connections.NAME] "
            "tables only."
        )
    tables = data.get("connections", {})
    if not isinstance(tables, dict):
        raise ConfigurationError(f"{file}: 'connections' must be tables, written [connections.NAME].")
    env = os.environ if environ is None else environ
    built: list[Connection] = []
    for name, table in tables.items():
        where = f"{file}: [connections.{name}]"
        if not isinstance(table, dict):
            raise ConfigurationError(f"{where} must be a table of keys, not a single value.")
        if not _NAME.fullmatch(name):
            raise ConfigurationError(f"{where}: {_NAME_RULE}")
        try:
            built.append(_entry(name, table, env, where))
        except DefinitionError as exc:
            raise ConfigurationError(f"{where}: {exc}") from None
    return Connections(built, source=str(file))


def _entry(name: str, table: dict[str, Any], env: Mapping[str, str], where: str) -> Connection:
    kind = table.get("kind", "oauth")
    if kind not in ("oauth", "api_key"):
        raise ConfigurationError(f"{where}: kind must be 'oauth' (the default) or 'api_key'.")
    if kind == "api_key":
        for key in _CREDENTIAL_KEYS:
            if key in table:
                raise ConfigurationError(
                    f"{where}: remove {key!r}; each person enters their own key on the hosted page, and the file "
                    "holds none."
                )
        api = _validate(_ApiKeyEntry, table, where)
        if api.validation_status is not None and api.validation_url is None:
            raise ConfigurationError(f"{where}: validation_status needs a validation_url.")
        check = (
            KeyCheck(url=api.validation_url, expected_status=api.validation_status or 200)
            if api.validation_url is not None
            else None
        )
        return ApiKeyConnection(
            name=name,
            label=api.label,
            header=api.header,
            scheme=api.scheme,
            validation=check,
            origins=tuple(api.origins or ()),
        )
    if "client_secret" in table:
        raise ConfigurationError(
            f"{where}: a client_secret is written in the file, which is refused: secrets come from the environment. "
            "Remove it, put the secret in an environment variable, and name that variable with client_secret_env."
        )
    entry = _validate(_OAuthEntry, table, where)
    if not _ENV_NAME.fullmatch(entry.client_secret_env):
        raise ConfigurationError(f"{where}: client_secret_env must be an environment variable name, such as X_SECRET.")
    try:
        secret = secret_from_env(entry.client_secret_env, environ=env)
    except ConfigurationError as exc:
        raise ConfigurationError(f"{where}: {exc} (named by client_secret_env)") from None
    if entry.preset is not None:
        if entry.preset not in PRESETS:
            raise ConfigurationError(
                f"{where}: no preset named {entry.preset!r}; the presets are {', '.join(PRESETS)}."
            )
        fixed = [key for key in _PRESET_FIXED if getattr(entry, key) is not None]
        if fixed:
            raise ConfigurationError(
                f"{where}: the {entry.preset} preset sets {', '.join(fixed)} itself; remove them, or remove preset to "
                "describe the provider yourself."
            )
        if entry.tenant is not None and entry.preset != "microsoft":
            raise ConfigurationError(f"{where}: tenant is for the microsoft preset only.")
        return preset(
            entry.preset,
            client_id=entry.client_id,
            client_secret=secret,
            name=name,
            scopes=entry.scopes,
            authorize_params=entry.authorize_params,
            tenant=entry.tenant,
            origins=entry.origins,
        )
    if entry.tenant is not None:
        raise ConfigurationError(f"{where}: tenant is for the microsoft preset only.")
    return OAuthConnection(
        name=name,
        client_id=entry.client_id,
        client_secret=secret,
        authorize_url=entry.authorize_url,
        token_url=entry.token_url,
        revocation_url=entry.revocation_url,
        scopes=tuple(entry.scopes or ()),
        authorize_params=entry.authorize_params or {},
        token_auth_method=entry.token_auth_method or "client_secret_basic",
        issuer=entry.issuer,
        scope_separator=entry.scope_separator or " ",
        origins=tuple(entry.origins or ()),
    )


def _validate(model: type[_Entry], table: dict[str, Any], where: str) -> _Entry:
    try:
        return model.model_validate(table)
    except ValidationError as exc:
        fields = model.model_fields
        problems = []
        for err in exc.errors(include_input=False, include_url=False):
            key = ".".join(str(part) for part in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"unknown key {key!r} (the keys are: {', '.join(fields)})")
            elif err["type"] == "missing":
                problems.append(f"{key!r} is required")
            else:
                problems.append(f"{key}: {err['msg']}")
        raise ConfigurationError(f"{where}: " + "; ".join(problems) + ".") from None


# --- checks shared by the definitions -------------------------------------------------------------------------------

_NAME_RULE = "a connection name is 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit."


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise DefinitionError(f"Connection name {name!r} is not valid: {_NAME_RULE}")


def _url_problem(url: object, *, issuer: bool = False) -> str | None:
    """Why `url` cannot be an endpoint (https, or http on loopback; no fragment; an issuer has no query either)."""
    if not isinstance(url, str) or not url or any(c.isspace() for c in url):
        return "is not a URL"
    parts = urlsplit(url)
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK:
        return f"{url!r} must use https (plain http is accepted on loopback only)"
    if parts.scheme not in ("https", "http") or not parts.hostname:
        return f"{url!r} is not an absolute https URL"
    if parts.fragment:
        return f"{url!r} must not have a fragment"
    if issuer and parts.query:
        return f"{url!r} must not have a query (RFC 8414 §2)"
    return None


_DEFAULT_PORTS = {"http": 80, "https": 443}
# A host as it is compared: an ASCII DNS name (IDNA hosts in their punycode form) or an IP address.
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?")


def origin(url: str | httpx.URL) -> str:
    """The origin of `url` as askback compares origins: `scheme://host[:port]` with the scheme and host in lowercase,
    an IDNA host in its ASCII (punycode) form, an IPv6 address in brackets, and the scheme's default port left out.
    `ValueError` when `url` has no scheme and host."""
    scheme, host, port = _origin_parts(url)
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == _DEFAULT_PORTS.get(scheme) else f"{scheme}://{shown}:{port}"


def _origin_parts(url: str | httpx.URL) -> tuple[str, str, int | None]:
    import httpx

    try:
        parsed = url if isinstance(url, httpx.URL) else httpx.URL(url)
        scheme = parsed.scheme.lower()
        host = parsed.raw_host.decode("ascii").lower()
        port = parsed.port
    except (httpx.InvalidURL, UnicodeError, TypeError) as exc:
        raise ValueError(f"{str(url)!r} is not a URL ({exc})") from None
    if not scheme or not host:
        raise ValueError(f"{str(url)!r} has no scheme and host")
    return scheme, host, _DEFAULT_PORTS.get(scheme) if port is None else port


def _origin_problem(value: object) -> str | None:
    """Why `value` cannot be an origin a credential goes to: `https://host[:port]` (plain http on loopback only),
    nothing after the host but an optional `/`."""
    example = "is not an origin such as 'https://api.example.com'"
    if not isinstance(value, str) or "://" not in value or any(c.isspace() for c in value):
        return f"{value!r} {example}"
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None:
        return f"{value!r} has a user name or password; write scheme://host[:port] only"
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
        return f"{value!r} has a path, query or fragment; write scheme://host[:port] only"
    try:
        scheme, host, port = _origin_parts(value)
    except ValueError:
        return f"{value!r} {example}"
    if scheme not in ("https", "http"):
        return f"{value!r} is not an https origin"
    if scheme == "http" and host not in _LOOPBACK:
        return f"{value!r} must use https (plain http is accepted on loopback only)"
    if not _HOST.fullmatch(host) and not _is_ip(host):
        return f"{value!r} does not name one host (no wildcards: list each host)"
    if port is None or not 0 < port < 65536:
        return f"{value!r} has a port outside 1 to 65535"
    return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _origins(origins: object, what: str) -> tuple[str, ...]:
    if isinstance(origins, str):
        raise DefinitionError(f"{what}: origins is a single string; give a list, such as [{origins!r}].")
    if not isinstance(origins, Iterable):
        raise DefinitionError(f"{what}: origins must be a list of origins, such as ['https://api.example.com'].")
    result: list[str] = []
    for value in origins:
        if problem := _origin_problem(value):
            raise DefinitionError(f"{what}: origin {problem}.")
        normalised = origin(value)
        if normalised not in result:
            result.append(normalised)
    return tuple(result)


def _scopes(scopes: object, what: str, separator: str) -> tuple[str, ...]:
    if isinstance(scopes, str):
        raise DefinitionError(f"{what}: scopes is a single string; give a list, such as [{scopes!r}].")
    if not isinstance(scopes, Iterable):
        raise DefinitionError(f"{what}: scopes must be a list of strings.")
    result = tuple(scopes)
    for scope in result:
        if not isinstance(scope, str) or not _SCOPE.fullmatch(scope) or separator in scope:
            raise DefinitionError(f"{what}: scope {scope!r} is not a scope token (no spaces, quotes or backslashes).")
    return result


def _authorize_params(params: object, what: str) -> Mapping[str, str]:
    if not isinstance(params, Mapping):
        raise DefinitionError(f"{what}: authorize_params must be a mapping of strings to strings.")
    copied: dict[str, str] = {}
    for key, value in params.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise DefinitionError(f"{what}: authorize_params must map strings to strings.")
        if key in _RESERVED_AUTHORIZE:
            raise DefinitionError(
                f"{what}: authorize_params may not set {key!r}; the authorization request sets it itself."
            )
        copied[key] = value
    return MappingProxyType(copied)


def _string_list(document: dict[str, Any], key: str, here: str) -> tuple[str, ...] | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(f"{here}: {key} is not a list of strings.")
    return tuple(value)
