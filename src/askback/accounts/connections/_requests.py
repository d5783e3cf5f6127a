"""Request building, with no I/O: `authorization_request`, `token_request`, `refresh_request`,
`revocation_request`, `api_key_headers` and `key_check_request` describe exactly what would be sent. The hosted
pages and the refresher do the sending, and tests can read every byte. The OAuth encoding is Authlib's pure helpers."""

from __future__ import annotations

import re
from typing import NamedTuple
from urllib.parse import parse_qsl, quote_plus

from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.oauth2.auth import ClientAuth  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749.parameters import (  # type: ignore[import-untyped]
    prepare_grant_uri,
    prepare_token_request,
)
from authlib.oauth2.rfc7009 import prepare_revoke_token_request  # type: ignore[import-untyped]
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]
from pydantic import SecretStr

from askback.accounts.connections._checks import url_problem
from askback.accounts.connections._definitions import ApiKeyConnection, OAuthConnection, TokenTypeHint
from askback.errors import ConfigurationError, InvalidParamsError

# RFC 7636 §4.1: 43 to 128 unreserved characters.
_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")


# Form fields and headers that are secrets: `FormRequest`'s repr shows them as '**********'.
_SECRET_FIELDS = frozenset({"client_secret", "code", "code_verifier", "refresh_token", "token"})
_SECRET_HEADERS = frozenset({"authorization"})
_FORM_HEADERS = {"Accept": "application/json", "Content-Type": "application/x-www-form-urlencoded"}


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
    if problem := url_problem(redirect_uri):
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
