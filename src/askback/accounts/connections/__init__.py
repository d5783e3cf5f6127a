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

Three layers, each usable alone (private modules behind this face):
- the definitions: `OAuthConnection`, `ApiKeyConnection`, the presets (`github`, `google`, `slack`, `microsoft`,
  or `preset(name, ...)`), the `Connections` registry, and `load_connections`, which reads a TOML file
  (`ASKBACK_CONNECTIONS_FILE`) (`_definitions`, `_presets`, `_toml`; the shared checks and `origin` in `_checks`);
- request building, with no I/O: `authorization_request`, `token_request`, `refresh_request`, `revocation_request`,
  `api_key_headers`, `key_check_request` describe exactly what would be sent. The hosted pages and the refresher do
  the sending, and tests can read every byte (`_requests`);
- discovery: `discover` and `fetch_metadata` are the only I/O here (one or two GETs with httpx). The URLs to try
  (`metadata_urls`) and the judgement of what came back (`parse_metadata`) are pure (`_discovery`).

The OAuth encoding comes from Authlib's pure helpers (`prepare_grant_uri`, `prepare_token_request`,
`prepare_revoke_token_request`, `ClientAuth`, `create_s256_code_challenge`), the same ones its clients call.
`AsyncOAuth2Client` itself is not used to build requests, because constructing one opens an HTTP client and its
methods send.

Errors: a connection written wrongly in Python is a `DefinitionError`. Anything wrong in the file, the environment
or what a provider publishes is a `ConfigurationError` naming the file, the connection and the key or variable to
fix. Neither ever holds a secret.
"""

from __future__ import annotations

from askback.accounts.connections._checks import origin
from askback.accounts.connections._definitions import (
    ApiKeyConnection,
    Connection,
    Connections,
    KeyCheck,
    OAuthConnection,
    TokenAuthMethod,
    TokenTypeHint,
    secret_from_env,
)
from askback.accounts.connections._discovery import (
    ProviderMetadata,
    discover,
    discover_all,
    fetch_metadata,
    metadata_urls,
    parse_metadata,
)
from askback.accounts.connections._presets import PRESETS, github, google, microsoft, preset, slack
from askback.accounts.connections._requests import (
    FormRequest,
    KeyCheckRequest,
    api_key_headers,
    authorization_request,
    key_check_request,
    new_code_verifier,
    new_state,
    refresh_request,
    revocation_request,
    token_request,
)
from askback.accounts.connections._toml import load_connections

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
