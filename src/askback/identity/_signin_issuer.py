"""The issuer people sign in at, as the sign-in reaches it: its metadata and signing keys, read on the first sign-in
(an issuer down at start-up is a page saying so, not a server that does not start) and asked again at most once per
`DISCOVERY_INTERVAL` while it cannot be read, and its token endpoint, where a code is redeemed for an ID token."""

from __future__ import annotations

import anyio
import httpx
from pydantic import SecretStr

from askback.clock import Clock
from askback.errors import IssuerUnavailableError
from askback.identity._discovery import IssuerMetadata, discover
from askback.identity._holdback import HoldBack
from askback.identity._keys import KeyCache
from askback.identity._token_endpoint import TokenEndpoint

__all__ = ["DISCOVERY_INTERVAL", "SignInIssuer"]

# While the issuer's metadata cannot be read, it is asked again at most once per this many seconds, whoever visits.
DISCOVERY_INTERVAL = 30.0
_TIMEOUT = 10.0


class SignInIssuer:
    """`issuer`, reached with `http` (a client of its own when `None`, closed by `close`) as the client `client_id`."""

    def __init__(
        self, issuer: str, *, client_id: str, client_secret: SecretStr, clock: Clock, http: httpx.AsyncClient | None
    ) -> None:
        self.issuer = issuer
        self._client_id = client_id
        self._client_secret = client_secret
        self._clock = clock
        self._http = http
        self._own_http: httpx.AsyncClient | None = None
        self._metadata: IssuerMetadata | None = None
        self._keys: KeyCache | None = None
        self._token_endpoint: TokenEndpoint | None = None
        self._hold = HoldBack(clock, DISCOVERY_INTERVAL)
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"SignInIssuer({self.issuer!r})"

    def _client(self) -> httpx.AsyncClient:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            self._own_http = httpx.AsyncClient(timeout=_TIMEOUT, follow_redirects=False)
        return self._own_http

    async def metadata(self) -> tuple[IssuerMetadata, KeyCache]:
        """The issuer's metadata and keys; `IssuerUnavailableError` (with when to try again) when they cannot be
        read, or name no authorization or token endpoint."""
        async with self._lock:
            if self._metadata is None or self._keys is None:
                if not self._hold.allows():
                    raise IssuerUnavailableError(
                        f"the issuer {self.issuer} could not be read just now; askback asks it again shortly",
                        retry_after=self._hold.retry_after(),
                    )
                self._hold.tried()
                metadata = await discover(self._client(), self.issuer)
                if metadata.authorization_endpoint is None or metadata.token_endpoint is None:
                    raise IssuerUnavailableError(
                        f"the issuer {self.issuer} names no authorization or token endpoint, so people cannot sign "
                        "in there"
                    )
                self._metadata = metadata
                self._keys = KeyCache(self._client(), metadata.jwks_uri, clock=self._clock)
                self._token_endpoint = TokenEndpoint(
                    metadata.token_endpoint,
                    client_id=self._client_id,
                    client_secret=self._client_secret,
                    clock=self._clock,
                    interval=DISCOVERY_INTERVAL,
                )
            return self._metadata, self._keys

    async def redeem(self, form: dict[str, str]) -> str:
        """The ID token the token endpoint gives for the authorization code `form` (`TokenEndpoint.redeem`), once
        `metadata` has been read."""
        assert self._token_endpoint is not None
        return await self._token_endpoint.redeem(self._client(), form)

    async def close(self) -> None:
        """Close the HTTP client of its own, if it made one (the metadata is read again with the next)."""
        if self._own_http is not None:
            await self._own_http.aclose()
            self._own_http = None
            self._metadata = self._keys = None
