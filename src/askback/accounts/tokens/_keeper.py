"""`TokenKeeper`: exchange, use, refresh (once for everyone), revoke. It runs the decision of `_policy` and does
the I/O around it: the in-process lock, the claim and writes of `_rows`, and the calls to the provider."""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from askback.accounts.connections import (
    ApiKeyConnection,
    Connection,
    Connections,
    FormRequest,
    OAuthConnection,
    TokenTypeHint,
    key_check_request,
    refresh_request,
    revocation_request,
    token_request,
)
from askback.accounts.repository import Account, Accounts
from askback.accounts.status import Event, Status, transition
from askback.accounts.tokens._auth import AccountAuth
from askback.accounts.tokens._policy import (
    PROVIDER_TIMEOUT,
    Backoff,
    Held,
    Lapse,
    Refresh,
    RefuseToken,
    TokenSet,
    Use,
    decide,
    judge_token_response,
)
from askback.accounts.tokens._rows import Claim, TokenRows
from askback.accounts.vault import Vault
from askback.clock import Clock
from askback.errors import AccountStateError, AskbackError, ConfigurationError, ProviderError

logger = logging.getLogger("askback.accounts")


class TokenKeeper:
    """The tokens of connected accounts: exchange, use, refresh (once for everyone), revoke.

    `leeway`: a token that expires within this many seconds (by `clock`) is refreshed before it is handed out.
    `http`: the client to reach providers with (one of the keeper's own, closed by `aclose`, when not given).
    `backoff`: how long an account in ERROR waits, after each failed refresh, before its provider is asked again.
    `provider_timeout`: the longest one request to a provider may take (real time), connecting included.
    `lease`: how long a refresh claim holds (by `clock`) before a claim whose holder died may be taken over; twice
    `provider_timeout` by default. `poll`: how often (real time) a caller waiting on another instance's claim looks
    whether it has ended."""

    def __init__(
        self,
        accounts: Accounts,
        vault: Vault,
        connections: Connections,
        *,
        clock: Clock,
        leeway: float = 60.0,
        http: httpx.AsyncClient | None = None,
        backoff: Backoff = Backoff(),
        provider_timeout: float = PROVIDER_TIMEOUT,
        lease: float | None = None,
        poll: float = 0.05,
    ) -> None:
        self.accounts = accounts
        self.vault = vault
        self.connections = connections
        self.clock = clock
        self.leeway = leeway
        self.backoff = backoff
        self.provider_timeout = provider_timeout
        self.lease = 2 * provider_timeout if lease is None else lease
        self.poll = poll
        self._http = http
        self._own_http: httpx.AsyncClient | None = None
        self._locks = _Locks()
        self._rows = TokenRows(accounts, vault, clock)

    def __repr__(self) -> str:
        return f"TokenKeeper(connections={list(self.connections.names())!r}, leeway={self.leeway})"

    async def aclose(self) -> None:
        """Close the HTTP client the keeper made for itself (not one it was given)."""
        if self._own_http is not None:
            await self._own_http.aclose()
            self._own_http = None

    # -- connecting --

    async def exchange(
        self, connection: OAuthConnection, *, code: str, redirect_uri: str, code_verifier: str
    ) -> TokenSet:
        """Trade an authorization code (with its PKCE verifier, to the exact redirect URI) for tokens. A code the
        provider refuses (used, expired, another client's) is `ProviderError` 'rejected' with the OAuth error code;
        a provider that cannot be reached or answers nonsense is 'unreachable'."""
        request = token_request(connection, code=code, redirect_uri=redirect_uri, code_verifier=code_verifier)
        now = self.clock.now()
        body = await self._token_call(request, connection, doing="exchange the authorization code")
        logger.info("authorization code exchanged", extra={"connection": connection.name})
        return TokenSet.from_response(body, now=now)

    async def check_key(self, connection: ApiKeyConnection, key: str) -> None:
        """Check an API key with the connection's validation request, when it has one: another status than the
        expected one is `ProviderError` 'rejected' (a 5xx: 'unreachable', the provider's fault, not the key's);
        a provider that cannot be reached is 'unreachable'."""
        if connection.validation is None:
            return
        method, url, headers = key_check_request(connection, key)
        try:
            with anyio.fail_after(self.provider_timeout):
                response = await self._client().request(method, url, headers=headers)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise ProviderError(
                f"{connection.label} could not be checked: the provider of {connection.name!r} could not be reached "
                f"({type(exc).__name__}). Try again later.",
                reason="unreachable",
            ) from exc
        expected = connection.validation.expected_status
        if response.status_code == expected:
            return
        reason = "unreachable" if response.status_code >= 500 else "rejected"
        raise ProviderError(
            f"The provider of {connection.name!r} answered HTTP {response.status_code} (not {expected}) to the "
            f"{connection.label} check"
            + (": it is having trouble; try again later." if reason == "unreachable" else ": the key is not valid."),
            reason=reason,
        )

    # -- using --

    async def token(self, account: Account) -> TokenSet:
        """The account's current tokens from the vault, refreshed first when they expire within `leeway` seconds (or
        when the account is in ERROR and its backoff has passed: a refresh may bring it back; before that,
        `ProviderError` 'unreachable' saying when). An account in another status than ACTIVE or ERROR is
        `AccountStateError`. For an API key account: the key as `access_token`, never refreshed."""
        return (await self._usable(account))[1]

    async def refresh(self, account: Account, *, force: bool = False) -> TokenSet:
        """Refresh the account's tokens, once for every caller at the same time in any process: whoever comes second
        gets what the first stored. Without `force` only tokens that expire within `leeway` are refreshed (what
        `token` does); with it, unless the access token changed since this call began. `invalid_grant` turns the
        account EXPIRED and a provider that cannot be reached turns it ERROR, each then raised as `ProviderError`."""
        connection = self.connections[account.connection]
        seen = await self._rows.read(account.id, connection, join=False)
        return (await self._refresh(account, connection, seen=seen, force=force))[1]

    async def recover(self, account: Account) -> Account:
        """Try an account in ERROR again, as the next call that needs its token would: a refresh (once its backoff
        has passed) that works brings it back to ACTIVE, and the provider's refusal of the grant (`invalid_grant`)
        turns it EXPIRED; either way the account is returned as it then is. A provider that still cannot be reached,
        or whose backoff has not passed, is `ProviderError` 'unreachable' (the account stays ERROR): the person is
        not asked to connect again for an outage. An account with no credential to try (its authorization failed)
        and an account in another status are returned as they are."""
        if account.status is not Status.ERROR:
            return account
        try:
            await self._usable(account)
        except AccountStateError:
            pass  # nothing to refresh with: connecting again is the only way back
        except ProviderError as exc:
            if exc.reason != "rejected":
                raise
        return await self.accounts.get(account.id) or account

    def auth(self, account: Account) -> httpx.Auth:
        """An `httpx.Auth` (for an `httpx.AsyncClient`) that puts the account's credential on each request when it is
        sent (`Authorization: <type> <token>`, or the API key's header) and, when the answer is 401, refreshes once
        (forced) and sends the request once more. A second 401 is the caller's answer."""
        connection = self.connections[account.connection]
        if isinstance(connection, ApiKeyConnection) and connection.header is None:
            raise ConfigurationError(
                f"Connection {connection.name!r} names no header for its key, so requests cannot carry it: set "
                "header (and scheme) on the connection, or take the key with `await account.token()`."
            )
        return AccountAuth(
            account,
            connection,
            usable=self._usable,
            refreshed=lambda seen: self._refresh(account, connection, seen=seen, force=True),
        )

    # -- disconnecting --

    async def revoke(self, account: Account) -> None:
        """Revoke the grant at the provider (RFC 7009; the refresh token, which revokes the grant, and the access
        token only when there is no refresh token or its revocation was not accepted), when the connection has a
        revocation endpoint; then turn the account REVOKED, which deletes the credential. A provider that cannot be
        reached is logged and the credential deleted all the same. Takes the account's refresh claim (waiting for a
        refresh under way to end), so that no refresh stores new tokens behind it."""
        connection = self.connections[account.connection]
        async with self._locks.hold(account.id):
            while True:
                held = await self._rows.read(account.id, connection, join=False)
                if held is None:
                    raise AccountStateError(f"There is no connected account {account.id!r}.")
                transition(held.status, Event.REVOKED)  # refused before anything is sent
                if held.claimed(self.clock.now()):
                    await self._await_claim(held)
                    continue
                with anyio.CancelScope(shield=True):
                    async with self._rows.claim(account.id, held, lease=self.lease) as claim:
                        if claim is None:
                            continue  # someone was quicker: look again
                        if isinstance(connection, OAuthConnection) and held.tokens is not None:
                            await self._revoke_at_provider(account, connection, held.tokens)
                        if await self._rows.write(claim, held, Event.REVOKED) is not None:
                            break
        logger.info("connected account revoked", extra={"account_id": account.id, "connection": account.connection})

    # -- internals --

    def _client(self) -> httpx.AsyncClient:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            self._own_http = httpx.AsyncClient(timeout=self.provider_timeout, follow_redirects=False)
        return self._own_http

    async def _usable(self, account: Account) -> tuple[Held, TokenSet]:
        """The tokens to use, and the account as it was when they were current (what a later forced refresh compares
        against)."""
        connection = self.connections[account.connection]
        held = await self._rows.read(account.id, connection)
        step = decide(account.id, held, seen=None, now=self.clock.now(), leeway=self.leeway, force=False)
        if isinstance(step, Use):
            assert held is not None
            return held, step.tokens
        if isinstance(step, RefuseToken):
            raise step.error
        return await self._refresh(account, connection, seen=held, force=False)

    async def _refresh(
        self, account: Account, connection: Connection, *, seen: Held | None, force: bool
    ) -> tuple[Held, TokenSet]:
        outcome: Held | AskbackError | None = None
        async with self._locks.hold(account.id):
            while outcome is None:
                # Another coroutine or instance may have refreshed while this one waited: a plain read tells.
                held = await self._rows.read(account.id, connection, join=False)
                now = self.clock.now()
                step = decide(account.id, held, seen=seen, now=now, leeway=self.leeway, force=force)
                if isinstance(step, Use | RefuseToken):
                    outcome = _settled(held, step)
                    break
                assert held is not None
                if isinstance(step, Lapse):
                    outcome = await self._lapse(account, held)
                elif held.claimed(now):
                    await self._await_claim(held)
                else:
                    # The hazard: once the provider has rotated the refresh token, the only copy of the new one is
                    # in this task until it is written; a cancelled caller must not take it down with it.
                    with anyio.CancelScope(shield=True):
                        async with self._rows.claim(account.id, held, lease=self.lease) as claim:
                            if claim is not None:
                                assert isinstance(connection, OAuthConnection)
                                outcome = await self._refresh_claimed(claim, account, connection, held, step)
                # `None`: someone else was quicker, or the account changed meanwhile (a reconnect): look again.
        if isinstance(outcome, AskbackError):
            raise outcome
        assert outcome.tokens is not None
        return outcome, outcome.tokens

    async def _refresh_claimed(
        self, claim: Claim, account: Account, connection: OAuthConnection, held: Held, step: Refresh
    ) -> Held | AskbackError | None:
        """Ask the provider for new tokens, holding the claim and no transaction, then write what it answered. `None`
        when nothing could be written because the account changed meanwhile."""
        assert step.tokens.refresh_token is not None
        now = self.clock.now()
        try:
            body = await self._token_call(
                refresh_request(connection, step.tokens.refresh_token),
                connection,
                doing=f"refresh connected account {account.id!r}",
            )
        except ProviderError as exc:
            return await self._refresh_failed(claim, account, held, exc)
        fresh = TokenSet.from_response(body, now=now, previous=step.tokens)
        sealed = self.vault.seal(account.id, fresh.to_vault())
        version = await self._rows.write(
            claim, held, Event.REFRESHED, credential=sealed, expires_at=fresh.expires_at, failures=0, retry_at=None
        )
        if version is None:
            return None
        logger.info("connected account refreshed", extra={"account_id": account.id, "connection": account.connection})
        return Held(Status.ACTIVE, None, fresh, version, sealed=sealed)

    async def _refresh_failed(
        self, claim: Claim, account: Account, before: Held, exc: ProviderError
    ) -> ProviderError | None:
        failures, retry_at = 0, None
        if exc.reason == "rejected" and exc.error == "invalid_grant":
            event = Event.REJECTED
            reason = "the provider refused the refresh token (invalid_grant): the grant was revoked or has expired"
            error = ProviderError(
                f"Connected account {account.id!r} is now EXPIRED: {reason}. The person must connect it again.",
                reason="rejected",
                error=exc.error,
            )
        else:
            # Any other failure (an outage, a 5xx or 429, a body that is not OAuth, a timeout, even invalid_client) is
            # not the person's grant failing: a later attempt or a fixed configuration may work, so the account is
            # ERROR, not EXPIRED, and the provider is left alone for a while.
            event = Event.UNREACHABLE
            reason = str(exc)
            failures = (before.failures if before.status is Status.ERROR else 0) + 1
            wait = self.backoff.delay(failures)
            retry_at = self.clock.now() + wait
            error = ProviderError(
                f"Connected account {account.id!r} could not be refreshed: {reason} The account is ERROR until a "
                f"refresh succeeds; its provider is tried again in {math.ceil(wait)} s, by the first call that needs "
                "it.",
                reason="unreachable",
                error=exc.error,
                retry_at=retry_at,
            )
        written = await self._rows.write(
            claim, before, event, reason=reason, failures=failures, retry_at=retry_at, needs_claim=True
        )
        if written is None:
            return None
        logger.warning(
            "connected account refresh failed",
            extra={"account_id": account.id, "connection": account.connection, "error": exc.error, "event": event},
        )
        return error

    async def _lapse(self, account: Account, held: Held) -> ProviderError | None:
        reason = "the access token expired and the provider issued no refresh token"
        if await self._rows.write(None, held, Event.REJECTED, reason=reason, account_id=account.id) is None:
            return None
        return ProviderError(
            f"Connected account {account.id!r} can no longer be used: {reason}. It is now EXPIRED; the person must "
            "connect it again.",
            reason="rejected",
        )

    async def _await_claim(self, held: Held) -> None:
        """Wait on a refresh claim another instance (or another keeper of this process) holds, never on the
        database: until it may have ended (looked at again every `poll` seconds) or until it expires by the clock,
        when its holder is presumed dead and the claim may be taken over."""
        assert held.claimed_until is not None
        with anyio.move_on_after(self.poll):
            await self.clock.sleep_until(held.claimed_until)

    async def _token_call(self, request: FormRequest, connection: OAuthConnection, *, doing: str) -> dict[str, Any]:
        try:
            with anyio.fail_after(self.provider_timeout):
                response = await self._client().post(request.url, headers=request.headers, data=request.form)
        except (httpx.HTTPError, TimeoutError) as exc:
            raise ProviderError(
                f"The provider of {connection.name!r} could not be reached to {doing} ({type(exc).__name__}). Try "
                "again later; if it persists, check the connection's token_url.",
                reason="unreachable",
            ) from exc
        return judge_token_response(response.status_code, response.content, provider=connection.name, doing=doing)

    async def _revoke_at_provider(self, account: Account, connection: OAuthConnection, tokens: TokenSet) -> None:
        if connection.revocation_url is None:
            return
        candidates: list[tuple[str, TokenTypeHint]] = []
        if tokens.refresh_token:
            candidates.append((tokens.refresh_token, "refresh_token"))
        candidates.append((tokens.access_token, "access_token"))
        for token, hint in candidates:
            request = revocation_request(connection, token, hint)
            try:
                with anyio.fail_after(self.provider_timeout):
                    response = await self._client().post(request.url, headers=request.headers, data=request.form)
            except (httpx.HTTPError, TimeoutError) as exc:
                logger.warning(
                    "the provider could not be reached to revoke a connected account's grant; its credential is "
                    "deleted all the same",
                    extra={"account_id": account.id, "connection": connection.name, "cause": type(exc).__name__},
                )
                return
            if response.status_code == 200:
                return  # RFC 7009 §2.1: revoking the refresh token revokes the grant's access tokens too
            logger.warning(
                "the provider did not accept a revocation",
                extra={"account_id": account.id, "connection": connection.name, "status": response.status_code},
            )


def _settled(held: Held | None, step: Use | RefuseToken) -> Held | AskbackError:
    if isinstance(step, RefuseToken):
        return step.error
    assert held is not None
    return held


class _Locks:
    """One `anyio.Lock` per key, kept only while someone holds or waits for it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, list[int]]] = {}

    @asynccontextmanager
    async def hold(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.setdefault(key, (anyio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                del self._locks[key]
