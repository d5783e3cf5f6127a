"""Finding an authorization server's metadata: its OpenID Connect configuration, else its RFC 8414 document.

`discover(http, issuer)` reads `{issuer}/.well-known/openid-configuration`, then the RFC 8414 document
(`/.well-known/oauth-authorization-server`, with the issuer's path appended after it for an issuer with a path),
through `askback.web.oauth_metadata`; an issuer that cannot be reached at the first is not asked at the second. The
document must name the configured issuer exactly, or it is refused: a server that answers for another issuer is not
the one trusted. Anything that keeps the metadata from being read is an `IssuerUnavailableError` (retryable).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from askback.core.addresses import is_loopback
from askback.errors import IssuerUnavailableError
from askback.web.oauth_metadata import (
    MAX_METADATA_BYTES,
    NotFound,
    Problem,
    fetch_metadata,
    metadata_urls,
    names_issuer,
)

if TYPE_CHECKING:
    import httpx

__all__ = ["IssuerMetadata", "check_issuer", "discover", "metadata_urls"]


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


def check_issuer(url: str) -> str:
    """`url` when it can name an issuer: absolute https (http only on a loopback address, for development), with
    no user name or password, query or fragment. Raises `ValueError` saying what is wrong, never the URL: an issuer
    URL is published in the resource's metadata and written in logs, so a password in it would be too."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("an issuer is an absolute https:// URL")
    if "@" in parts.netloc:
        raise ValueError(
            "an issuer URL holds no user name or password (user:password@); give the credentials askback needs in "
            "their own settings"
        )
    if parts.scheme == "http" and not is_loopback(parts.hostname):
        raise ValueError("an issuer must use https (http is accepted only on a loopback address, for development)")
    if parts.query or parts.fragment:
        raise ValueError("an issuer URL has no query or fragment")
    return url


def _endpoint(document: Mapping[str, Any], name: str) -> str | None:
    value = document.get(name)
    return value if isinstance(value, str) and value else None


def parse_metadata(document: Any, issuer: str) -> IssuerMetadata:
    """The metadata in `document`, when it is an object naming `issuer` exactly and a JWKS; raises
    `IssuerUnavailableError` otherwise."""
    if not isinstance(document, dict):
        raise IssuerUnavailableError(f"the metadata of the issuer {issuer} is not a JSON object")
    if not names_issuer(document, issuer):
        named = document.get("issuer")
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
    found = await fetch_metadata(http, issuer, stop_when_unreachable=True)
    if isinstance(found, NotFound):
        raise IssuerUnavailableError(_not_found(issuer, found.problems))
    return parse_metadata(found.document, issuer)


def _not_found(issuer: str, problems: tuple[Problem, ...]) -> str:
    if problems[-1].kind == "unreachable":
        return (
            f"the issuer {issuer} could not be reached for its metadata ({problems[-1].error}); check that it is up "
            "and that ASKBACK_AUTH_ISSUER is right"
        )
    seen = "; ".join(_PROBLEMS[problem.kind].format(url=problem.url, status=problem.status) for problem in problems)
    return f"no metadata was found for the issuer {issuer} ({seen}); check ASKBACK_AUTH_ISSUER"


_PROBLEMS = {
    "status": "{url} answered {status}",
    "too_big": f"{{url}} answered more than {MAX_METADATA_BYTES} bytes",
    "not_json": "{url} did not answer JSON",
}
