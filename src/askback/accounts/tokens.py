"""Tokens: exchanging an authorization code, refreshing before expiry (single-flight across coroutines, processes
and instances), revoking, and using an account over HTTP without ever handing its token to the caller.

`TokenKeeper` is what the service, the hosted pages and tool handlers call; a handler gets a `ConnectedAccount`,
whose `http` client adds the credential to each request itself. Whether to use, refresh or give up on the credential
the database holds is one pure function, `decide`; the keeper does the I/O around it.

Refreshing once. A provider that rotates refresh tokens (oidc-provider, Google, Microsoft...) accepts each one
once: a second refresh with the same token is `invalid_grant`, and reuse detection then revokes the whole grant. So
of all the callers that find an account's token expiring, in every process and instance, exactly one may call the
provider, and the others must take what it stored. Two locks, always taken in this order and released in reverse:

1. an `anyio.Lock` per account id in this keeper, so that one coroutine per process waits on the database;
2. `Store.locked("askback.accounts.refresh:<id>")`, a transaction holding a lock on that account in the database:
   PostgreSQL's `pg_advisory_xact_lock` (other accounts go on), SQLite's write lock taken at BEGIN IMMEDIATE.

Whoever holds both re-reads the account through the locked connection and decides again: if the account changed
since the caller first looked (its latest lifecycle event is not the one the caller saw) and now holds a fresh
token (or, forced, another token than the one the caller used), that is the answer and the provider is not called;
if the change was a failed attempt (ERROR), the caller shares that failure instead of trying again at once. Only
otherwise is the provider called, and its answer (the rotated tokens, sealed; or EXPIRED / ERROR with the reason)
is written through that same locked connection, and committed, before the locks are let go. The next holder
therefore always sees it: single-flight. (After the in-process lock a plain read comes first, so the callers that
queued in this process behind a refresh do not each take the database lock just to find it done.)

The status change is the one `Accounts.change` makes (the status table, the credential, a lifecycle event), written
with the account's status and stored credential as they were read under the lock as its condition: on PostgreSQL an
instance's `Accounts.change` (a reconnect) takes no advisory lock, and its change is then never overwritten.

It cannot deadlock. The in-process lock is only ever taken before the database one. While holding the database
lock the keeper does exactly three things: statements on the locked connection itself (never another transaction:
`Accounts.change` would open one, and on SQLite that write would wait for our own write lock, which is why the
status change is written here and not through `Accounts`), the provider request (bounded by `PROVIDER_TIMEOUT`), and
pure work (the vault, `decide`). It never waits for another account's lock or another connection. On SQLite every
other writer in every process waits for the refresh's one provider round trip (their busy timeout is 10 s, the
provider's time is bounded at 5 s); on PostgreSQL only that account's refreshers wait.

The provider request, the write and the commit run shielded from cancellation: a caller that goes away after the
provider rotated the refresh token must not drop the only copy of the new one.

Handing out a token that needs no refresh is one read of the account's row (status, sealed credential, version) and
one vault open; callers asking for one account at the same moment share the read.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import anyio.lowlevel
import httpx
import sqlalchemy as sa
from sqlalchemy import Table, bindparam, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from askback.accounts._models import AccountEventRow, AccountRow
from askback.accounts.connections import (
    ApiKeyConnection,
    Connection,
    Connections,
    FormRequest,
    OAuthConnection,
    TokenTypeHint,
    api_key_headers,
    key_check_request,
    refresh_request,
    revocation_request,
    token_request,
)
from askback.accounts.repository import KEEP, Account, Accounts, apply_change
from askback.accounts.status import Event, Status, transition
from askback.accounts.vault import Vault
from askback.clock import Clock
from askback.errors import AccountStateError, AskbackError, ConfigurationError, ProviderError

__all__ = [
    "PROVIDER_TIMEOUT",
    "ConnectedAccount",
    "Held",
    "Lapse",
    "Refresh",
    "Refuse",
    "TokenKeeper",
    "TokenSet",
    "Use",
    "decide",
    "judge_token_response",
]

logger = logging.getLogger("askback.accounts")

# The longest one request to a provider may take, connecting included. A refresh holds the account's database lock
# (on SQLite the database's write lock) for that long at most, so it stays well below SQLite's 10 s busy timeout.
PROVIDER_TIMEOUT = 5.0


@dataclass(frozen=True)
class TokenSet:
    """What a token endpoint answered, as kept in the vault (sealed as a whole)."""

    access_token: str = field(repr=False)
    token_type: str = "Bearer"
    refresh_token: str | None = field(default=None, repr=False)
    expires_at: float | None = None
    scope: str | None = None

    def to_vault(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": self.token_type,
            "refresh_token": self.refresh_token,
            "expires_at": self.expires_at,
            "scope": self.scope,
        }

    @classmethod
    def from_vault(cls, stored: dict[str, Any]) -> TokenSet:
        return cls(
            access_token=str(stored["access_token"]),
            token_type=str(stored.get("token_type") or "Bearer"),
            refresh_token=stored.get("refresh_token"),
            expires_at=stored.get("expires_at"),
            scope=stored.get("scope"),
        )

    @classmethod
    def from_response(cls, body: dict[str, Any], *, now: float, previous: TokenSet | None = None) -> TokenSet:
        """A token endpoint's JSON answer; a refresh answer without a new refresh token keeps the previous one."""
        expires_in = body.get("expires_in")
        return cls(
            access_token=str(body["access_token"]),
            token_type=str(body.get("token_type") or "Bearer"),
            refresh_token=body.get("refresh_token") or (previous.refresh_token if previous else None),
            expires_at=now + float(expires_in) if expires_in is not None else None,
            scope=body.get("scope") or (previous.scope if previous else None),
        )


