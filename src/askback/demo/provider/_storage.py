"""Demo Mail's names and limits, and its storage: in memory, in the shapes Authlib's model mixins expect (duck-typed)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from askback.clock import Clock

__all__ = [
    "ACCESS_TOKEN_SECONDS",
    "AUTHORIZE_PATH",
    "CLIENT_ID",
    "CODE_SECONDS",
    "MAX_BODY_BYTES",
    "MESSAGES_PATH",
    "NAME",
    "PAGE_SECONDS",
    "SCOPE",
    "TOKEN_PATH",
    "Client",
    "Code",
    "Memory",
    "Token",
]

NAME = "Demo Mail"
CLIENT_ID = "askback-demo"
SCOPE = "mail.read"
AUTHORIZE_PATH = "/authorize"
TOKEN_PATH = "/token"
MESSAGES_PATH = "/mail/messages"

ACCESS_TOKEN_SECONDS = 3600
CODE_SECONDS = 300
PAGE_SECONDS = 600
# A consent form or a token request is a few hundred bytes.
MAX_BODY_BYTES = 16 * 1024


@dataclass(frozen=True)
class Client:
    client_id: str
    client_secret: str = field(repr=False)
    redirect_uris: tuple[str, ...]

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.redirect_uris[0]

    def get_allowed_scope(self, scope: str | None) -> str:
        return " ".join(s for s in (scope or SCOPE).split() if s == SCOPE)

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in self.redirect_uris

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.compare_digest(client_secret.encode(), self.client_secret.encode())

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method in ("client_secret_basic", "client_secret_post")  # a confidential client, never "none"

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


@dataclass(frozen=True)
class Code:
    code: str = field(repr=False)
    client_id: str
    redirect_uri: str
    scope: str
    user: str
    code_challenge: str
    code_challenge_method: str
    expires_at: float

    def get_redirect_uri(self) -> str:
        return self.redirect_uri

    def get_scope(self) -> str:
        return self.scope


@dataclass
class Token:
    access_token: str = field(repr=False)
    refresh_token: str | None = field(repr=False)
    client_id: str
    scope: str
    user: str
    expires_at: float
    clock: Clock = field(repr=False)
    revoked: bool = False

    def check_client(self, client: Client) -> bool:
        return client.client_id == self.client_id

    def get_scope(self) -> str:
        return self.scope

    def get_expires_in(self) -> int:
        return max(int(self.expires_at - self.clock.now()), 0)

    def is_expired(self) -> bool:
        return self.clock.now() >= self.expires_at

    def is_revoked(self) -> bool:
        return self.revoked

    def get_user(self) -> str:
        return self.user


@dataclass
class Memory:
    clock: Clock
    clients: dict[str, Client] = field(default_factory=dict)
    codes: dict[str, Code] = field(default_factory=dict)
    by_access: dict[str, Token] = field(default_factory=dict)
    by_refresh: dict[str, Token] = field(default_factory=dict)
    # The consent form's single-use tickets: ticket -> (the authorization request's query string, expiry).
    tickets: dict[str, tuple[str, float]] = field(default_factory=dict)
