"""Redeeming a sign-in's code at the issuer's token endpoint, held back while the endpoint fails.

Anyone can bring a made-up code to the sign-in's callback, and each would make askback post its client secret to the
token endpoint. While that endpoint fails (unreachable, 5xx, not JSON), asking it once per callback would turn a
flood of callbacks into a flood of requests to the issuer. So once it has failed, it is asked again at most once per
`interval` (a `HoldBack`), and callbacks meanwhile are an `IssuerUnavailableError` with the time left, without a
request. A working endpoint is asked for every callback. An answer refusing the code (400/401 with an OAuth `error`)
is the endpoint working, and an `InvalidTokenError`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
from pydantic import SecretStr

from askback.clock import Clock
from askback.errors import InvalidTokenError, IssuerUnavailableError
from askback.identity._holdback import HoldBack
from askback.web.oauth_metadata import read_json

# A token endpoint's answer holds a few tokens; a body past this is not read further.
MAX_ANSWER_BYTES = 256 * 1024

__all__ = ["TokenEndpoint"]


class TokenEndpoint:
    """The token endpoint at `url`, asked as the client `client_id` (see the module's docstring)."""

    def __init__(self, url: str, *, client_id: str, client_secret: SecretStr, clock: Clock, interval: float) -> None:
        self.url = url
        self._client_id = client_id
        self._client_secret = client_secret
        self._hold = HoldBack(clock, interval)
        self._failing = False

    async def redeem(self, http: httpx.AsyncClient, form: dict[str, str]) -> str:
        """The ID token the endpoint gives for the authorization code `form`; raises `InvalidTokenError` when it
        refuses it and `IssuerUnavailableError` when it fails or is held back."""
        if self._failing:
            if not self._hold.allows():
                raise IssuerUnavailableError(
                    "the issuer's token endpoint failed just now; askback asks it again shortly",
                    retry_after=self._hold.retry_after(),
                )
            # The one try of this interval, counted before the request so that a concurrent burst makes one.
            self._hold.tried()
        try:
            id_token = await self._post(http, form)
        except IssuerUnavailableError as exc:
            if not self._failing:
                self._hold.tried()
                self._failing = True
            exc.retry_after = self._hold.retry_after()
            raise
        except InvalidTokenError:
            self._failing = False
            raise
        self._failing = False
        return id_token

    async def _post(self, http: httpx.AsyncClient, form: dict[str, str]) -> str:
        # client_secret_basic: each part form-encoded before it is joined (RFC 6749 section 2.3.1).
        auth = httpx.BasicAuth(quote(self._client_id, safe=""), quote(self._client_secret.get_secret_value(), safe=""))
        try:
            reply = await read_json(
                http,
                "POST",
                self.url,
                limit=MAX_ANSWER_BYTES,
                data=form,
                auth=auth,
                headers={"Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise IssuerUnavailableError(
                f"the issuer's token endpoint could not be reached ({type(exc).__name__})"
            ) from None
        body: Any = reply.document
        if reply.status in (400, 401) and isinstance(body, dict) and isinstance(body.get("error"), str):
            raise InvalidTokenError("the issuer refused the sign-in's code")
        if reply.status != 200 or not isinstance(body, dict):
            raise IssuerUnavailableError(f"the issuer's token endpoint answered HTTP {reply.status}")
        id_token = body.get("id_token")
        if not isinstance(id_token, str) or not id_token:
            raise InvalidTokenError("the issuer gave no ID token (is the scope openid allowed for this client?)")
        return id_token
