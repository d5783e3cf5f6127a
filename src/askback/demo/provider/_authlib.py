"""Demo Mail's OAuth 2.0 under Authlib: the grants (authorization code with PKCE S256 required, refresh with
rotation), the authorization server and the bearer token check, with what Authlib's Flask and Django integrations
would supply written for Starlette: a request already read (Authlib's server code is synchronous) and
`(status, body, headers)` made a Starlette response.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from authlib.oauth2.rfc6749 import (  # type: ignore[import-untyped]
    AuthorizationCodeGrant,
    AuthorizationServer,
    InvalidRequestError,
    OAuth2Payload,
    OAuth2Request,
    RefreshTokenGrant,
)
from authlib.oauth2.rfc6750 import BearerTokenGenerator, BearerTokenValidator  # type: ignore[import-untyped]
from authlib.oauth2.rfc7636 import CodeChallenge  # type: ignore[import-untyped]
from starlette.requests import Request
from starlette.responses import Response

from askback.demo.provider._storage import ACCESS_TOKEN_SECONDS, CODE_SECONDS, NAME, SCOPE, Client, Code, Memory, Token

__all__ = ["BearerValidator", "ProviderRequest", "Server"]


class CodeGrant(AuthorizationCodeGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]  # noqa: RUF012 (Authlib's API)

    @property
    def memory(self) -> Memory:
        memory: Memory = self.server.memory
        return memory

    def save_authorization_code(self, code: str, request: OAuth2Request) -> None:
        data = request.payload.data
        self.memory.codes[code] = Code(
            code=code,
            client_id=request.client.client_id,
            redirect_uri=request.payload.redirect_uri,
            scope=request.scope,
            user=request.user,
            code_challenge=data["code_challenge"],
            code_challenge_method=data["code_challenge_method"],
            expires_at=self.memory.clock.now() + CODE_SECONDS,
        )

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found = self.memory.codes.get(code)
        if found is None or found.client_id != client.client_id or found.expires_at <= self.memory.clock.now():
            return None
        return found

    def delete_authorization_code(self, authorization_code: Code) -> None:
        self.memory.codes.pop(authorization_code.code, None)

    def authenticate_user(self, authorization_code: Code) -> str:
        return authorization_code.user


class RefreshGrant(RefreshTokenGrant):  # type: ignore[misc]
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]  # noqa: RUF012 (Authlib's API)
    INCLUDE_NEW_REFRESH_TOKEN = True  # rotation: each refresh token works once

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        memory: Memory = self.server.memory
        found = memory.by_refresh.get(refresh_token)
        return None if found is None or found.revoked else found

    def authenticate_user(self, refresh_token: Token) -> str:
        return refresh_token.user

    def revoke_old_credential(self, refresh_token: Token) -> None:
        refresh_token.revoked = True


class PkceS256(CodeChallenge):  # type: ignore[misc]
    """Authlib's PKCE, with S256 the only method and a challenge required of every client, confidential ones too
    (Authlib itself asks a verifier only of public clients, and accepts `plain`)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]  # noqa: RUF012 (Authlib's API)
    DEFAULT_CODE_CHALLENGE_METHOD = "S256"

    def validate_code_challenge(self, grant: Any, redirect_uri: str) -> None:
        data = grant.request.payload.data
        if not data.get("code_challenge") or data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("PKCE is required: send code_challenge with code_challenge_method=S256.")
        super().validate_code_challenge(grant, redirect_uri)


class Payload(OAuth2Payload):  # type: ignore[misc]
    """The request's parameters: the query string's, then the form's (Flask's `request.values`)."""

    def __init__(self, pairs: Sequence[tuple[str, str]]) -> None:
        self._datalist: defaultdict[str, list[str]] = defaultdict(list)
        for key, value in pairs:
            self._datalist[key].append(value)
        self._data = {key: values[0] for key, values in self._datalist.items()}

    @property
    def data(self) -> dict[str, str]:
        return self._data

    @property
    def datalist(self) -> defaultdict[str, list[str]]:
        return self._datalist


class ProviderRequest(OAuth2Request):  # type: ignore[misc]
    """A Starlette request as Authlib reads it, its form already read (Authlib's server code is synchronous)."""

    def __init__(self, request: Request, form: Sequence[tuple[str, str]]) -> None:
        super().__init__(method=request.method, uri=str(request.url), headers=request.headers)
        query = list(request.query_params.multi_items())
        self._args = dict(reversed(query))  # the first value of each name, as the payload has it
        self._form = dict(reversed(form))
        self.payload = Payload([*query, *form])

    @property
    def args(self) -> dict[str, str]:
        return self._args

    @property
    def form(self) -> dict[str, str]:
        return self._form


class Server(AuthorizationServer):  # type: ignore[misc]
    """Authlib's authorization server with what its Flask and Django integrations supply, written for Starlette:
    turning a request into an `OAuth2Request` and `(status, body, headers)` into a response."""

    def __init__(self, memory: Memory, new_token: Callable[[int], str]) -> None:
        super().__init__(scopes_supported=[SCOPE])
        self.memory = memory
        self.register_token_generator(
            "default",
            BearerTokenGenerator(
                access_token_generator=lambda **_: new_token(42),
                refresh_token_generator=lambda **_: new_token(48),
                expires_generator=ACCESS_TOKEN_SECONDS,
            ),
        )
        self.register_grant(CodeGrant, [PkceS256(required=True)])
        self.register_grant(RefreshGrant)

    def query_client(self, client_id: str) -> Client | None:
        return self.memory.clients.get(client_id)

    def save_token(self, token: Mapping[str, Any], request: OAuth2Request) -> None:
        saved = Token(
            access_token=token["access_token"],
            refresh_token=token.get("refresh_token"),
            client_id=request.client.client_id,
            scope=token.get("scope", ""),
            user=request.user,
            expires_at=self.memory.clock.now() + int(token["expires_in"]),
            clock=self.memory.clock,
        )
        self.memory.by_access[saved.access_token] = saved
        if saved.refresh_token is not None:
            self.memory.by_refresh[saved.refresh_token] = saved

    def create_oauth2_request(self, request: OAuth2Request) -> OAuth2Request:
        assert isinstance(request, ProviderRequest), "the routes hand Authlib requests already read"
        return request

    def create_json_request(self, request: Any) -> Any:
        raise NotImplementedError("no endpoint here takes JSON")

    def handle_response(self, status: int, body: Any, headers: Sequence[tuple[str, str]]) -> Response:
        content = json.dumps(body) if isinstance(body, dict) else str(body or "")
        return Response(content, status_code=status, headers=dict(headers))

    def send_signal(self, name: str, *args: Any, **kwargs: Any) -> None:
        """Nothing listens to Authlib's signals here."""


class BearerValidator(BearerTokenValidator):  # type: ignore[misc]
    def __init__(self, memory: Memory) -> None:
        super().__init__(realm=NAME)
        self.memory = memory

    def authenticate_token(self, token_string: str) -> Token | None:
        return self.memory.by_access.get(token_string)
