"""Checks shared by the definitions, the presets and the file: names, URLs, scopes, authorization parameters, and
origins (`origin`, the `scheme://host[:port]` a credential is for, compared as the browser would)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from askback.core.addresses import is_loopback
from askback.errors import DefinitionError

if TYPE_CHECKING:
    import httpx

__all__ = [
    "CONNECTION_NAME",
    "CONNECTION_NAME_RULE",
    "check_name",
    "checked_authorize_params",
    "checked_origins",
    "checked_scopes",
    "origin",
    "url_problem",
]


# Connection names appear in URLs (callbacks, links) and in the file as table names.
CONNECTION_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ).
_SCOPE = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")


# What the authorization request itself sets; `authorize_params` may not replace any of them.
_RESERVED_AUTHORIZE = frozenset(
    {"response_type", "client_id", "redirect_uri", "scope", "state", "code_challenge", "code_challenge_method"}
)


CONNECTION_NAME_RULE = (
    "a connection name is 1 to 64 lowercase letters, digits, '-' or '_', starting with a letter or digit."
)


def check_name(name: object) -> None:
    if not isinstance(name, str) or not CONNECTION_NAME.fullmatch(name):
        raise DefinitionError(f"Connection name {name!r} is not valid: {CONNECTION_NAME_RULE}")


def url_problem(url: object, *, issuer: bool = False) -> str | None:
    """Why `url` cannot be an endpoint (https, or http on loopback; no fragment; an issuer has no query either)."""
    if not isinstance(url, str) or not url or any(c.isspace() for c in url):
        return "is not a URL"
    parts = urlsplit(url)
    if parts.scheme == "http" and not is_loopback(parts.hostname):
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
    if scheme == "http" and not is_loopback(host):
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


def checked_origins(origins: object, what: str) -> tuple[str, ...]:
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


def checked_scopes(scopes: object, what: str, separator: str) -> tuple[str, ...]:
    if isinstance(scopes, str):
        raise DefinitionError(f"{what}: scopes is a single string; give a list, such as [{scopes!r}].")
    if not isinstance(scopes, Iterable):
        raise DefinitionError(f"{what}: scopes must be a list of strings.")
    result = tuple(scopes)
    for scope in result:
        if not isinstance(scope, str) or not _SCOPE.fullmatch(scope) or separator in scope:
            raise DefinitionError(f"{what}: scope {scope!r} is not a scope token (no spaces, quotes or backslashes).")
    return result


def checked_authorize_params(params: object, what: str) -> Mapping[str, str]:
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