# --- the decision (no I/O) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """What the database holds for an account at one moment, its credential opened. `version` is the id of the
    account's latest lifecycle event: every status change, and so every credential written, moves it on."""

    status: Status
    reason: str | None
    tokens: TokenSet | None
    version: int
    sealed: str | None = field(default=None, repr=False, compare=False)
    """The credential as stored (the vault's ciphertext): a change is written only over this very one."""


@dataclass(frozen=True)
class Use:
    """The held token is good: hand it out."""

    tokens: TokenSet
    kind: Literal["use"] = "use"


@dataclass(frozen=True)
class Refresh:
    """Call the provider with this refresh token (only while holding both locks)."""

    tokens: TokenSet
    kind: Literal["refresh"] = "refresh"


@dataclass(frozen=True)
class Lapse:
    """The access token has expired and there is no refresh token: the account is EXPIRED (only under the locks)."""

    kind: Literal["lapse"] = "lapse"


@dataclass(frozen=True)
class Refuse:
    """Nothing to hand out; raise `error`."""

    error: AskbackError
    kind: Literal["refuse"] = "refuse"


_USABLE = (Status.ACTIVE, Status.ERROR)


def decide(
    account_id: str, held: Held | None, *, seen: Held | None, now: float, leeway: float, force: bool
) -> Use | Refresh | Lapse | Refuse:
    """What to do with what the database `held` for an account, for a caller that first saw `seen` (`None` on the
    first look) at clock time `now`.

    A token expiring within `leeway` seconds is refreshed; so is one of an account in ERROR (a refresh is what brings
    it back). `force` (a resource answered 401) refreshes unless the held access token is no longer the one `seen`.
    When the account changed since `seen`, someone else acted while this caller waited for the lock: their fresh
    token is used, their failure (ERROR) shared, rather than calling the provider again."""
    if held is None:
        return Refuse(AccountStateError(f"There is no connected account {account_id!r}; connect the account first."))
    if held.status not in _USABLE or held.tokens is None:
        return Refuse(_not_usable(account_id, held))
    tokens = held.tokens
    if seen is not None and held.version != seen.version:
        if held.status is Status.ERROR:
            why = held.reason or "the provider could not be reached"
            return Refuse(
                ProviderError(
                    f"Connected account {account_id!r} could not be refreshed just now: {why}. Nothing was sent "
                    "again; try again in a moment.",
                    reason="unreachable",
                )
            )
        if force:
            if seen.tokens is None or tokens.access_token != seen.tokens.access_token:
                return Use(tokens)
        elif not _expired(tokens, now):
            # Someone refreshed (or reconnected) meanwhile: theirs is the newest token there is, even when it is
            # within the leeway already (a provider whose tokens live less than the leeway would otherwise be asked
            # once per waiting caller).
            return Use(tokens)
    elif not force and held.status is Status.ACTIVE and not _expiring(tokens, now, leeway):
        return Use(tokens)
    if tokens.refresh_token is None:
        return Lapse() if _expired(tokens, now) else Use(tokens)
    return Refresh(tokens)


def _expiring(tokens: TokenSet, now: float, leeway: float) -> bool:
    return tokens.expires_at is not None and tokens.expires_at - now <= leeway


