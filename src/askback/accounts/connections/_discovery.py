"""Discovery: `discover` and `fetch_metadata` are the only I/O of the connections (one or two GETs with httpx,
through `askback.web.oauth_metadata`). The URLs to try (`metadata_urls`) and the judgement of what came back
(`parse_metadata`) are pure."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from askback.accounts.connections._checks import origin, url_problem
from askback.accounts.connections._definitions import Connection, Connections, OAuthConnection
from askback.errors import ConfigurationError
from askback.web import oauth_metadata
from askback.web.oauth_metadata import MAX_METADATA_BYTES, NotFound, Problem, names_issuer

if TYPE_CHECKING:
    import httpx

# Seconds for each metadata GET when discovery makes its own client; pass `http=` to choose otherwise.
_DISCOVERY_TIMEOUT = 10.0


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
    return oauth_metadata.metadata_urls(_checked_issuer(issuer))


def _checked_issuer(issuer: str) -> str:
    if problem := url_problem(issuer, issuer=True):
        raise ConfigurationError(f"The issuer {problem}.")
    return issuer


def parse_metadata(issuer: str, document: object, *, source: str) -> ProviderMetadata:
    """Judge a metadata document fetched from `source` for `issuer`: it must be a JSON object whose `issuer` is
    identical to the configured one (RFC 8414 §3.3) and which names the authorization and token endpoints."""
    here = f"The metadata at {source}"
    if not isinstance(document, dict):
        raise ConfigurationError(f"{here} is not a JSON object.")
    if not names_issuer(document, issuer):
        published = document.get("issuer")
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
        if problem := url_problem(value):
            raise ConfigurationError(f"{here}: {key} {problem}.")
        endpoints[key] = value
    revocation = document.get("revocation_endpoint")
    if revocation is not None and (not isinstance(revocation, str) or url_problem(revocation)):
        raise ConfigurationError(f"{here}: revocation_endpoint is not an https URL.")
    userinfo = document.get("userinfo_endpoint")
    if userinfo is not None and (not isinstance(userinfo, str) or url_problem(userinfo)):
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

    issuer = _checked_issuer(issuer)
    client = httpx.AsyncClient(timeout=_DISCOVERY_TIMEOUT, follow_redirects=False) if http is None else http
    try:
        found = await oauth_metadata.fetch_metadata(client, issuer)
    finally:
        if http is None:
            await client.aclose()
    if isinstance(found, NotFound):
        raise ConfigurationError(
            f"No authorization server metadata for issuer {issuer!r}: " + "; ".join(map(_tried, found.problems)) + ". "
            "Check the issuer (it must be exactly the provider's), or set authorize_url and token_url on the "
            "connection instead."
        )
    return parse_metadata(issuer, found.document, source=found.url)


def _tried(problem: Problem) -> str:
    match problem.kind:
        case "unreachable":
            return f"GET {problem.url}: {problem.error} ({problem.detail})"
        case "status":
            return f"GET {problem.url}: HTTP {problem.status}"
        case "too_big":
            return f"GET {problem.url}: a body over {MAX_METADATA_BYTES} bytes"
        case "not_json":
            return f"GET {problem.url}: HTTP 200 but not JSON"


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


def _string_list(document: dict[str, Any], key: str, here: str) -> tuple[str, ...] | None:
    value = document.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigurationError(f"{here}: {key} is not a list of strings.")
    return tuple(value)
