"""Tokens: exchanging an authorization code, refreshing before expiry (single-flight across coroutines, processes
and instances), revoking, and using an account over HTTP without ever handing its token to the caller.

`TokenKeeper` is what the service, the hosted pages and tool handlers call; a handler gets a `ConnectedAccount`,
whose `http` client adds the credential to each request itself. Whether to use, refresh or give up on the credential
the database holds is one pure function, `decide`; the keeper does the I/O around it.

Refreshing once. A provider that rotates refresh tokens (oidc-provider, Google, Microsoft...) accepts each one
once: a second refresh with the same token is `invalid_grant`, and reuse detection then revokes the whole grant. So
of all the callers that find an account's token expiring, in every process and instance, exactly one may call the
provider, and the others must take what it stored. And no database lock is held while the provider is asked: on
SQLite that would be the database's write lock, and every other writer in every process would wait for the provider.
So the one caller is chosen by a claim, a lease on the account's row:

1. an `anyio.Lock` per account id in this keeper, so that one coroutine per process goes on to the database (the
   others wait here, and find the fresh token when it is their turn);
2. the claim: one short transaction sets `refresh_owner` (a fresh random id) and `refresh_until` (now + `lease`, by
   the clock) on the account's row, only if nobody holds an unexpired claim and the row is still as the caller read
   it (status, sealed credential, failure count). On PostgreSQL the row is locked only for that UPDATE; on SQLite
   the write lock only for that transaction. Whoever's UPDATE changed the row won; the others read again;
3. the winner asks the provider with no transaction open (bounded by `provider_timeout`), then writes the outcome
   in a second short transaction: the rotated tokens, sealed (or EXPIRED / ERROR with the reason), through the
   status table, only over the very credential and status it read, and lets the claim go in the same transaction.
   A failure is written only while the claim is still the winner's (a holder that outlived its lease must not mark
   ERROR an account another holder is refreshing); rotated tokens are written as long as the credential is still
   the one read, since they are the only copy of the new refresh token;
4. everyone else (another instance, or another keeper in this process) who finds the account claimed waits on the
   claim, not on the database: it reads the account again every `poll` seconds (real time) until the claim is let
   go, and takes the new token it finds. A claim whose holder died ends at `refresh_until` (by the clock; two
   provider timeouts by default), and then the next caller takes it over.

After waiting, a caller decides again: if the account changed since the caller first looked (its latest lifecycle
event is not the one the caller saw) and now holds a fresh token (or, forced, another token than the one the
caller used), that is the answer and the provider is not called; if the change was a failed attempt (ERROR), the
caller shares that failure instead of trying again at once. A reconnect (`Accounts.change`, which takes no claim)
is never overwritten: every write of the keeper is conditional on the credential it read.

ERROR recovers by itself, without hammering a provider that is down. A refresh that fails for any reason but the
provider's refusal of the grant (`invalid_grant`: EXPIRED, the person must connect again) turns the account ERROR
and sets `retry_at`: `backoff.first` seconds after the first failure, doubling with each failure in a row, at most
`backoff.cap`. Until then every caller, in every instance, gets `ProviderError` 'unreachable' saying when the
provider is tried again, and the provider is not contacted; the first call after it refreshes, and a refresh that
works brings the account back to ACTIVE and clears the backoff.

It cannot deadlock: the in-process lock is always taken first, and no transaction is ever open while the keeper
waits for the provider or for another's claim.

From the claim to the outcome's write the keeper runs shielded from cancellation: a caller that goes away after the
provider rotated the refresh token must not drop the only copy of the new one, nor leave its claim behind.

Revoking takes the same claim, so that no refresh can store new tokens behind it.

Handing out a token that needs no refresh is one read of the account's row (status, sealed credential, version) and
one vault open; callers asking for one account at the same moment share the read.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import secrets
from collections.abc import AsyncGenerator, AsyncIterator, Generator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal, cast

import anyio
import anyio.lowlevel
import httpx
import sqlalchemy as sa
from sqlalchemy import Table, bindparam, func, or_, select, update

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
    origin,
    refresh_request,
    revocation_request,
    token_request,
)
from askback.accounts.repository import KEEP, Account, Accounts, apply_change
from askback.accounts.status import Event, Status, transition
from askback.accounts.vault import Vault
from askback.clock import Clock
from askback.errors import AccountStateError, AskbackError, ConfigurationError, CredentialOriginError, ProviderError

__all__ = [
    "PROVIDER_TIMEOUT",
    "Backoff",
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

# The longest one request to a provider may take, connecting included (`TokenKeeper(provider_timeout=...)`). A refresh
# claim lasts twice as long, so that only a holder that died loses it.
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
    failures: int = 0
    """Refreshes that failed in a row (an account in ERROR)."""
    retry_at: float | None = None
    """An account in ERROR: the clock time before which its provider is not asked again (the backoff)."""
    claimed_until: float | None = None
    """When the refresh claim someone holds on the account expires; `None` when nobody holds one."""

    def claimed(self, now: float) -> bool:
        """Someone holds an unexpired refresh claim on the account: they are asking the provider now."""
        return self.claimed_until is not None and now < self.claimed_until


@dataclass(frozen=True)
class Use:
    """The held token is good: hand it out."""

    tokens: TokenSet
    kind: Literal["use"] = "use"


@dataclass(frozen=True)
class Refresh:
    """Call the provider with this refresh token (only while holding the account's refresh claim)."""

    tokens: TokenSet
    kind: Literal["refresh"] = "refresh"


@dataclass(frozen=True)
class Lapse:
    """The access token has expired and there is no refresh token: the account is EXPIRED."""

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
    it back), once its backoff (`retry_at`) has passed: before that, the provider is not asked. `force` (a resource
    answered 401) refreshes unless the held access token is no longer the one `seen`. When the account changed since
    `seen`, someone else acted while this caller waited: their fresh token is used, their failure (ERROR) shared,
    rather than calling the provider again."""
    if held is None:
        return Refuse(AccountStateError(f"There is no connected account {account_id!r}; connect the account first."))
    if held.status not in _USABLE or held.tokens is None:
        return Refuse(_not_usable(account_id, held))
    tokens = held.tokens
    if seen is not None and held.version != seen.version:
        if held.status is Status.ERROR:
            return Refuse(_backing_off(account_id, held, now, shared=True))
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
    if held.status is Status.ERROR and held.retry_at is not None and now < held.retry_at:
        return Refuse(_backing_off(account_id, held, now, shared=False))
    return Refresh(tokens)


def _backing_off(account_id: str, held: Held, now: float, *, shared: bool) -> ProviderError:
    why = (held.reason or "the provider could not be reached").rstrip(". ")
    if shared:
        head = f"Connected account {account_id!r} could not be refreshed just now, while this call waited ({why})."
    else:
        head = f"Connected account {account_id!r} is ERROR: its last refresh failed ({why})."
    if held.retry_at is not None and held.retry_at > now:
        tail = (
            f" Its provider is not asked again for {math.ceil(held.retry_at - now)} s, so nothing was sent for this "
            "call; the first call after that refreshes it."
        )
    else:
        tail = " Nothing was sent again for this call; the next call that needs it asks its provider again."
    return ProviderError(head + tail, reason="unreachable", retry_at=held.retry_at)


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


@dataclass(frozen=True)
class Backoff:
    """How long an account in ERROR waits before its provider is asked again: `first` seconds after the first
    refresh that failed, twice as long after each further failure in a row, never more than `cap` seconds."""

    first: float = 1.0
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        """The wait after the `failures`-th failure in a row (the first is 1)."""
        return min(self.cap, self.first * 2.0 ** min(max(failures - 1, 0), 64))


# --- the keeper -----------------------------------------------------------------------------------------------------

_ACCOUNTS = cast(Table, AccountRow.__table__)
_EVENTS = cast(Table, AccountEventRow.__table__)
_a, _e = _ACCOUNTS.c, _EVENTS.c

_CLAIM_COLUMNS = (_a.failures, _a.retry_at, _a.refresh_owner, _a.refresh_until)
# One read gives the decision all it needs: status, reason, the sealed credential, the account's version, its
# backoff and who holds its refresh claim.
_HELD = select(
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
    *_CLAIM_COLUMNS,
).where(_a.id == bindparam("id"))
# The same read for every account asked for in one moment (PostgreSQL: one query instead of one per account).
_HELD_MANY = select(
    _a.id,
    _a.status,
    _a.reason,
    _a.credential,
    select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == _a.id).scalar_subquery().label("version"),
    *_CLAIM_COLUMNS,
).where(_a.id.in_(bindparam("ids", expanding=True)))
_VERSION = select(func.coalesce(func.max(_e.id), 0)).where(_e.account_id == bindparam("id"))
_AS_READ = select(_a.status, _a.credential).where(_a.id == bindparam("id"))
# The refresh claim: taken only when nobody holds an unexpired one and the row is still as the claimant read it
# (every outcome the keeper writes changes the status, the credential or the failure count), so that a caller who
# read before another's refresh finished cannot claim and refresh again with a used refresh token.
_CLAIM = (
    update(_ACCOUNTS)
    .where(
        _a.id == bindparam("b_id"),
        _a.status == bindparam("b_status"),
        _a.credential.is_not_distinct_from(bindparam("b_was")),
        _a.failures == bindparam("b_failures"),
        or_(_a.refresh_owner.is_(None), _a.refresh_until <= bindparam("b_now")),
    )
    .values(refresh_owner=bindparam("b_owner"), refresh_until=bindparam("b_until"))
)
_RELEASE = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"), _a.refresh_owner == bindparam("b_owner"))
    .values(refresh_owner=None, refresh_until=None)
)
_SET_BACKOFF = (
    update(_ACCOUNTS)
    .where(_a.id == bindparam("b_id"))
    .values(failures=bindparam("b_failures"), retry_at=bindparam("b_retry_at"))
)


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
        seen = await self._read(account.id, connection, join=False)
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
        return _AccountAuth(self, account, connection)

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
                held = await self._read(account.id, connection, join=False)
                if held is None:
                    raise AccountStateError(f"There is no connected account {account.id!r}.")
                transition(held.status, Event.REVOKED)  # refused before anything is sent
                if held.claimed(self.clock.now()):
                    await self._await_claim(held)
                    continue
                with anyio.CancelScope(shield=True):
                    async with self._claim(account.id, held) as claim:
                        if claim is None:
                            continue  # someone was quicker: look again
                        if isinstance(connection, OAuthConnection) and held.tokens is not None:
                            await self._revoke_at_provider(account, connection, held.tokens)
                        if await self._write(claim, held, Event.REVOKED) is not None:
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
        outcome: Held | AskbackError | None = None
        async with self._locks.hold(account.id):
            while outcome is None:
                # Another coroutine or instance may have refreshed while this one waited: a plain read tells.
                held = await self._read(account.id, connection, join=False)
                now = self.clock.now()
                step = decide(account.id, held, seen=seen, now=now, leeway=self.leeway, force=force)
                if isinstance(step, Use | Refuse):
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
                        async with self._claim(account.id, held) as claim:
                            if claim is not None:
                                assert isinstance(connection, OAuthConnection)
                                outcome = await self._refresh_claimed(claim, account, connection, held, step)
                # `None`: someone else was quicker, or the account changed meanwhile (a reconnect): look again.
        if isinstance(outcome, AskbackError):
            raise outcome
        assert outcome.tokens is not None
        return outcome, outcome.tokens

    async def _refresh_claimed(
        self, claim: _Claim, account: Account, connection: OAuthConnection, held: Held, step: Refresh
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
        version = await self._write(
            claim, held, Event.REFRESHED, credential=sealed, expires_at=fresh.expires_at, failures=0, retry_at=None
        )
        if version is None:
            return None
        logger.info("connected account refreshed", extra={"account_id": account.id, "connection": account.connection})
        return Held(Status.ACTIVE, None, fresh, version, sealed=sealed)

    async def _refresh_failed(
        self, claim: _Claim, account: Account, before: Held, exc: ProviderError
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
        written = await self._write(
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
        if await self._write(None, held, Event.REJECTED, reason=reason, account_id=account.id) is None:
            return None
        return ProviderError(
            f"Connected account {account.id!r} can no longer be used: {reason}. It is now EXPIRED; the person must "
            "connect it again.",
            reason="rejected",
        )

    @asynccontextmanager
    async def _claim(self, account_id: str, held: Held) -> AsyncIterator[_Claim | None]:
        """The account's refresh claim, taken in one short transaction if nobody holds it and the account is still
        as `held` (`None` otherwise), and let go at the end unless the outcome's write did."""
        claim = _Claim(account_id, secrets.token_urlsafe(12))
        now = self.clock.now()
        params = {
            "b_id": account_id,
            "b_status": held.status.value,
            "b_was": held.sealed,
            "b_failures": held.failures,
            "b_now": now,
            "b_owner": claim.owner,
            "b_until": now + self.lease,
        }
        won = await self.accounts.store.transaction(
            lambda conn: conn.execute(_CLAIM, params).rowcount == 1,
            doing=f"claim the refresh of account {account_id!r}",
            immediate=True,
        )
        try:
            yield claim if won else None
        finally:
            if won and not claim.released:
                # Left behind, the claim would only make others wait for it to expire.
                with contextlib.suppress(AskbackError):
                    await self.accounts.store.transaction(
                        lambda conn: conn.execute(_RELEASE, {"b_id": account_id, "b_owner": claim.owner}),
                        doing=f"let go of the refresh claim of account {account_id!r}",
                    )

    async def _write(
        self,
        claim: _Claim | None,
        before: Held,
        event: Event,
        *,
        account_id: str | None = None,
        reason: str | None = None,
        credential: Any = KEEP,
        expires_at: float | None = None,
        failures: int = 0,
        retry_at: float | None = None,
        needs_claim: bool = False,
    ) -> int | None:
        """Write an outcome in one short transaction: the status change through the table (`Accounts.change`'s,
        with its lifecycle event), only over the status and credential `before` held, so that a reconnect made
        meanwhile is never overwritten; the backoff; and the claim let go. `needs_claim`: only while the claim is
        still this caller's. Returns the account's new version, or `None` when nothing was written."""
        if account_id is None:
            assert claim is not None
            account_id = claim.account_id
        now = self.clock.now()

        def write(conn: sa.Connection) -> int | None:
            if claim is not None:
                kept = conn.execute(_RELEASE, {"b_id": account_id, "b_owner": claim.owner}).rowcount == 1
                if needs_claim and not kept:
                    return None
            row = conn.execute(_AS_READ, {"id": account_id}).first()
            if row is None or row.status != before.status.value or row.credential != before.sealed:
                return None
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
            conn.execute(_SET_BACKOFF, {"b_id": account_id, "b_failures": failures, "b_retry_at": retry_at})
            return int(conn.execute(_VERSION, {"id": account_id}).scalar_one())

        try:
            version = await self.accounts.store.transaction(
                write, doing=f"record the {event.value} of account {account_id!r}", immediate=True
            )
        except AccountStateError:
            return None  # changed between the check and the write (PostgreSQL, where the claim was lost)
        if claim is not None:
            claim.released = True
        return version

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

    async def _read(self, account_id: str, connection: Connection, *, join: bool = True) -> Held | None:
        """What the database holds for the account. Callers that look at one account at the same moment share one
        read (`join`): a burst of tool calls for one account costs one query, not one per call. On PostgreSQL, the
        accounts asked for in the same moment are read together, in one query. A caller that must see what was
        committed after it began (the re-check after waiting for the lock or a claim) does not join."""
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
        claimed_until = row.refresh_until if row.refresh_owner is not None else None
        return Held(
            Status(row.status),
            row.reason,
            tokens,
            int(row.version),
            sealed=row.credential,
            failures=int(row.failures or 0),
            retry_at=row.retry_at,
            claimed_until=claimed_until,
        )


