"""The resource server's settings, read from `ASKBACK_AUTH_*` environment variables and validated at start-up.

| variable | meaning | default |
| --- | --- | --- |
| `ASKBACK_AUTH_ISSUER` | the authorization server whose tokens `/mcp` accepts (https; http on loopback) | none |
| `ASKBACK_AUTH_AUDIENCE` | the audience a token must name (`aud`): this resource's identifier | `ASKBACK_AUTH_RESOURCE` |
| `ASKBACK_AUTH_PRINCIPAL_CLAIM` | the claim that names the user | `sub` |
| `ASKBACK_AUTH_ALGORITHMS` | comma-separated signing algorithms (never `none`, never HMAC) | `RS256,ES256,PS256,EdDSA` |
| `ASKBACK_AUTH_LEEWAY` | seconds of clock skew allowed on `exp`, `nbf` and `iat` (0 to 300) | `60` |
| `ASKBACK_AUTH_JWKS_MIN_INTERVAL` | seconds at least between two fetches of the issuer's keys | `30` |
| `ASKBACK_AUTH_ACCEPT_JWT_TYP` | also accept access tokens whose `typ` is `JWT` (no `at+jwt` from the provider) | `false` |
| `ASKBACK_AUTH_INTROSPECTION_URL` | RFC 7662 endpoint for opaque tokens | the issuer's, with a client id |
| `ASKBACK_AUTH_CLIENT_ID`, `ASKBACK_AUTH_CLIENT_SECRET` | askback's credentials at the introspection endpoint | none |
| `ASKBACK_AUTH_RESOURCE` | the canonical URL of `/mcp`, named in the resource metadata | `ASKBACK_PUBLIC_URL`'s origin + `/mcp`, else the address served + `/mcp` |
| `ASKBACK_AUTH_SCOPES_SUPPORTED` | comma-separated scopes named in the protected resource metadata | none |
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from askback.errors import ConfigurationError
from askback.identity._discovery import check_issuer
from askback.identity._jwt import DEFAULT_ALGORITHMS, check_algorithms

__all__ = ["IdentitySettings", "check_resource", "given_settings", "load_identity_settings"]


def check_resource(url: str) -> str:
    """`url` when it can name a resource: an absolute http(s) URL without a fragment; `ValueError` otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname or parts.fragment:
        raise ValueError("the resource is the absolute URL of /mcp, such as https://askback.example.com/mcp")
    return url


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


class IdentitySettings(BaseSettings):
    """What the OAuth 2.1 resource server checks (see the module's docstring)."""

    model_config = SettingsConfigDict(env_prefix="ASKBACK_AUTH_", extra="ignore", frozen=True)

    issuer: str | None = None
    audience: str | None = None
    principal_claim: str = Field(default="sub", min_length=1)
    algorithms: Annotated[tuple[str, ...], NoDecode] = DEFAULT_ALGORITHMS
    leeway: float = Field(default=60.0, ge=0, le=300)
    jwks_min_interval: float = Field(default=30.0, ge=0)
    accept_jwt_typ: bool = False
    introspection_url: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    resource: str | None = None
    scopes_supported: Annotated[tuple[str, ...], NoDecode] = ()

    @field_validator("algorithms", "scopes_supported", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        return _split(value)

    @field_validator("algorithms")
    @classmethod
    def _signing_algorithms(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_algorithms(value)

    @field_validator("issuer", "introspection_url")
    @classmethod
    def _issuer_url(cls, value: str | None) -> str | None:
        return check_issuer(value) if value else None

    @field_validator("resource")
    @classmethod
    def _resource_url(cls, value: str | None) -> str | None:
        return check_resource(value) if value else None

    @property
    def expected_audience(self) -> str | None:
        """The audience a token must name: `audience`, else the resource's URL."""
        return self.audience or self.resource


class _GivenSettings(IdentitySettings):
    """The same settings, validated the same way, from the values given only (never the environment)."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def given_settings(**values: object) -> IdentitySettings:
    """Settings from `values` alone, as code gives them (`ResourceServer(...)`); `ConfigurationError` naming the
    argument when one is wrong."""
    try:
        return _GivenSettings(**values)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise configuration_error(exc, prefix="", what="argument") from None


def configuration_error(
    exc: ValidationError, prefix: str = "ASKBACK_AUTH_", what: str = "variable"
) -> ConfigurationError:
    """One `ConfigurationError` naming each variable (or argument) `exc` found wrong, never its value."""
    problems = []
    for err in exc.errors(include_input=False, include_url=False):
        name = "_".join(str(part) for part in err["loc"])
        name = prefix + name.upper() if what == "variable" else name
        problems.append(f"{name}: {err['msg'].removeprefix('Value error, ')}")
    return ConfigurationError("Invalid askback identity configuration. " + "; ".join(problems))


def load_identity_settings(**overrides: object) -> IdentitySettings:
    """Read and validate the settings; a bad value raises `ConfigurationError` naming the variable."""
    try:
        return IdentitySettings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise configuration_error(exc) from None
