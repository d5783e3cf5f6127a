"""Opaque access tokens, checked by asking the authorization server (RFC 7662 token introspection).

askback posts the token to the introspection endpoint, authenticated with its own client credentials
(`client_secret_basic`). An inactive token, one of another issuer, or one for another audience is an
`InvalidTokenError`; an endpoint that cannot answer (unreachable, 5xx, refusing askback's credentials, not JSON) is an
`IssuerUnavailableError`, never an accepted token. Positive answers are kept for a short while (at most `max_ttl`,
never past the token's `exp`), and so are refusals (for `max_ttl`): a refused token sent again is refused from the
cache, without a request. Both caches are keyed by the SHA-256 of the token, so they never hold a token, and bounded
in size (the oldest entry goes first).

A flood of made-up tokens, each new, would still cost one request each: so at most `max_failures` answers per
`failure_interval` may be refusals or failures (a shared `HoldBack`). The try is counted before the endpoint is asked
and given back when the token turns out accepted, so a concurrent burst cannot have more than `max_failures` asks in
flight either. Past that, a token not in the cache is answered `IssuerUnavailableError` (503, retryable) without
asking, until the interval has passed: a flood of made-up tokens makes new tokens wait, while accepted tokens in the
cache are still accepted.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import httpx

from askback.clock import Clock
from askback.core.caller import checked_principal
from askback.errors import InvalidTokenError, IssuerUnavailableError
from askback.identity._holdback import HoldBack
from askback.identity._jwt import scopes_of
from askback.web.oauth_metadata import read_json

__all__ = ["Introspector", "check_introspection"]

MAX_ENTRIES = 10_000
MAX_TTL = 60.0
MAX_FAILURES = 10
FAILURE_INTERVAL = 30.0
# An introspection answer is a few claims; a body past this is not read further.
MAX_ANSWER_BYTES = 256 * 1024


def _audiences(answer: Mapping[str, Any]) -> list[str]:
    aud = answer.get("aud")
    if isinstance(aud, str):
        return [aud]
    if isinstance(aud, list):
        return [a for a in aud if isinstance(a, str)]
    return []


def check_introspection(
    answer: Mapping[str, Any], *, issuer: str | None, audience: str | None, principal_claim: str, now: float
) -> None:
    """Refuse (`InvalidTokenError`) an introspection answer unless it says the token is active, of `issuer` (when
    it names one), for `audience`, unexpired, naming a principal and granting scopes `scopes_of` accepts."""
    if answer.get("active") is not True:
        raise InvalidTokenError("the token is not active")
    if issuer is not None and "iss" in answer and answer["iss"] != issuer:
        raise InvalidTokenError("the token was issued by another issuer")
    if audience is not None and audience not in _audiences(answer):
        raise InvalidTokenError("the token was issued for another audience")
    exp = answer.get("exp")
    if isinstance(exp, (int, float)) and not isinstance(exp, bool) and exp <= now:
        raise InvalidTokenError("the token has expired")
    principal = answer.get(principal_claim)
    if not isinstance(principal, str) or not principal:
        raise InvalidTokenError(f"the token names no principal (claim {principal_claim})")
    checked_principal(principal)
    scopes_of(answer)


class Introspector:
    """Asks `url` about opaque tokens (see the module's docstring)."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        *,
        client_id: str,
        client_secret: str,
        issuer: str | None,
        audience: str | None,
        principal_claim: str = "sub",
        clock: Clock,
        max_entries: int = MAX_ENTRIES,
        max_ttl: float = MAX_TTL,
        max_failures: int = MAX_FAILURES,
        failure_interval: float = FAILURE_INTERVAL,
    ) -> None:
        self._http = http
        self._url = url
        # RFC 6749 §2.3.1: the id and secret are form-encoded before they are put in the Basic header.
        self._auth = httpx.BasicAuth(quote(client_id, safe=""), quote(client_secret, safe=""))
        self._issuer = issuer
        self._audience = audience
        self._principal_claim = principal_claim
        self._clock = clock
        self._max_entries = max_entries
        self._max_ttl = max_ttl
        self._cache: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._refused: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._failures = HoldBack(clock, failure_interval, limit=max_failures)
        self.requests = 0

    async def introspect(self, token: str) -> dict[str, Any]:
        """The introspection answer for an accepted `token`; raises `InvalidTokenError` or
        `IssuerUnavailableError`."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self._clock.now()
        cached = self._cache.get(digest)
        if cached is not None:
            until, answer = cached
            if now < until:
                return dict(answer)
            del self._cache[digest]
        refused = self._refused.get(digest)
        if refused is not None:
            if now < refused[0]:
                raise InvalidTokenError(refused[1])
            del self._refused[digest]
        if not self._failures.allows():
            raise IssuerUnavailableError(
                "too many tokens were refused or could not be checked just now; askback asks the introspection "
                "endpoint again shortly",
                retry_after=self._failures.retry_after(),
            )
        # Counted now, before the await: the tries of a concurrent burst are counted as they start.
        reserved = self._failures.tried()
        try:
            answer = await self._ask(token)
            check_introspection(
                answer, issuer=self._issuer, audience=self._audience, principal_claim=self._principal_claim, now=now
            )
        except InvalidTokenError as exc:
            self._refused[digest] = (now + self._max_ttl, str(exc))
            self._trim(self._refused)
            raise
        self._failures.forgive(reserved)
        until = now + self._max_ttl
        exp = answer.get("exp")
        if isinstance(exp, (int, float)) and not isinstance(exp, bool):
            until = min(until, float(exp))
        self._remember(digest, until, answer)
        return dict(answer)

    def _remember(self, digest: str, until: float, answer: dict[str, Any]) -> None:
        self._cache[digest] = (until, answer)
        self._trim(self._cache)

    def _trim(self, cache: OrderedDict[str, Any]) -> None:
        while len(cache) > self._max_entries:
            cache.popitem(last=False)

    async def _ask(self, token: str) -> dict[str, Any]:
        self.requests += 1
        try:
            reply = await read_json(
                self._http,
                "POST",
                self._url,
                limit=MAX_ANSWER_BYTES,
                data={"token": token, "token_type_hint": "access_token"},
                auth=self._auth,
                headers={"Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise IssuerUnavailableError(
                f"the introspection endpoint could not be reached ({type(exc).__name__})"
            ) from None
        if reply.status in (401, 403):
            raise IssuerUnavailableError(
                "the introspection endpoint refused askback's client credentials: check ASKBACK_AUTH_CLIENT_ID "
                "and ASKBACK_AUTH_CLIENT_SECRET"
            )
        if reply.status != 200:
            raise IssuerUnavailableError(f"the introspection endpoint answered HTTP {reply.status}")
        if reply.kind == "too_big":
            raise IssuerUnavailableError(f"the introspection endpoint answered more than {MAX_ANSWER_BYTES} bytes")
        if not isinstance(reply.document, dict):
            raise IssuerUnavailableError("the introspection endpoint did not answer a JSON object")
        return reply.document
