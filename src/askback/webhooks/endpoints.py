"""Where webhooks go: the endpoints, read from the TOML file `ASKBACK_WEBHOOKS` names or made in Python, and which
events each one is sent. Plain data, no I/O but reading the file and the environment.

```toml
[[endpoint]]
url = "https://hooks.example.com/askback"
events = ["account.*", "audit.rejected"]
secret_env = "HOOKS_SECRET"          # "whsec_...", or several comma-separated while rotating
# allow_private = true               # only for a receiver on this machine or a private network
```

An endpoint is sent the events it names: exact names (`account.connected`) or a whole family (`account.*`,
`approval.*`). The
audit family is opt-in: only an endpoint that names `audit.*` or an `audit.<kind>` is sent audit events. Every
value is checked when the endpoint is made, and a wrong one is a `ConfigurationError` naming the field (never a
secret's value).

Where a URL may point is `_destinations`' decision: a literal private, loopback, link-local, ... address or a
cloud metadata name is refused here, unless the endpoint says `allow_private`; names are judged again, by the
addresses they resolve to, when the dispatcher connects. A URL never carries a user name or password, and
`redacted_url` is how every URL is shown: in logs, listings, errors and the delivery rows.
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
from askback.core.addresses import is_loopback
from askback.errors import ConfigurationError
from askback.webhooks._destinations import host_problem

__all__ = ["ACCOUNT_EVENTS", "APPROVAL_EVENTS", "AUDIT_EVENTS", "Endpoint", "load_endpoints", "matches", "redacted_url"]

ACCOUNT_EVENTS = tuple(
    f"account.{kind}" for kind in ("connected", "refreshed", "expired", "error", "recovered", "revoked")
)
APPROVAL_EVENTS = tuple(f"approval.{kind}" for kind in ("requested", "decided", "withdrawn", "expired", "consumed"))
AUDIT_EVENTS = tuple(f"audit.{kind}" for kind in get_args(EventKind))
_FAMILIES = {"account": ACCOUNT_EVENTS, "approval": APPROVAL_EVENTS, "audit": AUDIT_EVENTS}
# The families read from the store's shared event log; the audit family is read from the audit log.
_LOGGED = (*ACCOUNT_EVENTS, *APPROVAL_EVENTS)
# Standard Webhooks: a secret is 24 to 64 random bytes, base64 after the `whsec_` prefix.
_PREFIX = "whsec_"
_MIN_SECRET, _MAX_SECRET = 24, 64
_FIELDS = ("url", "events", "secret_env", "allow_private")
_REDACTED = "[redacted]"


def redacted_url(url: str) -> str:
    """`url` as it may be shown, logged or stored: without its user name and password and with its query string
    and fragment replaced by `[redacted]` (tokens live there). The one place that decides how a webhook URL is
    shown."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        return f"{_REDACTED} (a URL that cannot be parsed)"
    if parts.netloc and host is None:
        return f"{_REDACTED} (a URL that cannot be parsed)"
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = f"{_REDACTED}@{netloc}"
    shown = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else f"{netloc}{parts.path}"
    if parts.query or url.rstrip("#").endswith("?"):
        shown += f"?{_REDACTED}"
    if parts.fragment:
        shown += f"#{_REDACTED}"
    return shown


def matches(patterns: Sequence[str], event_type: str) -> bool:
    """Whether `event_type` is one of `patterns` (exact names, or `family.*`)."""
    return any(event_type == p or (p.endswith(".*") and event_type.startswith(p[:-1])) for p in patterns)


@dataclass(frozen=True)
class Endpoint:
    """One receiver: its `url` (https; plain http only on loopback; never a user name or password), the `events` it
    is sent (exact names or `family.*`), and its `secrets` (`whsec_<base64>`: each signs every delivery, so that a
    receiver can move to a new one before the old one is removed). `secret_env` names where the secrets came from,
    for listings. `allow_private` lets the URL point at this machine or a private network (loopback, private,
    link-local, CGNAT addresses...), refused otherwise; a cloud metadata service is refused all the same."""

    url: str = field(repr=False)
    events: Sequence[str]
    secrets: Sequence[str] = field(repr=False)
    secret_env: str | None = None
    allow_private: bool = False

    def __post_init__(self) -> None:
        where = f"the webhook endpoint {self.shown_url!r}"
        object.__setattr__(self, "events", tuple(self.events))
        object.__setattr__(self, "secrets", tuple(s.strip() for s in self.secrets if s.strip()))
        _check_url(self.url, where, allow_private=self.allow_private)
        _check_events(self.events, where)
        _check_secrets(self.secrets, where, self.secret_env)

    def __repr__(self) -> str:
        return (
            f"Endpoint(url={self.shown_url!r}, events={self.events!r}, secret_env={self.secret_env!r}, "
            f"allow_private={self.allow_private!r})"
        )

    @property
    def shown_url(self) -> str:
        """The URL as it may be shown (`redacted_url`)."""
        return redacted_url(self.url)

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
    def wants_logged_events(self) -> bool:
        """Whether it is sent any event of the store's shared event log (accounts, approvals)."""
        return any(matches(self.events, name) for name in _LOGGED)

    @property
    def wants_audit_events(self) -> bool:
        return any(matches(self.events, name) for name in AUDIT_EVENTS)

    def wants(self, event_type: str) -> bool:
        return matches(self.events, event_type)