def _expired(tokens: TokenSet, now: float) -> bool:
    return tokens.expires_at is not None and now >= tokens.expires_at


def _not_usable(account_id: str, held: Held) -> AccountStateError:
    why = f" ({held.reason})" if held.reason else ""
    advice = {
        Status.PENDING: "it is not connected yet; the person must finish its authorization link first",
        Status.EXPIRED: "the provider no longer accepts its grant; the person must connect it again",
        Status.REVOKED: "its credential was deleted; the person must connect it again to use it",
    }.get(held.status, "it holds no credential; the person must connect it again")
    return AccountStateError(f"Connected account {account_id!r} is {held.status.value}{why}: {advice}.")


# --- provider answers (no I/O) --------------------------------------------------------------------------------------

# An OAuth error code is a short ASCII word (RFC 6749 §5.2); anything else a provider puts there is not repeated.
_ERROR_CODE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def judge_token_response(status_code: int, body: bytes, *, provider: str, doing: str) -> dict[str, Any]:
    """A token endpoint's answer: its JSON object on success; `ProviderError` 'rejected' with the OAuth `error` code
    for a 4xx that carries one; 'unreachable' for anything else (a 5xx, a body that is not JSON, no access token).
    No message repeats the body, which may hold a token."""
    try:
        document = _json_object(body)
    except ValueError:
        raise ProviderError(
            f"The provider of {provider!r} answered HTTP {status_code} with a body that is not a JSON object when "
            f"asked to {doing}. Try again later; if it persists, check the connection's token_url.",
            reason="unreachable",
        ) from None
    if 200 <= status_code < 300:
        if isinstance(document.get("access_token"), str) and document["access_token"]:
            return document
        raise ProviderError(
            f"The provider of {provider!r} answered without an access token when asked to {doing}. Check that "
            "the connection's token_url is the provider's OAuth 2.0 token endpoint.",
            reason="unreachable",
        )
    error = document.get("error")
    if 400 <= status_code < 500 and isinstance(error, str):
        code = error if _ERROR_CODE.fullmatch(error) else None
        raise ProviderError(
            f"The provider of {provider!r} refused to {doing} ({code or 'an unreadable error code'}).",
            reason="rejected",
            error=code,
        )
    raise ProviderError(
        f"The provider of {provider!r} answered HTTP {status_code} when asked to {doing}. Try again later.",
        reason="unreachable",
    )


def _json_object(body: bytes) -> dict[str, Any]:
    document = json.loads(body)  # ValueError (JSONDecodeError, UnicodeDecodeError) when it is not JSON
    if not isinstance(document, dict):
        raise ValueError("not an object")
    return document


# --- the keeper -----------------------------------------------------------------------------------------------------

_ACCOUNTS = cast(Table, AccountRow.__table__)
_EVENTS = cast(Table, AccountEventRow.__table__)
_a, _e = _ACCOUNTS.c, _EVENTS.c

# One read gives the decision all it needs: status, reason, the sealed credential and the account's version.
_HELD = select(
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
).where(_a.id == bindparam("id"))
# The same read for every account asked for in one moment (PostgreSQL: one query instead of one per account).
_HELD_MANY = select(
    _a.id,
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
).where(_a.id.in_(bindparam("ids", expanding=True)))
_VERSION = select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == bindparam("id"))


