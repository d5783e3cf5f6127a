"""The issuer's signing keys (its JWKS), cached, and refetched only as often as the issuer can bear.

A token names its key by `kid`. A known `kid` is answered from the cache. An unknown one may mean the issuer has
rotated its key, so the set is fetched again, but at most once per `min_interval` whoever asks: a flood of tokens
with made-up `kid`s costs the issuer one fetch per interval, and callers that arrive during a fetch wait for that
one fetch (one lock) rather than starting their own. When a refetch is held back, an unknown `kid` is simply not a
key of this issuer (`InvalidTokenError`), never "the issuer is unavailable". A set older than `max_age` is refreshed
on the next use, so a key the issuer stopped publishing stops being trusted; a refresh that fails keeps the set
already held. Only when no set has ever been read is a failed fetch an `IssuerUnavailableError`.

Symmetric (`oct`) keys and encryption keys in a JWKS are ignored: a token is checked against public signing keys
only.
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any

import httpx
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, JWKRegistry, Key, KeySet, OKPKey, RSAKey

from askback.clock import Clock
from askback.errors import InvalidTokenError, IssuerUnavailableError
from askback.identity._holdback import HoldBack
from askback.web.oauth_metadata import read_json

__all__ = ["KeyCache", "PublicKey", "parse_jwks"]

logger = logging.getLogger("askback.identity")

PublicKey = RSAKey | ECKey | OKPKey

# How long a fetched set is trusted before it is read again, whatever the tokens say.
MAX_AGE = 600.0
# A JWKS holds a few keys of a few kilobytes; a body past this is not read further.
MAX_JWKS_BYTES = 256 * 1024


def parse_jwks(document: Any) -> KeySet | None:
    """The public signing keys of a JWKS document; `None` when it is not one or holds none."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        return None
    keys: list[Key] = []
    for data in document["keys"]:
        if not isinstance(data, dict) or data.get("kty") == "oct" or data.get("use", "sig") != "sig":
            continue
        try:
            key = JWKRegistry.import_key(data)
        except (JoseError, ValueError, TypeError):
            continue
        if isinstance(key, (RSAKey, ECKey, OKPKey)):
            keys.append(key)
    return KeySet(keys) if keys else None


class KeyCache:
    """The signing keys published at `jwks_uri` (see the module's docstring). `fetches` counts the fetches tried."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        jwks_uri: str,
        *,
        clock: Clock,
        min_interval: float = 30.0,
        max_age: float = MAX_AGE,
    ) -> None:
        self._http = http
        self._jwks_uri = jwks_uri
        self._clock = clock
        self._min_interval = min_interval
        self._max_age = max_age
        self._keys: KeySet | None = None
        self._fetched_at: float | None = None  # the last fetch that succeeded
        self._hold = HoldBack(clock, min_interval)  # every fetch tried, whatever came of it
        self._lock = asyncio.Lock()
        self.fetches = 0

    @property
    def loaded(self) -> bool:
        return self._keys is not None

    async def load(self) -> None:
        """Read the set now unless one is held; raises `IssuerUnavailableError` when none can be read."""
        async with self._lock:
            if self._keys is None:
                await self._fetch_or_hold()

    async def key_for(self, kid: str | None) -> PublicKey:
        """The issuer's public key named `kid` (the only key, when `kid` is `None` and there is one). Raises
        `InvalidTokenError` when the issuer does not publish it, `IssuerUnavailableError` when no set can be read."""
        if self._keys is not None and not self._stale():
            key = self._find(kid)
            if key is not None:
                return key
        async with self._lock:
            if self._keys is None:
                await self._fetch_or_hold()
            elif self._stale():
                await self._refresh()
            key = self._find(kid)
            if key is None and self._may_fetch():
                await self._fetch_or_hold()
                key = self._find(kid)
        if key is None:
            raise InvalidTokenError("the token is signed with an unknown signing key")
        return key

    def _find(self, kid: str | None) -> PublicKey | None:
        keys = self._keys
        if keys is None:
            return None
        if kid is None:
            return keys.keys[0] if len(keys.keys) == 1 else None  # type: ignore[return-value]
        for key in keys:
            if key.kid == kid:
                return key  # type: ignore[return-value]
        return None

    def _stale(self) -> bool:
        return self._fetched_at is not None and self._clock.now() - self._fetched_at >= self._max_age

    def _may_fetch(self) -> bool:
        return self._hold.allows()

    async def _refresh(self) -> None:
        """Read a stale set again, keeping the one held when that fails."""
        if not self._may_fetch():
            return
        try:
            await self._fetch()
        except IssuerUnavailableError as exc:
            logger.warning("the issuer's signing keys could not be refreshed; the keys held are kept: %s", exc)

    async def _fetch_or_hold(self) -> None:
        if not self._may_fetch():
            if self._keys is None:
                raise IssuerUnavailableError(
                    "the issuer's signing keys could not be read; askback tries again shortly",
                    retry_after=self._hold.retry_after(),
                )
            return
        await self._fetch()

    async def _fetch(self) -> None:
        self._hold.tried()
        self.fetches += 1
        try:
            answer = await read_json(
                self._http, "GET", self._jwks_uri, limit=MAX_JWKS_BYTES, headers={"Accept": "application/json"}
            )
        except httpx.HTTPError as exc:
            raise IssuerUnavailableError(
                f"the issuer's signing keys could not be fetched ({type(exc).__name__}); is the issuer up?",
                retry_after=max(1, math.ceil(self._min_interval)),
            ) from None
        if answer.status != 200:
            raise IssuerUnavailableError(
                f"the issuer's signing keys could not be fetched (HTTP {answer.status})",
                retry_after=max(1, math.ceil(self._min_interval)),
            )
        if answer.kind == "too_big":
            raise IssuerUnavailableError(
                f"the issuer's JWKS is larger than {MAX_JWKS_BYTES} bytes; askback does not read it",
                retry_after=max(1, math.ceil(self._min_interval)),
            )
        document = answer.document
        keys = parse_jwks(document)
        if keys is None:
            raise IssuerUnavailableError(
                "the issuer's JWKS holds no public signing key askback can use",
                retry_after=max(1, math.ceil(self._min_interval)),
            )
        self._keys = keys
        self._fetched_at = self._clock.now()
