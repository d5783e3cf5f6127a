"""The TOML file (`ASKBACK_CONNECTIONS_FILE`): `load_connections` reads it into `Connections`. Anything wrong in it
or in the environment it names is a `ConfigurationError` naming the file, the connection and the key or
variable to fix, never a secret."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from askback.accounts.connections._checks import CONNECTION_NAME, CONNECTION_NAME_RULE
from askback.accounts.connections._definitions import (
    ApiKeyConnection,
    Connection,
    Connections,
    KeyCheck,
    OAuthConnection,
    TokenAuthMethod,
    secret_from_env,
)
from askback.accounts.connections._presets import PRESETS, preset
from askback.errors import ConfigurationError, DefinitionError

ENV = "ASKBACK_CONNECTIONS_FILE"


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
        if not CONNECTION_NAME.fullmatch(name):
            raise ConfigurationError(f"{where}: {CONNECTION_NAME_RULE}")
        try:
            built.append(_entry(name, table, env, where))
        except DefinitionError as exc:
            raise ConfigurationError(f"{where}: {exc.message}") from None
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