class TokenKeeper:
    """The tokens of connected accounts: exchange, use, refresh (once for everyone), revoke.

    `leeway`: a token that expires within this many seconds (by `clock`) is refreshed before it is handed out.
    `http`: the client to reach providers with (one of the keeper's own, closed by `aclose`, when not given)."""

    def __init__(
        self,
        accounts: Accounts,
        vault: Vault,
        connections: Connections,
        *,
        clock: Clock,
        leeway: float = 60.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.accounts = accounts
        self.vault = vault
        self.connections = connections
        self.clock = clock
        self.leeway = leeway
        self._http = http
        self._own_http: httpx.AsyncClient | None = None
        self._locks = _Locks()
        self._reading: dict[str, _Read] = {}
        self._batch: dict[str, tuple[_Read, Connection]] = {}

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
            with anyio.fail_after(PROVIDER_TIMEOUT):
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
        when the account is in ERROR: a refresh may bring it back). An account in another status than ACTIVE or
        ERROR is `AccountStateError`. For an API key account: the key as `access_token`, never refreshed."""
        return (await self._usable(account))[1]

    async def refresh(self, account: Account, *, force: bool = False) -> TokenSet:
        """Refresh the account's tokens, once for every caller at the same time in any process: whoever comes second
        gets what the first stored. Without `force` only tokens that expire within `leeway` are refreshed (what
        `token` does); with it, unless the access token changed since this call began. `invalid_grant` turns the
        account EXPIRED and a provider that cannot be reached turns it ERROR, each then raised as `ProviderError`."""
        connection = self.connections[account.connection]
        seen = await self._read(account.id, connection, join=False)
        return (await self._refresh(account, connection, seen=seen, force=force))[1]

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
        return _AccountAuth(self, account, connection)

    # -- disconnecting --

    async def revoke(self, account: Account) -> None:
        """Revoke the grant at the provider (RFC 7009; the refresh token, which revokes the grant, and the access
        token only when there is no refresh token or its revocation was not accepted), when the connection has a
        revocation endpoint; then turn the account REVOKED, which deletes the credential. A provider that cannot be
        reached is logged and the credential deleted all the same. Runs under the refresh locks, so that no refresh
        stores new tokens behind it."""
        connection = self.connections[account.connection]
        async with self._locks.hold(account.id), self.accounts.store.locked(_lock_key(account.id)) as conn:
            with anyio.CancelScope(shield=True):
                held = await self._read_locked(conn, account.id, connection)
                if held is None:
                    raise AccountStateError(f"There is no connected account {account.id!r}.")
                transition(held.status, Event.REVOKED)  # refused before anything is sent
                if isinstance(connection, OAuthConnection) and held.tokens is not None:
                    await self._revoke_at_provider(account, connection, held.tokens)
                now = self.clock.now()
                await conn.run_sync(lambda sync: _change(sync, account.id, held, Event.REVOKED, now=now))
                await conn.commit()
        logger.info("connected account revoked", extra={"account_id": account.id, "connection": account.connection})

    # -- internals --

    def _client(self) -> httpx.AsyncClient:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            self._own_http = httpx.AsyncClient(timeout=PROVIDER_TIMEOUT, follow_redirects=False)
        return self._own_http

    async def _usable(self, account: Account) -> tuple[Held, TokenSet]:
        """The tokens to use, and the account as it was when they were current (what a later forced refresh compares
        against)."""
        connection = self.connections[account.connection]
        held = await self._read(account.id, connection)
        step = decide(account.id, held, seen=None, now=self.clock.now(), leeway=self.leeway, force=False)
        if isinstance(step, Use):
            assert held is not None
            return held, step.tokens
        if isinstance(step, Refuse):
            raise step.error
        return await self._refresh(account, connection, seen=held, force=False)

    async def _refresh(
        self, account: Account, connection: Connection, *, seen: Held | None, force: bool
    ) -> tuple[Held, TokenSet]:
        outcome: Held | AskbackError
        async with self._locks.hold(account.id):
            # Another coroutine of this process may have refreshed while this one waited: a plain read tells.
            held = await self._read(account.id, connection, join=False)
            step = decide(account.id, held, seen=seen, now=self.clock.now(), leeway=self.leeway, force=force)
            if isinstance(step, Refresh | Lapse):
                async with self.accounts.store.locked(_lock_key(account.id)) as conn:
                    # The hazard: once the provider has rotated the refresh token, the only copy of the new one is
                    # in this task until the commit; a cancelled caller must not take it down with it.
                    with anyio.CancelScope(shield=True):
                        held = await self._read_locked(conn, account.id, connection)
                        step = decide(
                            account.id, held, seen=seen, now=self.clock.now(), leeway=self.leeway, force=force
                        )
                        outcome = await self._act(conn, account, connection, held, step)
                        await conn.commit()
            else:
                outcome = _settled(held, step)
        if isinstance(outcome, AskbackError):
            raise outcome
        assert outcome.tokens is not None
        return outcome, outcome.tokens

    async def _act(
        self,
        conn: AsyncConnection,
        account: Account,
        connection: Connection,
        held: Held | None,
        step: Use | Refresh | Lapse | Refuse,
    ) -> Held | AskbackError:
        """Carry out the decision made under both locks, writing through the locked connection: the account as it
        now is, with the tokens to hand out, or the error to raise."""
        if isinstance(step, Use | Refuse):
            return _settled(held, step)
        assert held is not None
        before, now = held, self.clock.now()
        if isinstance(step, Lapse):
            reason = "the access token expired and the provider issued no refresh token"
            await conn.run_sync(lambda sync: _change(sync, account.id, before, Event.REJECTED, now=now, reason=reason))
            return ProviderError(
                f"Connected account {account.id!r} can no longer be used: {reason}. It is now EXPIRED; the person must "
                "connect it again.",
                reason="rejected",
            )
        assert isinstance(connection, OAuthConnection) and step.tokens.refresh_token is not None
        try:
            body = await self._token_call(
                refresh_request(connection, step.tokens.refresh_token),
                connection,
                doing=f"refresh connected account {account.id!r}",
            )
        except ProviderError as exc:
            return await self._refresh_failed(conn, account, before, exc, now=now)
        fresh = TokenSet.from_response(body, now=now, previous=step.tokens)
        sealed = self.vault.seal(account.id, fresh.to_vault())
        version = await conn.run_sync(
            lambda sync: _change(
                sync, account.id, before, Event.REFRESHED, now=now, credential=sealed, expires_at=fresh.expires_at
            )
        )
        logger.info("connected account refreshed", extra={"account_id": account.id, "connection": account.connection})
        return Held(Status.ACTIVE, None, fresh, version, sealed=sealed)

    async def _refresh_failed(
        self, conn: AsyncConnection, account: Account, before: Held, exc: ProviderError, *, now: float
    ) -> ProviderError:
        if exc.reason == "rejected" and exc.error == "invalid_grant":
            event = Event.REJECTED
            reason = "the provider refused the refresh token (invalid_grant): the grant was revoked or has expired"
            error = ProviderError(
                f"Connected account {account.id!r} is now EXPIRED: {reason}. The person must connect it again.",
                reason="rejected",
                error=exc.error,
            )
        else:
            # Any other refusal (invalid_client, a bad answer) is not the person's grant failing: a fixed
            # configuration or a later attempt may work, so the account is ERROR, not EXPIRED.
            event = Event.UNREACHABLE
            reason = str(exc)
            error = ProviderError(
                f"Connected account {account.id!r} could not be refreshed: {reason} The account is ERROR until a "
                "refresh succeeds.",
                reason="unreachable",
                error=exc.error,
            )
        await conn.run_sync(lambda sync: _change(sync, account.id, before, event, now=now, reason=reason))
        logger.warning(
            "connected account refresh failed",
            extra={"account_id": account.id, "connection": account.connection, "error": exc.error, "event": event},
        )
        return error

    async def _token_call(self, request: FormRequest, connection: OAuthConnection, *, doing: str) -> dict[str, Any]:
        try:
            with anyio.fail_after(PROVIDER_TIMEOUT):
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
                with anyio.fail_after(PROVIDER_TIMEOUT):
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

    async def _read(self, account_id: str, connection: Connection, *, join: bool = True) -> Held | None:
        """What the database holds for the account. Callers that look at one account at the same moment share one
        read (`join`): a burst of tool calls for one account costs one query, not one per call. On PostgreSQL, the
        accounts asked for in the same moment are read together, in one query. A caller that must see what was
        committed after it began (the re-check after waiting for the lock) does not join."""
        flight = self._reading.get(account_id) if join else None
        if flight is not None:
            await flight.done.wait()
            if flight.ok:
                return flight.held
        elif join and self.accounts.store.engine.dialect.name == "postgresql":
            flight = _Read()
            self._reading[account_id] = flight
            self._batch[account_id] = (flight, connection)
            if len(self._batch) == 1:
                await self._read_batch()
            await flight.done.wait()
            if flight.ok:
                return flight.held
        else:
            flight = _Read()
            if join:
                self._reading[account_id] = flight
            try:
                row = await self.accounts.store.transaction(
                    lambda conn: conn.execute(_HELD, {"id": account_id}).first(), doing=f"read account {account_id!r}"
                )
                flight.held, flight.ok = self._held(account_id, connection, row), True
                return flight.held
            finally:
                if self._reading.get(account_id) is flight:
                    del self._reading[account_id]
                flight.done.set()
        # The read this caller joined failed (or was cancelled with its caller): read again, alone.
        return await self._read(account_id, connection, join=False)

    async def _read_batch(self) -> None:
        """Read every account queued in this moment with one query. The first caller queues, lets the others that are
        ready run up to their own read (one checkpoint), then reads for all of them."""
        try:
            await anyio.lowlevel.checkpoint()
        finally:
            batch, self._batch = self._batch, {}
        try:
            with anyio.CancelScope(shield=True):
                rows = await self.accounts.store.read(
                    lambda conn: conn.execute(_HELD_MANY, {"ids": list(batch)}).all(),
                    doing=f"read {len(batch)} connected account(s)",
                )
            by_id = {row.id: row for row in rows}
            for account_id, (flight, connection) in batch.items():
                try:
                    flight.held, flight.ok = self._held(account_id, connection, by_id.get(account_id)), True
                except Exception:
                    flight.ok = False
        finally:
            for account_id, (flight, _) in batch.items():
                if self._reading.get(account_id) is flight:
                    del self._reading[account_id]
                flight.done.set()

    async def _read_locked(self, conn: AsyncConnection, account_id: str, connection: Connection) -> Held | None:
        row = (await conn.execute(_HELD, {"id": account_id})).first()
        return self._held(account_id, connection, row)

    def _held(self, account_id: str, connection: Connection, row: Any) -> Held | None:
        if row is None:
            return None
        tokens = None
        if row.credential is not None:
            stored = self.vault.open(account_id, row.credential)
            if isinstance(connection, ApiKeyConnection):
                tokens = TokenSet(access_token=str(stored["api_key"]), token_type=connection.scheme or "")
            else:
                tokens = TokenSet.from_vault(stored)
        return Held(Status(row.status), row.reason, tokens, int(row.version), sealed=row.credential)


def _lock_key(account_id: str) -> str:
    return f"askback.accounts.refresh:{account_id}"


def _change(
    conn: sa.Connection,
    account_id: str,
    before: Held,
    event: Event,
    *,
    now: float,
    reason: str | None = None,
    credential: Any = KEEP,
    expires_at: float | None = None,
) -> int:
    """`Accounts.change` on the locked connection, only if the credential is still the one read under the lock.
    Returns the account's new version (the id of the lifecycle event recorded)."""
    apply_change(
        conn,
        account_id,
        before.status,
        event,
        now=now,
        reason=reason,
        credential=credential,
        expires_at=expires_at,
        was=before.sealed,
    )
    return int(conn.execute(_VERSION, {"id": account_id}).scalar_one())


