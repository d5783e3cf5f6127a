"""Where webhooks go: the endpoints, read from the TOML file `ASKBACK_WEBHOOKS` names or made in Python, and which
events each one is sent. Plain data, no I/O but reading the file and the environment.

```toml
[[endpoint]]
url = "https://hooks.example.com/askback"
events = ["account.*", "audit.rejected"]
secret_env = "HOOKS_SECRET"          # "whsec_...", or several comma-separated while rotating
```

An endpoint is sent the events it names: exact names (`account.connected`) or a whole family (`account.*`). The
audit family is opt-in: only an endpoint that names `audit.*` or an `audit.<kind>` is sent audit events. Every
value is checked when the endpoint is made, and a wrong one is a `ConfigurationError` naming the field (never a
secret's value).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_args
from urllib.parse import urlsplit

from askback.audit.event import EventKind
from askback.core.questions import is_loopback
from askback.errors import ConfigurationError

__all__ = ["ACCOUNT_EVENTS", "AUDIT_EVENTS", "Endpoint", "load_endpoints", "matches"]

ACCOUNT_EVENTS = tuple(
    f"account.{kind}" for kind in ("connected", "refreshed", "expired", "error", "recovered", "revoked")
)
AUDIT_EVENTS = tuple(f"audit.{kind}" for kind in get_args(EventKind))
_FAMILIES = {"account": ACCOUNT_EVENTS, "audit": AUDIT_EVENTS}
# Standard Webhooks: a secret is 24 to 64 random bytes, base64 after the `whsec_` prefix.
_PREFIX = "whsec_"
_MIN_SECRET, _MAX_SECRET = 24, 64


def matches(patterns: Sequence[str], event_type: str) -> bool:
    """Whether `event_type` is one of `patterns` (exact names, or `family.*`)."""
    return any(event_type == p or (p.endswith(".*") and event_type.startswith(p[:-1])) for p in patterns)


@dataclass(frozen=True)
class Endpoint:
    """One receiver: its `url` (https; plain http only on loopback), the `events` it is sent (exact names or
    `family.*`), and its `secrets` (`whsec_<base64>`: each signs every delivery, so that a receiver can move to a
    new one before the old one is removed). `secret_env` names where the secrets came from, for listings."""

    url: str
    events: Sequence[str]
    secrets: Sequence[str] = field(repr=False)
    secret_env: str | None = None

    def __post_init__(self) -> None:
        where = f"the webhook endpoint {self.url!r}"
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "secrets", tuple(s.strip() for s in self.secrets if s.strip()))
        _check_url(self.url, where)
        _check_events(self.events, where)
        _check_secrets(self.secrets, where, self.secret_env)

    @property
    def key(self) -> str:
        """A short stable name of this endpoint (a digest of its URL), in the deliveries and the `webhook-id`."""
        return hashlib.sha256(self.url.encode()).hexdigest()[:16]

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The secrets' key bytes, in the order given."""
        return tuple(base64.b64decode(s[len(_PREFIX) :]) for s in self.secrets)

    @property
    def wants_account_events(self) -> bool:
        return any(matches(self.events, name) for name in ACCOUNT_EVENTS)

    @property
    def wants_audit_events(self) -> bool:
        return any(matches(self.events, name) for name in AUDIT_EVENTS)

    def wants(self, event_type: str) -> bool:
        return matches(self.events, event_type)


def _check_url(url: str, where: str) -> None:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback(parts.hostname):
        return
    raise ConfigurationError(
        f"{where}: `url` must be an https URL (plain http only on loopback, for development); set it to the "
        "receiver's https address"
    )


