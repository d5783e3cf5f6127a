"""Finding an authorization server's metadata: its OpenID Connect configuration, else its RFC 8414 document.

`discover(http, issuer)` reads `{issuer}/.well-known/openid-configuration`, then the RFC 8414 document
(`/.well-known/oauth-authorization-server`, with the issuer's path appended after it for an issuer with a path). The
document must name the configured issuer exactly, or it is refused: a server that answers for another issuer is not
the one trusted. Anything that keeps the metadata from being read is an `IssuerUnavailableError` (retryable).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

import httpx

from askback.errors import IssuerUnavailableError

__all__ = ["IssuerMetadata", "check_issuer", "discover", "metadata_urls"]

_LOOPBACK_NAMES = ("localhost",)


@dataclass(frozen=True)
class IssuerMetadata:
    """What askback uses of an authorization server's metadata; `raw` is the whole document."""

    issuer: str
    jwks_uri: str
    authorization_endpoint: str | None = None
    token_endpoint: str | None = None
    introspection_endpoint: str | None = None
    end_session_endpoint: str | None = None
    raw: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False, compare=False)


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_issuer(url: str) -> str:
    """`url` when it can name an issuer: absolute https (http only on a loopback address, for development), with
    no query or fragment. Raises `ValueError` saying what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("an issuer is an absolute https:// URL")
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError("an issuer must use https (http is accepted only on a loopback address, for development)")
    if parts.query or parts.fragment:
        raise ValueError("an issuer URL has no query or fragment")
    return url


def metadata_urls(issuer: str) -> tuple[str, ...]:
    """Where the metadata of `issuer` is looked for, in order."""
    parts = urlsplit(issuer)
    origin = f"{parts.scheme}://{parts.netloc}"
    path = parts.path.rstrip("/")
    return (
        f"{issuer.rstrip('/')}/.well-known/openid-configuration",
        f"{origin}/.well-known/oauth-authorization-server{path}",
    )


def _endpoint(document: Mapping[str, Any], name: str) -> str | None:
    value = document.get(name)
    return value if isinstance(value, str) and value else None


def parse_metadata(document: Any, issuer: str) -> IssuerMetadata:
    """The metadata in `document`, when it is an object naming `issuer` exactly and a JWKS; raises
    `IssuerUnavailableError` otherwise."""
    if not isinstance(document, dict):
        raise IssuerUnavailableError(f"the metadata of the issuer {issuer} is not a JSON object")
    named = document.get("issuer")
    if named != issuer:
        raise IssuerUnavailableError(
            f"the metadata found for the issuer {issuer} names another issuer ({str(named)[:200]!r}); the "
            "configured issuer must be exactly the identifier the authorization server uses"
        )
    jwks_uri = _endpoint(document, "jwks_uri")
    if jwks_uri is None:
        raise IssuerUnavailableError(f"the metadata of the issuer {issuer} names no jwks_uri")
    try:
        check_issuer(jwks_uri.split("?")[0])
    except ValueError:
        raise IssuerUnavailableError(
            f"the issuer {issuer} publishes its keys at a URL that is not https; askback refuses to fetch them"
        ) from None
    return IssuerMetadata(
        issuer=issuer,
        jwks_uri=jwks_uri,
        authorization_endpoint=_endpoint(document, "authorization_endpoint"),
        token_endpoint=_endpoint(document, "token_endpoint"),
        introspection_endpoint=_endpoint(document, "introspection_endpoint"),
        end_session_endpoint=_endpoint(document, "end_session_endpoint"),
        raw=MappingProxyType(dict(document)),
    )


async def discover(http: httpx.AsyncClient, issuer: str) -> IssuerMetadata:
    """The metadata of `issuer` (see the module's docstring). Raises `IssuerUnavailableError` when it cannot be
    read or does not name `issuer`."""
    problems: list[str] = []
    for url in metadata_urls(issuer):
        try:
            response = await http.get(url, headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise IssuerUnavailableError(
                f"the issuer {issuer} could not be reached for its metadata ({type(exc).__name__}); check that it "
                "is up and that ASKBACK_AUTH_ISSUER is right"
            ) from None
        if response.status_code != 200:
            problems.append(f"{url} answered {response.status_code}")
            continue
        try:
            document = response.json()
        except ValueError:
            problems.append(f"{url} did not answer JSON")
            continue
        return parse_metadata(document, issuer)
    raise IssuerUnavailableError(
        f"no metadata was found for the issuer {issuer} ({'; '.join(problems)}); check ASKBACK_AUTH_ISSUER"
    )