def _settled(held: Held | None, step: Use | Refuse) -> Held | AskbackError:
    if isinstance(step, Refuse):
        return step.error
    assert held is not None
    return held


@dataclass
class _Read:
    """One read of an account that callers arriving meanwhile wait for instead of reading again."""

    done: anyio.Event = field(default_factory=anyio.Event)
    ok: bool = False
    held: Held | None = None


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


def _authorization(connection: Connection, tokens: TokenSet) -> dict[str, str]:
    if isinstance(connection, ApiKeyConnection):
        return api_key_headers(connection, tokens.access_token)
    # RFC 6750's scheme is case-insensitive, but some resource servers compare it exactly; providers answer "bearer".
    scheme = "Bearer" if tokens.token_type.lower() == "bearer" else tokens.token_type
    return {"Authorization": f"{scheme} {tokens.access_token}"}


class _AccountAuth(httpx.Auth):
    """`TokenKeeper.auth`: the credential is read (and refreshed) when each request is sent, and goes nowhere but
    into that request's headers."""

    # Read the body first, so that the request can be sent a second time after a refresh.
    requires_request_body = True

    def __init__(self, keeper: TokenKeeper, account: Account, connection: Connection) -> None:
        self._keeper = keeper
        self._account = account
        self._connection = connection

    def __repr__(self) -> str:
        return f"<auth for connected account {self._account.id!r} ({self._account.connection})>"

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        raise RuntimeError("A connected account's auth reads the vault asynchronously: use it with httpx.AsyncClient.")
        yield request  # pragma: no cover (makes this a generator)

    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        keeper, account, connection = self._keeper, self._account, self._connection
        held, tokens = await keeper._usable(account)
        request.headers.update(_authorization(connection, tokens))
        response = yield request
        if response.status_code != 401 or isinstance(connection, ApiKeyConnection) or tokens.refresh_token is None:
            return
        _, fresh = await keeper._refresh(account, connection, seen=held, force=True)
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

    `http` puts the credential on each request, refreshes it before it expires and once after a 401. Close it with
    `await account.aclose()` (or use `async with account:`). `token()` is the escape hatch for a library that must be
    given the token itself (an SDK with its own HTTP client): the token then leaves askback's hands, so prefer `http`.
    """

    def __init__(self, account: Account, keeper: TokenKeeper) -> None:
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
        """An `httpx.AsyncClient` whose requests carry the account's credential (made on first use)."""
        if self._http is None:
            self._http = httpx.AsyncClient(auth=self._keeper.auth(self._account))
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