def _check_events(events: Sequence[str], where: str) -> None:
    if not events:
        raise ConfigurationError(f'{where}: `events` is empty; name what it is sent, e.g. ["account.*"]')
    for name in events:
        family, _, kind = str(name).partition(".")
        known = _FAMILIES.get(family)
        if known is None or (kind != "*" and name not in known):
            raise ConfigurationError(
                f"{where}: `events` names {name!r}, which is no event; use {', '.join(f'{f}.*' for f in _FAMILIES)} "
                f"or one of {', '.join((*ACCOUNT_EVENTS, *AUDIT_EVENTS))}"
            )


def _check_secrets(secrets: Sequence[str], where: str, env: str | None) -> None:
    source = f"the variable {env}" if env else "`secrets`"
    if not secrets:
        raise ConfigurationError(
            f"{where}: {source} holds no secret; set it to a `whsec_<base64>` secret (several comma-separated while "
            "rotating)"
        )
    for number, secret in enumerate(secrets, 1):
        problem = _secret_problem(secret)
        if problem is not None:
            raise ConfigurationError(
                f"{where}: secret {number} of {source} {problem}; a secret is `whsec_` followed by the base64 of "
                f"{_MIN_SECRET} to {_MAX_SECRET} random bytes"
            )


def _secret_problem(secret: str) -> str | None:
    if not secret.startswith(_PREFIX):
        return "does not start with `whsec_`"
    try:
        raw = base64.b64decode(secret[len(_PREFIX) :], validate=True)
    except (binascii.Error, ValueError):
        return "is not base64 after `whsec_`"
    if not _MIN_SECRET <= len(raw) <= _MAX_SECRET:
        return f"is {len(raw)} bytes long"
    return None


def load_endpoints(path: str | Path, *, environ: Mapping[str, str] | None = None) -> tuple[Endpoint, ...]:
    """The endpoints of the TOML file at `path`: `[[endpoint]]` tables with `url`, `events` and `secret_env` (the
    environment variable holding the endpoint's secrets, comma-separated). Refused (`ConfigurationError`) when the
    file cannot be read, a field is missing or wrong, a variable is unset, or two endpoints share a URL."""
    env = os.environ if environ is None else environ
    try:
        document = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(
            f"ASKBACK_WEBHOOKS names {str(path)!r}, which cannot be read ({exc.strerror}); point it at the "
            "webhooks file"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(f"the webhooks file {str(path)!r} is not valid TOML: {exc}") from None
    tables = document.get("endpoint", [])
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigurationError(f"the webhooks file {str(path)!r}: endpoints are `[[endpoint]]` tables")
    endpoints = tuple(_endpoint(table, number, env, path) for number, table in enumerate(tables, 1))
    seen: set[str] = set()
    for endpoint in endpoints:
        if endpoint.url in seen:
            raise ConfigurationError(
                f"the webhooks file {str(path)!r} has two endpoints for {endpoint.url!r}; make them one, listing "
                "every event it is sent"
            )
        seen.add(endpoint.url)
    return endpoints


def _endpoint(table: dict[str, Any], number: int, env: Mapping[str, str], path: str | Path) -> Endpoint:
    where = f"the webhooks file {str(path)!r}, endpoint {number}"
    unknown = sorted(set(table) - {"url", "events", "secret_env"})
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown field(s) {', '.join(unknown)}; the fields are url, events, secret_env"
        )
    url, events, secret_env = table.get("url"), table.get("events"), table.get("secret_env")
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"{where}: `url` is missing; set it to the receiver's https address")
    if not isinstance(events, list) or not all(isinstance(e, str) for e in events):
        raise ConfigurationError(f'{where}: `events` must be a list of event names, e.g. ["account.*"]')
    if not isinstance(secret_env, str) or not secret_env:
        raise ConfigurationError(f"{where}: `secret_env` is missing; name the variable that holds its secrets")
    value = env.get(secret_env)
    if value is None:
        raise ConfigurationError(
            f"{where}: `secret_env` names {secret_env}, which is not set; set it to the endpoint's `whsec_` secret"
        )
    return Endpoint(url=url, events=events, secrets=value.split(","), secret_env=secret_env)
