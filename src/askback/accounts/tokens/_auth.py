"""Using an account over HTTP: `ConnectedAccount`, the handle a tool handler gets, whose `http` client puts the
credential on each request itself (an `httpx.Auth` that refreshes once on a 401), only for the connection's
origins, so the token is never handed to the caller."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from typing import Protocol

import httpx

from askback.accounts.connections import (
    ApiKeyConnection,
    Connection,
    api_key_headers,
    origin,
)
from askback.accounts.repository import Account
from askback.accounts.status import Status
from askback.accounts.tokens._policy import Held, TokenSet
from askback.errors import CredentialOriginError

__all__ = ["AccountAuth", "ConnectedAccount", "Keeper"]


class Keeper(Protocol):
    """What a connected account asks of the keeper of its tokens (a `TokenKeeper`)."""

    def auth(self, account: Account) -> httpx.Auth: ...

    async def token(self, account: Account) -> TokenSet: ...


def _authorization(connection: Connection, tokens: TokenSet) -> dict[str, str]:
    if isinstance(connection, ApiKeyConnection):
        return api_key_headers(connection, tokens.access_token)
    # RFC 6750's scheme is case-insensitive, but some resource servers compare it exactly; providers answer "bearer".
    scheme = "Bearer" if tokens.token_type.lower() == "bearer" else tokens.token_type
    return {"Authorization": f"{scheme} {tokens.access_token}"}


def _origin_refusal(connection: Connection, url: httpx.URL) -> str | None:
    """Why the credential of `connection` may not go to `url`, or `None` when it may: only to one of the origins the
    connection declares (scheme, host and port, compared normalised), and nowhere when it declares none."""
    try:
        target = origin(url)
    except ValueError:
        target = "a URL without a scheme and host"
    if target in connection.origins:
        return None
    name = connection.name
    if not connection.origins:
        return (
            f"Nothing was sent to {target}: connection {name!r} declares no origins, so its credential is sent nowhere. "
            f'Name the origins of the API it is for: origins = ["https://api.example.com"] in [connections.{name}] of '
            "the connections file, or origins=(...) on the connection in Python."
        )
    return (
        f"Nothing was sent to {target}: the credential of connection {name!r} is for {', '.join(connection.origins)} "
        "only, and every request through the account's `http` client carries it. Fetch other URLs with a client of "
        "your own (httpx.AsyncClient()), which carries no credential; if the API really is at that origin, add it to "
        "the connection's origins."
    )


class AccountAuth(httpx.Auth):
    """`TokenKeeper.auth`: the credential is read (and refreshed) when each request is sent, and goes nowhere but
    into that request's headers, and only for a request to one of the connection's origins: any other request is
    refused (`CredentialOriginError`) before anything is read or sent. `usable` reads the tokens to use (and the
    account as it was when they were current); `refreshed` refreshes them, forced, unless the account moved on from
    what it was given."""

    # Read the body first, so that the request can be sent a second time after a refresh.
    requires_request_body = True

    def __init__(
        self,
        account: Account,
        connection: Connection,
        *,
        usable: Callable[[Account], Awaitable[tuple[Held, TokenSet]]],
        refreshed: Callable[[Held], Awaitable[tuple[Held, TokenSet]]],
    ) -> None:
        self._usable = usable
        self._refreshed = refreshed
        self._account = account
        self._connection = connection
        if isinstance(connection, ApiKeyConnection):
            self._headers: tuple[str, ...] = () if connection.header is None else (connection.header,)
        else:
            self._headers = ("Authorization",)

    async def guard_hop(self, request: httpx.Request) -> None:
        """A request hook of the account's client, run by httpx for every request it sends, each redirect it follows
        included: one to an origin the credential is not for loses the credential's header. (httpx drops only
        `Authorization`, and keeps it on an http to https redirect; an API key's own header would follow a redirect
        anywhere.)"""
        if _origin_refusal(self._connection, request.url) is not None:
            for name in self._headers:
                request.headers.pop(name, None)

    def __repr__(self) -> str:
        return f"<auth for connected account {self._account.id!r} ({self._account.connection})>"

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("A connected account's auth reads the vault asynchronously: use it with httpx.AsyncClient.")
        yield request  # pragma: no cover (makes this a generator)

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        account, connection = self._account, self._connection
        if (refusal := _origin_refusal(connection, request.url)) is not None:
            # Refused, not sent bare: a request that quietly lost its credential would fail later, and less clearly.
            raise CredentialOriginError(refusal)
        held, tokens = await self._usable(account)
        request.headers.update(_authorization(connection, tokens))
        response = yield request
        if response.status_code != 401 or isinstance(connection, ApiKeyConnection) or tokens.refresh_token is None:
            return
        _, fresh = await self._refreshed(held)
        if fresh.access_token == tokens.access_token:
            return
        request.headers.update(_authorization(connection, fresh))
        yield request


class ConnectedAccount:
    """A connected account as a tool handler gets it: which account it is, and an HTTP client that uses its
    credential without showing it.

    ```python
    github = await flow.connect("github")
    response = await github.http.get("https://api.github.com/user")
    ```

    `http` puts the credential on each request, refreshes it before it expires and once after a 401. It sends only
    to the connection's `origins`: a request to any other origin raises `CredentialOriginError` and is not sent, and a
    redirect to another origin is followed without the credential. Close it with `await account.aclose()` (or use
    `async with account:`). `token()` is the escape hatch for a library that must be
    given the token itself (an SDK with its own HTTP client): the token then leaves askback's hands, so prefer `http`.
    """

    def __init__(self, account: Account, keeper: Keeper) -> None:
        self._account = account
        self._keeper = keeper
        self._http: httpx.AsyncClient | None = None

    @property
    def id(self) -> str:
        return self._account.id

    @property
    def connection(self) -> str:
        """The connection's name."""
        return self._account.connection

    @property
    def label(self) -> str:
        return self._account.label

    @property
    def status(self) -> Status:
        """The status when the account was handed over."""
        return self._account.status

    @property
    def http(self) -> httpx.AsyncClient:
        """An `httpx.AsyncClient` whose requests carry the account's credential, to the connection's origins only (made
        on first use)."""
        if self._http is None:
            auth = self._keeper.auth(self._account)
            hooks = [auth.guard_hop] if isinstance(auth, AccountAuth) else []
            self._http = httpx.AsyncClient(auth=auth, event_hooks={"request": hooks})
        return self._http

    async def token(self) -> str:
        """The escape hatch: the current access token (refreshed first if it is about to expire), or the API key.
        Whatever it is given to can then use the account without askback; prefer `http`."""
        return (await self._keeper.token(self._account)).access_token

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def __aenter__(self) -> ConnectedAccount:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return (
            f"ConnectedAccount(id={self.id!r}, connection={self.connection!r}, label={self.label!r}, "
            f"status={self.status.value!r})"
        )