def _check_url(url: str, where: str, *, allow_private: bool) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (parses the port: a wrong one raises)
    except ValueError:
        raise ConfigurationError(f"{where}: `url` is not a URL; set it to the receiver's https address") from None
    if "@" in parts.netloc:
        raise ConfigurationError(
            f"{where}: `url` carries a user name or password, which would be logged and stored with it; remove it "
            "and let the receiver check the signature (`webhook-signature`) instead"
        )
    if not ((parts.scheme == "https" and parts.hostname) or (parts.scheme == "http" and is_loopback(parts.hostname))):
        raise ConfigurationError(
            f"{where}: `url` must be an https URL (plain http only on loopback, for development); set it to the "
            "receiver's https address"
        )
    if not _sendable(url):
        raise ConfigurationError(
            f"{where}: `url` has a host name no request can be sent to (not a valid internationalised domain name); "
            "write the receiver's host name as registered, in Unicode or as its `xn--` form"
        )
    problem = host_problem(parts.hostname or "", allow_private=allow_private)
    if problem is not None:
        remedy = (
            "a webhook never goes to a cloud metadata service; set it to the receiver's address"
            if host_problem(parts.hostname or "", allow_private=True) is not None
            else "point it at the receiver's public address, or set `allow_private = true` on the endpoint if it is "
            "meant to be reached on this machine or a private network"
        )
        raise ConfigurationError(f"{where}: `url` may not point there ({problem}); {remedy}")


def _sendable(url: str) -> bool:
    """Whether httpx, which sends every webhook, can build a request to `url`: it parses the URL, IDNA-encodes its
    host, and decodes that host again for the `Host` header, as every attempt does."""
    import httpx  # deferred: reading endpoints for a listing loads no HTTP client

    try:
        parsed = httpx.URL(url)
        parsed.host  # noqa: B018 (decodes the IDNA host: a wrong one raises)
        parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, ValueError):  # idna's errors are `UnicodeError`s
        return False
    return True


def _check_events(events: Sequence[str], where: str) -> None:
    if not events:
        raise ConfigurationError(f'{where}: `events` is empty; name what it is sent, e.g. ["account.*"]')
    for name in events:
        family, _, kind = str(name).partition(".")
        known = _FAMILIES.get(family)
        if known is None or (kind != "*" and name not in known):
            raise ConfigurationError(
                f"{where}: `events` names {name!r}, which is no event; use {', '.join(f'{f}.*' for f in _FAMILIES)} "
                f"or one of {', '.join((*ACCOUNT_EVENTS, *APPROVAL_EVENTS, *AUDIT_EVENTS))}"
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
    """The endpoints of the TOML file at `path`: `[[endpoint]]` tables with `url`, `events`, `secret_env` (the
    environment variable holding the endpoint's secrets, comma-separated) and, optionally, `allow_private` (true to
    let it point at this machine or a private network). Refused (`ConfigurationError`) when the
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
                f"the webhooks file {str(path)!r} has two endpoints for {endpoint.shown_url!r}; make them one, "
                "listing every event it is sent"
            )
        seen.add(endpoint.url)
    return endpoints


def _endpoint(table: dict[str, Any], number: int, env: Mapping[str, str], path: str | Path) -> Endpoint:
    where = f"the webhooks file {str(path)!r}, endpoint {number}"
    unknown = sorted(set(table) - set(_FIELDS))
    if unknown:
        raise ConfigurationError(f"{where}: unknown field(s) {', '.join(unknown)}; the fields are {', '.join(_FIELDS)}")
    allow_private = table.get("allow_private", False)
    if not isinstance(allow_private, bool):
        raise ConfigurationError(f"{where}: `allow_private` is true or false (without quotes)")
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
    return Endpoint(
        url=url, events=events, secrets=value.split(","), secret_env=secret_env, allow_private=allow_private
    )