def _settled(held: Held | None, step: Use | Refuse) -> Held | AskbackError:
    if isinstance(step, Refuse):
        return step.error
    assert held is not None
    return held


@dataclass
class _Claim:
    """A refresh claim this keeper holds on an account: `owner` is written in the account's row."""

    account_id: str
    owner: str
    released: bool = False


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


class _AccountAuth(httpx.Auth):
    """`TokenKeeper.auth`: the credential is read (and refreshed) when each request is sent, and goes nowhere but
    into that request's headers, and only for a request to one of the connection's origins: any other request is
    refused (`CredentialOriginError`) before anything is read or sent."""

    # Read the body first, so that the request can be sent a second time after a refresh.
    requires_request_body = True

    def __init__(self, keeper: TokenKeeper, account: Account, connection: Connection) -> None:
        self._keeper = keeper
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
        keeper, account, connection = self._keeper, self._account, self._connection
        if (refusal := _origin_refusal(connection, request.url)) is not None:
            # Refused, not sent bare: a request that quietly lost its credential would fail later, and less clearly.
            raise CredentialOriginError(refusal)
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

    `http` puts the credential on each request, refreshes it before it expires and once after a 401. It sends only
    to the connection's `origins`: a request to any other origin raises `CredentialOriginError` and is not sent, and a
    redirect to another origin is followed without the credential. Close it with `await account.aclose()` (or use
    `async with account:`). `token()` is the escape hatch for a library that must be
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
        """An `httpx.AsyncClient` whose requests carry the account's credential, to the connection's origins only (made
        on first use)."""
        if self._http is None:
            auth = self._keeper.auth(self._account)
            hooks = [auth.guard_hop] if isinstance(auth, _AccountAuth) else []
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
