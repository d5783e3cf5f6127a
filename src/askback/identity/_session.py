"""What a browser holds of a person's sign-in: the session cookie, and the short-lived cookie of a sign-in under way.

Both are values signed with the site's session secret (itsdangerous, each under its own salt, so one can never be
taken for the other):

- a session: only its random id, which names its row in the shared store (`_sessions.Sessions`: whose session it is,
  when it ends, and whether it was ended), so signing out ends it for every copy of the cookie;
- a sign-in under way (`PendingSignIn`): the `state` sent to the provider, the `nonce` its ID token must carry, the
  path to come back to, and when it stops being accepted (ten minutes), read against an injected clock.

The PKCE verifier of a sign-in is never stored: it is derived from its `state` under the secret (`code_verifier`),
so the cookie holds nothing that would let anyone who reads it redeem a code. Everything here is pure: values in,
values out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from itsdangerous import BadData, URLSafeSerializer

__all__ = ["PendingSignIn", "SessionSigner", "code_challenge"]

MIN_SECRET_BYTES = 32
PENDING_TTL = 600.0
_SESSION_SALT = "askback.identity.session"
_PENDING_SALT = "askback.identity.sign-in"
_PKCE_LABEL = b"askback.identity.pkce\x00"
_MAX_SESSION_ID = 128


@dataclass(frozen=True)
class PendingSignIn:
    """A sign-in sent to the provider and not yet back."""

    state: str
    nonce: str
    next_path: str
    expires: float

    @classmethod
    def new(cls, next_path: str, *, now: float, ttl: float = PENDING_TTL) -> PendingSignIn:
        return cls(secrets.token_urlsafe(32), secrets.token_urlsafe(32), next_path, now + ttl)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def code_challenge(verifier: str) -> str:
    """The S256 challenge of a PKCE verifier (RFC 7636 section 4.2)."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


class SessionSigner:
    """Signs and reads the two cookies under one secret of at least 32 bytes."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a session secret is at least {MIN_SECRET_BYTES} bytes")
        self._sessions = URLSafeSerializer(secret, salt=_SESSION_SALT)
        self._pending = URLSafeSerializer(secret, salt=_PENDING_SALT)
        self._pkce = hmac.new(secret, _PKCE_LABEL, hashlib.sha256).digest()

    def __repr__(self) -> str:
        return "SessionSigner()"

    def session_value(self, session_id: str) -> str:
        """The session cookie's value: the session id, signed."""
        value: str = self._sessions.dumps({"s": session_id})
        return value

    def session_id_of(self, value: str | None) -> str | None:
        """The session id a cookie holds; `None` for no cookie or a bad signature. Whether that session still lasts
        is the store's to say."""
        data = self._load(self._sessions, value)
        session_id = None if data is None else data.get("s")
        if not isinstance(session_id, str) or not 0 < len(session_id) <= _MAX_SESSION_ID:
            return None
        return session_id

    def pending_value(self, pending: PendingSignIn) -> str:
        value: str = self._pending.dumps(
            {"s": pending.state, "n": pending.nonce, "next": pending.next_path, "e": pending.expires}
        )
        return value

    def pending_of(self, value: str | None, *, state: str | None, now: float) -> PendingSignIn | None:
        """The sign-in under way a cookie holds when it is the one `state` names and has not expired; else `None`."""
        data = self._load(self._pending, value)
        if data is None or not state:
            return None
        held, nonce, next_path, expires = data.get("s"), data.get("n"), data.get("next"), data.get("e")
        if not (isinstance(held, str) and isinstance(nonce, str) and isinstance(next_path, str)):
            return None
        if not isinstance(expires, (int, float)) or isinstance(expires, bool) or now >= expires:
            return None
        if not hmac.compare_digest(held.encode(), state.encode()):
            return None
        return PendingSignIn(held, nonce, next_path, float(expires))

    def code_verifier(self, state: str) -> str:
        """The PKCE verifier of the sign-in `state` names (43 characters of base64url)."""
        return _b64(hmac.new(self._pkce, state.encode(), hashlib.sha256).digest())

    @staticmethod
    def _load(serializer: URLSafeSerializer, value: str | None) -> dict[str, Any] | None:
        if not value or len(value) > 4096:
            return None
        try:
            data = serializer.loads(value)
        except (BadData, ValueError, UnicodeError):
            return None
        return data if isinstance(data, dict) else None
